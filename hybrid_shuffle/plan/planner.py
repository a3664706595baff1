"""From the API's logical nodes to a ``Plan``: a ``JobGraph`` with modes and regions.

Plain Python, no Ray: chaining, effective modes (YAML over code over the
default) and where they came from, parallelism of exchange consumers, schema
checks (every key column exists and can be hashed, before anything runs), and
the pipelined regions with their slot check (``plan.regions``).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from hybrid_shuffle.config import Config
from hybrid_shuffle.errors import ConfigError, PlanError
from hybrid_shuffle.operators.base import Operator
from hybrid_shuffle.operators.columns import require_key_columns
from hybrid_shuffle.plan.graph import (
    EdgeName,
    JobEdge,
    JobGraph,
    JobVertex,
    ModeOrigin,
    VertexId,
)
from hybrid_shuffle.plan.regions import (
    Region,
    TaskKey,
    check_slots,
    pipelined_regions,
    vertex_regions,
)
from hybrid_shuffle.shuffle.partition_type import MODES, partition_type
from hybrid_shuffle.shuffle.routing import Partitioner, PartitionerKind

__all__ = ["ExchangeSpec", "LogicalNode", "Plan", "plan_job", "reachable"]


@dataclass
class ExchangeSpec:
    """How a node reads one input across an exchange (absent: forward, chainable)."""

    partitioner: Partitioner
    edge: str | None = None
    mode: str | None = None
    partitions: int | None = None
    #: the producer-side combiner of this exchange (see ``JobEdge.combiner``)
    combiner: Operator | None = None


@dataclass(eq=False)
class LogicalNode:
    id: int
    name: str
    operator: Operator | None
    inputs: list[tuple[LogicalNode, ExchangeSpec | None]] = field(default_factory=list)
    #: set for sources and fixed by the user; resolved by the planner otherwise
    parallelism: int | None = None
    source_splits: list[list[Any]] | None = None
    source_schema: pa.Schema | None = None
    #: sources whose data is fetched only when the job runs (from_spark): returns all refs
    load: Callable[[], list[Any]] | None = None

    @property
    def is_source(self) -> bool:
        return self.source_splits is not None or self.load is not None

    def resolve(self) -> None:
        """Fetch a lazy source's data and deal its refs to the subtasks."""
        if self.load is not None and self.source_splits is None:
            assert self.parallelism is not None
            refs = self.load()
            self.source_splits = [refs[i :: self.parallelism] for i in range(self.parallelism)]


@dataclass
class Plan:
    graph: JobGraph
    regions: list[Region]
    #: vertex id -> the display region ("R0") its subtasks belong to
    vertex_region: dict[VertexId, str]
    slots: int
    config: Config
    #: the job's output schema when it can be known without running, else None
    output_schema: pa.Schema | None = None

    @property
    def slots_needed(self) -> int:
        return max((r.slots for r in self.regions), default=0)

    def edge_modes(self) -> dict[str, tuple[str, str]]:
        """Edge name -> (effective mode, partitioner description)."""
        return {e.name: (e.mode, e.partitioner.describe()) for e in self.graph.edges}

    def region_of(self, task: TaskKey) -> Region:
        for region in self.regions:
            if task in region.tasks:
                return region
        raise KeyError(task)

    def explain(self) -> str:
        g = self.graph
        lines = [
            f"job '{g.job_name}': {len(g.vertices)} vertices, {len(g.edges)} edges, "
            f"needs {self.slots_needed} slots at once (session has {self.slots})",
            "vertices:",
        ]
        for vid in g.topological_order():
            v = g.vertices[vid]
            ops = " -> ".join(op.name for op in v.operators) or "(source)"
            lines.append(
                f"  {v.name:<24} parallelism {v.parallelism:<3} region {self.vertex_region[vid]:<4}"
                f" ops: {ops}"
            )
        lines.append("edges:")
        for e in g.edges:
            src, dst = g.vertices[e.source], g.vertices[e.target]
            region = (
                self.vertex_region[e.source]
                if e.partition_type.must_be_pipelined()
                else f"{self.vertex_region[e.source]}->{self.vertex_region[e.target]}"
            )
            combine = f" after {e.combiner.name}" if e.combiner is not None else ""
            lines.append(
                f"  {e.name:<20} {src.name} -> {dst.name}: {e.partitioner.describe()}{combine}, "
                f"mode {e.mode} ({e.mode_origin}), partitions {dst.parallelism}, region {region}"
            )
        return "\n".join(lines)


def plan_job(job_name: str, sink: LogicalNode, config: Config, slots: int) -> Plan:
    nodes = reachable(sink)
    overrides = config.edges_for(job_name)
    _resolve_parallelism(nodes, config, overrides)
    schemas = _check_schemas(nodes)
    graph = _build_graph(job_name, nodes, sink, config, overrides)
    config.check_job(job_name, [e.name for e in graph.edges])
    regions = pipelined_regions(graph)
    vertex_region = vertex_regions(graph)
    plan = Plan(graph, regions, vertex_region, slots, config, schemas[sink.id])
    check_slots(regions, vertex_region, graph, slots)
    return plan


