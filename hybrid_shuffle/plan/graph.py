"""The job graph: vertices (operator chains) joined by named edges.

This is the planner's output and the scheduler's input.  Everything here is
plain, picklable data; nothing touches Ray.  Identity types are ``NewType`` so a
vertex id is never mistaken for a subtask index.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NewType

from hybrid_shuffle.operators.base import Operator
from hybrid_shuffle.shuffle.partition_type import Mode, ResultPartitionType
from hybrid_shuffle.shuffle.routing import Partitioner

__all__ = [
    "EdgeName",
    "JobEdge",
    "JobGraph",
    "JobVertex",
    "ModeOrigin",
    "VertexId",
]

VertexId = NewType("VertexId", int)
EdgeName = NewType("EdgeName", str)


class ModeOrigin(enum.StrEnum):
    """Where an edge's effective mode came from (YAML wins over code over the default)."""

    YAML = "yaml"
    CODE = "code"
    DEFAULT = "default"


@dataclass
class JobVertex:
    """A chain of operators run as one task per subtask."""

    id: VertexId
    name: str
    parallelism: int
    operators: list[Operator]
    #: the source partitions (ObjectRefs) of each subtask, for source vertices
    source_splits: list[list[object]] | None = None
    inputs: list[JobEdge] = field(default_factory=list)
    outputs: list[JobEdge] = field(default_factory=list)

    @property
    def is_source(self) -> bool:
        return self.source_splits is not None


@dataclass
class JobEdge:
    """An exchange between two vertices, named for YAML and explain."""

    name: EdgeName
    source: VertexId
    target: VertexId
    #: which input of the target's head operator this edge feeds (1 = join build side)
    target_input: int
    partitioner: Partitioner
    partition_type: ResultPartitionType
    #: where the effective mode came from
    mode_origin: ModeOrigin = ModeOrigin.DEFAULT
    #: runs in each producer subtask on what it sends over this edge, before partitioning
    #: (Spark's map-side combine): a ``PartialAggregate`` in front of a final aggregate
    combiner: Operator | None = None

    @property
    def mode(self) -> Mode:
        return self.partition_type.mode


@dataclass
class JobGraph:
    job_name: str
    vertices: dict[VertexId, JobVertex]
    edges: list[JobEdge]
    #: the vertex whose output the job returns to the driver
    sink: VertexId

    def edge(self, name: str) -> JobEdge:
        for e in self.edges:
            if e.name == name:
                return e
        raise KeyError(name)

    def topological_order(self) -> list[VertexId]:
        """Vertices, producers before consumers (ids are assigned in build order)."""
        indegree = {v: len(self.vertices[v].inputs) for v in self.vertices}
        ready = sorted(v for v, d in indegree.items() if d == 0)
        order: list[VertexId] = []
        while ready:
            v = ready.pop(0)
            order.append(v)
            for e in self.vertices[v].outputs:
                indegree[e.target] -= 1
                if indegree[e.target] == 0:
                    ready.append(e.target)
                    ready.sort()
        return order
