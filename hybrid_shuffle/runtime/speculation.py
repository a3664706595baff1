"""Speculative execution (Flink's FLIP-168): which tasks may get a second attempt, and when.

Two plain rules, apart from the scheduler that acts on them:

- *Eligibility* (``why_not``, ``eligibility``): a second attempt writes partitions of
  its own (their ids carry the attempt), and the consumers read the winner's.  That is
  only sound when every output is kept whole and read after its producer finished, or
  not yet read at all: blocking and hybrid-full outputs, the sink's result partition, a
  cache's partition.  A pipelined or hybrid-selective output is read once while it is
  written, so a running consumer would read the loser's rows; a pipelined or
  hybrid-selective input cannot be read a second time by the copy.  A co-located vertex
  runs subtask i beside its partners' by contract, so it is not copied elsewhere.
  The scheduler adds the checks that depend on the run: the task's producers all
  finished, and no consumer of its outputs has deployed.
- *Slowness* (``slow_tasks``): once ``quantile`` of a vertex's subtasks have finished,
  a running subtask is slow past ``multiplier`` times their median runtime, and never
  before ``min_runtime``.

Plain Python: unit-tested on plain data.
"""

from __future__ import annotations

import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from hybrid_shuffle.config import SpeculationConfig

if TYPE_CHECKING:
    from hybrid_shuffle.plan.graph import JobEdge, JobGraph, VertexId

__all__ = ["Link", "eligibility", "slow_tasks", "why_not"]

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Link:
    """One edge of a vertex, as eligibility sees it."""

    edge: str
    #: the vertex at the other end
    other: str
    #: the edge's mode (``pipelined``, ``hybrid-selective``...)
    mode: str
    #: its partitions can be read again (blocking, hybrid-full)
    reconsumable: bool
    #: its consumer runs beside its producer, in one region (pipelined)
    pipelined: bool


def why_not(
    inputs: Sequence[Link], outputs: Sequence[Link], co_location: str | None = None
) -> str | None:
    """Why a vertex with these edges cannot be speculated, or None if it can."""
    if co_location is not None:
        return f"co-located with its partners ('{co_location}')"
    for link in outputs:
        if link.pipelined:
            return f"output pipelined to '{link.other}'"
        if not link.reconsumable:
            return f"output '{link.edge}' to '{link.other}' is {link.mode}, read once as written"
    for link in inputs:
        if link.pipelined:
            return f"input pipelined from '{link.other}'"
        if not link.reconsumable:
            return (
                f"input '{link.edge}' from '{link.other}' is {link.mode}, "
                "so a second attempt could not read it again"
            )
    return None


def _link(graph: JobGraph, edge: JobEdge, other: VertexId) -> Link:
    kind = edge.partition_type
    return Link(
        edge.name,
        graph.vertices[other].name,
        str(edge.mode),
        kind.reconsumable,
        kind.must_be_pipelined(),
    )


def eligibility(graph: JobGraph) -> dict[VertexId, str | None]:
    """Vertex id -> why it cannot be speculated (None: it can), for every vertex."""
    out: dict[VertexId, str | None] = {}
    for vid, vertex in graph.vertices.items():
        inputs = [_link(graph, e, e.source) for e in vertex.inputs]
        outputs = [_link(graph, e, e.target) for e in vertex.outputs]
        out[vid] = why_not(inputs, outputs, vertex.co_location)
    return out


def slow_tasks(
    finished: Sequence[float],
    running: Mapping[K, float],
    subtasks: int,
    config: SpeculationConfig,
) -> list[K]:
    """The running tasks of one vertex to speculate: ``finished`` are the runtimes
    (seconds) of its finished subtasks, ``running`` how long each running one has run,
    ``subtasks`` its parallelism.  Longest running first."""
    if not finished or not running or subtasks <= 0:
        return []
    if len(finished) / subtasks < config.quantile:
        return []
    threshold = max(config.multiplier * statistics.median(finished), config.min_runtime)
    slow = [task for task, seconds in running.items() if seconds > threshold]
    return sorted(slow, key=lambda task: -running[task])