def reachable(sink: LogicalNode) -> list[LogicalNode]:
    seen: dict[int, LogicalNode] = {}
    stack = [sink]
    while stack:
        node = stack.pop()
        if node.id in seen:
            continue
        seen[node.id] = node
        stack.extend(n for n, _ in node.inputs)
    return [seen[i] for i in sorted(seen)]  # ids grow as the API builds: inputs come first


def _edge_partitions(spec: ExchangeSpec, overrides: Any) -> int | None:
    if spec.edge is not None and spec.edge in overrides:
        override = overrides[spec.edge].partitions
        if override is not None:
            return int(override)
    return spec.partitions


def _resolve_parallelism(nodes: list[LogicalNode], config: Config, overrides: Any) -> None:
    for node in nodes:
        if node.parallelism is not None and node.is_source:
            continue
        exchanged = [
            _edge_partitions(spec, overrides) for _, spec in node.inputs if spec is not None
        ]
        forwarded = [up.parallelism for up, spec in node.inputs if spec is None]
        if exchanged and not forwarded:
            wanted = {p for p in exchanged if p is not None}
            if len(wanted) > 1:
                raise PlanError(
                    f"'{node.name}': its input edges ask for different partition counts "
                    f"{sorted(wanted)}; give them the same 'partitions'"
                )
            node.parallelism = wanted.pop() if wanted else node.parallelism or config.parallelism
        elif forwarded:
            node.parallelism = max(p for p in forwarded if p is not None)
        if node.parallelism is None or node.parallelism < 1:
            raise PlanError(f"'{node.name}': parallelism must be a positive integer")


def _check_schemas(nodes: list[LogicalNode]) -> dict[int, pa.Schema | None]:
    """Every node's output schema where it is known; raises on missing key columns."""
    schemas: dict[int, pa.Schema | None] = {}
    for node in nodes:
        if node.is_source:
            schemas[node.id] = node.source_schema
            continue
        inputs = [schemas[up.id] for up, _ in node.inputs]
        for (_up, spec), schema in zip(node.inputs, inputs, strict=True):
            if spec is not None and schema is not None:
                require_key_columns(
                    schema, spec.partitioner.keys, f"edge '{spec.edge or node.name}'"
                )
        assert node.operator is not None
        schemas[node.id] = node.operator.output_schema(inputs)
    return schemas


def _build_graph(
    job_name: str,
    nodes: list[LogicalNode],
    sink: LogicalNode,
    config: Config,
    overrides: Any,
) -> JobGraph:
    consumers: dict[int, int] = defaultdict(int)
    for node in nodes:
        for up, _ in node.inputs:
            consumers[up.id] += 1
    vertex_of: dict[int, JobVertex] = {}
    vertices: dict[VertexId, JobVertex] = {}
    edges: list[JobEdge] = []
    ids = itertools.count()

    def new_vertex(node: LogicalNode) -> JobVertex:
        assert node.parallelism is not None
        v = JobVertex(VertexId(next(ids)), node.name, node.parallelism, [], node.source_splits)
        vertices[v.id] = v
        return v

    for node in nodes:
        chainable = (
            len(node.inputs) == 1
            and node.inputs[0][1] is None
            and consumers[node.inputs[0][0].id] == 1
            and node.inputs[0][0].parallelism == node.parallelism
        )
        if chainable:
            vertex = vertex_of[node.inputs[0][0].id]
            vertex.name = f"{vertex.name}->{node.name}"
        else:
            vertex = new_vertex(node)
        vertex_of[node.id] = vertex
        if node.operator is not None:
            vertex.operators.append(node.operator)
        if chainable:
            continue
        for input_index, (up, spec) in enumerate(node.inputs):
            producer = vertex_of[up.id]
            if spec is None:  # a forward input that could not be chained
                kind = (
                    PartitionerKind.FORWARD
                    if producer.parallelism == vertex.parallelism
                    else PartitionerKind.ROUND_ROBIN
                )
                spec = ExchangeSpec(Partitioner(kind))
            name = spec.edge or f"{up.name}->{node.name}"
            mode, origin = _effective_mode(name, spec, config, overrides)
            edge = JobEdge(
                EdgeName(name),
                producer.id,
                vertex.id,
                input_index,
                spec.partitioner,
                partition_type(mode),
                origin,
                spec.combiner,
            )
            edges.append(edge)
            producer.outputs.append(edge)
            vertex.inputs.append(edge)
    names = [e.name for e in edges]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise PlanError(
            f"edge name '{duplicates[0]}' is used for more than one exchange in job "
            f"'{job_name}'; give each exchange its own edge= name"
        )
    return JobGraph(job_name, vertices, edges, vertex_of[sink.id].id)


def _effective_mode(
    name: str, spec: ExchangeSpec, config: Config, overrides: Any
) -> tuple[str, ModeOrigin]:
    if name in overrides and overrides[name].mode is not None:
        return overrides[name].mode, ModeOrigin.YAML
    if spec.mode is not None:
        if spec.mode not in MODES:
            raise ConfigError(
                f"edge '{name}': mode '{spec.mode}' is not a mode; use one of: {', '.join(MODES)}"
            )
        return spec.mode, ModeOrigin.CODE
    return config.shuffle.default_mode, ModeOrigin.DEFAULT
