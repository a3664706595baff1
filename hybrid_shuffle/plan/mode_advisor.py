"""``shuffle.default_mode: auto``: the planner picks each unset edge's mode, and says why.

Flink makes the user choose one shuffle mode for a whole job; this project lets
each edge have its own, and the advisor picks one for every edge that code and
YAML leave unset (``ModeOrigin.AUTO``), in this order:

1. An edge into an output-on-EOF operator, or upstream of one, is
   ``shuffle.batch_mode``: the output-on-EOF rule (``plan.output_on_eof``) takes
   those first, auto edges as default ones.
2. An edge whose partitions go to the external partition store is ``hybrid-full``:
   the store is there so that the data can be read again (failover), and only a
   re-readable mode keeps it.
3. Every other edge starts ``pipelined`` (the fastest when producer and consumer
   run at the same time), and stays so only where its pipelined region fits the
   session's slots and its memory budget.  While a region does not fit, one of
   its auto edges becomes ``hybrid-selective`` (producers and consumers may still
   overlap, but need not hold their slots together, and its buffers spill instead
   of piling up): for slots, the edge joining the most subtasks; for memory, the
   edge that may hold the most.

What "fits the memory budget" means: pipelined buffers never spill, a producer
holds up to ``shuffle.credits`` buffers of ``shuffle.buffer_size`` per consumer
subpartition before it waits, so one slot of a region may hold, per pipelined
edge, ``ceil(producers / slots of the region) x subpartitions x credits x
buffer_size``.  Their sum must stay within what one executor may keep, its
even share of ``shuffle.memory_budget``.  A bound, not a forecast: at the
defaults (4 credits of 4 MiB; 512 MiB over the slots) an 8 x 8 edge may hold
128 MiB a slot, within the 128 MiB share of 4 slots but not the 64 MiB of 8, so
on 8 slots it becomes hybrid-selective, which spills instead (and on this
machine is the faster mode there anyway: BENCHMARKS.md, ample slots).

Each auto edge keeps its reason (``JobEdge.mode_reason``), which ``explain()``
prints.  Plain Python, no Ray.
"""

from __future__ import annotations

from dataclasses import dataclass

from hybrid_shuffle._words import plural
from hybrid_shuffle.plan.graph import JobEdge, JobGraph, ModeOrigin
from hybrid_shuffle.plan.regions import Region, pipelined_regions
from hybrid_shuffle.shuffle.partition_type import Mode, partition_type
from hybrid_shuffle.sizes import format_size

__all__ = ["MemoryBound", "advise_modes"]

_EXTERNAL = "external"


@dataclass(frozen=True)
class MemoryBound:
    """What bounds a pipelined region's buffers (from ``shuffle``)."""

    #: bytes one executor may keep (its share of ``shuffle.memory_budget``)
    budget: int
    #: ``shuffle.credits`` x ``shuffle.buffer_size``: what a producer may hold per
    #: consumer subpartition before it waits
    per_subpartition: int


def advise_modes(graph: JobGraph, slots: int, memory: MemoryBound | None = None) -> None:
    """Give every ``ModeOrigin.AUTO`` edge of ``graph`` its mode and reason (see the
    module docstring); the output-on-EOF rule ran before.  Without ``memory``, only
    slots count."""
    auto = [e for e in graph.edges if e.mode_origin is ModeOrigin.AUTO]
    for edge in auto:
        if edge.service == _EXTERNAL:
            _set(
                edge,
                Mode.HYBRID_FULL,
                "its partitions are kept in the external store to be read again",
            )
            continue
        _set(edge, Mode.PIPELINED, "")
    stuck: set[int] = set()  # regions no auto edge can mend (explicit pipelined edges)
    while True:
        regions = pipelined_regions(graph)
        over = next(
            (r for r in regions if r.id not in stuck and _misfit(graph, r, slots, memory)), None
        )
        if over is None:
            break
        inside = set(over.edges)
        candidates = [e for e in auto if e.name in inside and e.partition_type.must_be_pipelined()]
        if not candidates:
            stuck.add(over.id)  # the slot check names its edges; memory is only advice
            continue
        if over.slots > slots:
            chosen = max(candidates, key=lambda e: _subtasks(graph, e))
            why = f"its region would need {over.slots} slots at once (the session has {slots})"
        else:
            assert memory is not None
            chosen = max(candidates, key=lambda e: _held(graph, e, over, memory))
            held = format_size(_region_held(graph, over, memory))
            why = (
                f"its region's buffers could reach {held} a slot (its share of "
                f"shuffle.memory_budget is {format_size(memory.budget)})"
            )
        _set(chosen, Mode.HYBRID_SELECTIVE, f"pipelined, {why}")
    regions = pipelined_regions(graph)
    for edge in auto:
        if edge.partition_type.must_be_pipelined() and not edge.mode_reason:
            region = next(r for r in regions if edge.name in r.edges)
            fits = f"its region fits: {region.slots} of {slots} {plural(slots, 'slot')}"
            if memory is not None:
                held = format_size(_region_held(graph, region, memory))
                fits += f", {held} of {format_size(memory.budget)} a slot"
            edge.mode_reason = fits


def _misfit(graph: JobGraph, region: Region, slots: int, memory: MemoryBound | None) -> bool:
    if region.slots > slots:
        return True
    return memory is not None and _region_held(graph, region, memory) > memory.budget


def _held(graph: JobGraph, edge: JobEdge, region: Region, memory: MemoryBound) -> int:
    """The most bytes ``edge``'s producers on one slot of ``region`` may hold."""
    producers = graph.vertices[edge.source].parallelism
    per_slot = -(-producers // max(region.slots, 1))
    subpartitions = (
        graph.vertices[edge.target].parallelism if edge.partitioner.is_all_to_all() else 1
    )
    return per_slot * subpartitions * memory.per_subpartition


def _region_held(graph: JobGraph, region: Region, memory: MemoryBound) -> int:
    inside = set(region.edges)
    return sum(_held(graph, e, region, memory) for e in graph.edges if e.name in inside)


def _set(edge: JobEdge, mode: Mode, reason: str) -> None:
    edge.partition_type = partition_type(mode)
    edge.mode_reason = reason


def _subtasks(graph: JobGraph, edge: JobEdge) -> int:
    return graph.vertices[edge.source].parallelism + graph.vertices[edge.target].parallelism
