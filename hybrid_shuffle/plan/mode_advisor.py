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
   session's slots.  While a region needs more slots than the session has, the
   auto edge of that region joining the most subtasks becomes ``hybrid-selective``
   (producers and consumers may still overlap, but need not hold their slots
   together).

Not yet: the memory side (a region whose in-flight buffers would pass
``shuffle.memory_budget``).  The bound ``producers x consumers x credits x
buffer_size`` is 1 GiB for 8 x 8 subtasks at the defaults, far above what such
an edge holds, so it would make every wide edge hybrid; a useful test needs the
bytes an edge carries, which only a run knows.

Each auto edge keeps its reason (``JobEdge.mode_reason``), which ``explain()``
prints.  Plain Python, no Ray.
"""

from __future__ import annotations

from hybrid_shuffle.plan.graph import JobEdge, JobGraph, ModeOrigin
from hybrid_shuffle.plan.regions import pipelined_regions
from hybrid_shuffle.shuffle.partition_type import Mode, partition_type

__all__ = ["advise_modes"]

_EXTERNAL = "external"


def advise_modes(graph: JobGraph, slots: int) -> None:
    """Give every ``ModeOrigin.AUTO`` edge of ``graph`` its mode and reason (see the
    module docstring); the output-on-EOF rule ran before."""
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
    while True:
        regions = pipelined_regions(graph)
        over = next((r for r in regions if r.slots > slots), None)
        if over is None:
            break
        inside = set(over.edges)
        candidates = [e for e in auto if e.name in inside and e.partition_type.must_be_pipelined()]
        if not candidates:
            break  # explicit pipelined edges: the slot check names them
        widest = max(candidates, key=lambda e: _subtasks(graph, e))
        _set(
            widest,
            Mode.HYBRID_SELECTIVE,
            f"pipelined, its region would need {over.slots} slots at once (the session has "
            f"{slots})",
        )
    regions = pipelined_regions(graph)
    for edge in auto:
        if edge.partition_type.must_be_pipelined() and not edge.mode_reason:
            region = next(r for r in regions if edge.name in r.edges)
            edge.mode_reason = f"its region fits: {region.slots} of {slots} slots"


def _set(edge: JobEdge, mode: Mode, reason: str) -> None:
    edge.partition_type = partition_type(mode)
    edge.mode_reason = reason


def _subtasks(graph: JobGraph, edge: JobEdge) -> int:
    return graph.vertices[edge.source].parallelism + graph.vertices[edge.target].parallelism
