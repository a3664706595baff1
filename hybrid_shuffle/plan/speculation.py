"""Which vertices speculative execution (Flink's FLIP-168) may give a second attempt.

A second attempt writes partitions of its own (their ids carry the attempt), and the
consumers read the winner's.  That is only sound when every output is kept whole and
read after its producer finished, or not yet read at all: blocking and hybrid-full
outputs, the sink's result partition, a cache's partition.  A pipelined or
hybrid-selective output is read once while it is written, so a running consumer would
read the loser's rows; a pipelined or hybrid-selective input cannot be read a second
time by the copy.  A co-located vertex runs subtask i beside its partners' by contract,
so it is not copied elsewhere.

A fact of the plan, so ``explain()`` shows it; the scheduler acts on it and adds the
checks that depend on the run (the task's producers all finished, no consumer of its
outputs has deployed) and when a task is slow (``runtime.speculation``).  Plain Python:
unit-tested on plain data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hybrid_shuffle.plan.graph import JobEdge, JobGraph, VertexId

__all__ = ["Link", "eligibility", "why_not"]


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
