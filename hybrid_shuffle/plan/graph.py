"""The job graph: vertices (operator chains) joined by named edges.

This is the planner's output and the scheduler's input.  Everything here is
plain, picklable data; nothing touches Ray.  Identity types are ``NewType`` so a
vertex id is never mistaken for a subtask index.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NewType

from hybrid_shuffle.operators.base import Operator
from hybrid_shuffle.shuffle.partition_type import Mode, ResultPartitionType
from hybrid_shuffle.shuffle.routing import Partitioner

if TYPE_CHECKING:
    from hybrid_shuffle.plan.cache import Cache
    from hybrid_shuffle.plan.join_switch import JoinSwitch

__all__ = [
    "AdaptiveParallelism",
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
    """Where an edge's effective mode came from: YAML (``edges:`` by name, then
    ``edge_rules:``) wins over code, code over the planner's rules (``OUTPUT_ON_EOF``),
    those over the default."""

    YAML = "yaml"
    #: an ``edge_rules:`` entry matched the edge (``JobEdge.mode_rule`` says which)
    RULE = "edge_rules"
    CODE = "code"
    DEFAULT = "default"
    #: FLIP-331: the edge leaves an output-on-EOF operator or one upstream of it, so it
    #: is ``shuffle.batch_mode`` (``hybrid_shuffle.plan.output_on_eof``)
    OUTPUT_ON_EOF = "output-on-eof"
    #: ``shuffle.default_mode: auto``: the planner picked it (``plan.mode_advisor``)
    AUTO = "auto"


@dataclass
class AdaptiveParallelism:
    """A vertex whose parallelism is decided when its producers finish (``partitions:
    auto``; see ``hybrid_shuffle.config.AdaptiveConfig`` for the rule)."""

    target_bytes: int
    min_partitions: int
    max_partitions: int
    #: the parallelism it runs with, once decided
    decided: int | None = None
    #: the bytes its producers wrote, that the decision was made from
    input_bytes: int = 0

    def decide(self, input_bytes: int, slots: int) -> int:
        """``ceil(input_bytes / target_bytes)`` within the bounds and the slots."""
        wanted = -(-input_bytes // self.target_bytes)
        upper = max(min(self.max_partitions, slots), 1)
        self.decided = max(min(wanted, upper), min(self.min_partitions, upper))
        self.input_bytes = input_bytes
        return self.decided


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
    #: set when the parallelism is decided at run time (until then ``parallelism`` is
    #: the configured count, which the plan's slot check uses)
    adaptive: AdaptiveParallelism | None = None
    #: why a vertex that asked for ``partitions: auto`` runs with the configured count
    adaptive_fallback: str | None = None
    #: the cache its chain ends with: each subtask also writes its output to one
    #: blocking-persistent partition of it (``Stream.cache``)
    cache_fill: Cache | None = None
    #: the cache it reads instead of a lineage: subtask i reads partition i
    cache_read: Cache | None = None
    #: tasks of different slot sharing groups never share an executor
    slot_sharing_group: str = "default"
    #: vertices with the same key run subtask i on the same executor
    co_location: str | None = None

    @property
    def is_source(self) -> bool:
        return self.source_splits is not None

    @property
    def awaits_parallelism(self) -> bool:
        """Adaptive, and not decided yet: its producers have not all finished."""
        return self.adaptive is not None and self.adaptive.decided is None

    def describe_parallelism(self) -> str:
        """For explain: the count, and where an adaptive one stands."""
        a = self.adaptive
        if a is None:
            fallback = f" (auto falls back: {self.adaptive_fallback})"
            return f"{self.parallelism}{fallback if self.adaptive_fallback else ''}"
        if a.decided is None:
            return (
                f"auto ({a.min_partitions}..{a.max_partitions}, one per "
                f"{a.target_bytes / 2**20:g} MiB written)"
            )
        return f"{a.decided} (auto: {a.input_bytes / 2**20:.1f} MiB written)"


@dataclass
class JobEdge:
    """An exchange between two vertices, named for YAML and explain."""

    name: EdgeName
    source: VertexId
    target: VertexId
    #: which input of the target's operator this edge feeds (1 = join build side)
    target_input: int
    partitioner: Partitioner
    partition_type: ResultPartitionType
    #: where the effective mode came from
    mode_origin: ModeOrigin = ModeOrigin.DEFAULT
    #: runs in each producer subtask on what it sends over this edge, before partitioning
    #: (Spark's map-side combine): a ``PartialAggregate`` in front of a final aggregate
    combiner: Operator | None = None
    #: the columns the producer sends (column pruning; ``None``: all): the others are
    #: dropped before the combiner and the partitioner
    columns: frozenset[str] | None = None
    #: the shuffle service that keeps its partitions (``edges.NAME.service``, else
    #: ``shuffle.service``)
    service: str = "executor-local"
    #: why the planner picked this mode (``ModeOrigin.AUTO``), for explain
    mode_reason: str = ""
    #: the mode set in code or YAML goes against the output-on-EOF rule on purpose
    #: (``keep``): explain notes it instead of warning; it runs as set either way
    mode_kept: bool = False
    #: the index of the ``edge_rules:`` entry that set the mode (``ModeOrigin.RULE``)
    mode_rule: int | None = None
    #: which operator of the target's chain it feeds: the head (0), or a broadcast
    #: join chained into its probe side's producer (its place in the chain)
    target_operator: int = 0
    #: the consumer reads every subpartition of every producer, which write this many
    #: (a shuffled join's build side read whole once it became a broadcast join;
    #: ``plan.join_switch``)
    reads_whole: int | None = None

    @property
    def mode(self) -> Mode:
        return self.partition_type.mode

    @property
    def origin(self) -> str:
        """Where the mode came from as explain and ``EdgeMetrics.mode_origin`` say it:
        ``yaml``, ``code``, ``default``, ``output-on-eof``, ``auto``, or the rule that set
        it (``edge_rules[1]``)."""
        if self.mode_origin is ModeOrigin.RULE and self.mode_rule is not None:
            return f"edge_rules[{self.mode_rule}]"
        return str(self.mode_origin)


@dataclass
class JobGraph:
    job_name: str
    vertices: dict[VertexId, JobVertex]
    edges: list[JobEdge]
    #: the vertex whose output the job returns to the driver
    sink: VertexId
    #: shuffled joins that may become broadcast joins at run time (``plan.join_switch``)
    join_switches: list[JoinSwitch] = field(default_factory=list)
    #: why the other translated shuffled joins may not, for explain
    join_notes: list[str] = field(default_factory=list)

    def holds(self) -> list[tuple[VertexId, VertexId]]:
        """(build producer, probe producer) of each join still to decide: the probe
        producer's regions come after, and wait for, the build producer's."""
        return [s.producers(self) for s in self.join_switches if s.holding]

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
