"""From the API's logical nodes to a ``Plan``: a ``JobGraph`` with modes and regions.

Plain Python, no Ray: chaining, effective modes (YAML over code over the
default) and where they came from, parallelism of exchange consumers, schema
checks (every key column exists and can be hashed, before anything runs), and
the pipelined regions with their slot check (``plan.regions``), and the check that
each of them can ever deploy (``plan.deployable``).

Caches (``plan.cache``): a cache node that fills ends its vertex (the vertex
writes the cache's partitions, so nothing may be chained after it); one that
reads is a source vertex with the cache's parallelism and schema.  A hash
exchange whose input comes out of a cache read already partitioned the same
way is left out (``plan.partitioning``; ``explain()`` says so).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from hybrid_shuffle.config import AUTO, Config, EdgeConfig
from hybrid_shuffle.errors import ConfigError, PlanError
from hybrid_shuffle.operators.base import Columns
from hybrid_shuffle.operators.columns import require_key_columns
from hybrid_shuffle.plan.cache import HashPartitioning
from hybrid_shuffle.plan.deployable import check_deployable
from hybrid_shuffle.plan.edge_rules import EdgeFacts, EdgeSettings, derived_facts
from hybrid_shuffle.plan.explain import explain_plan
from hybrid_shuffle.plan.graph import (
    AdaptiveParallelism,
    EdgeName,
    JobEdge,
    JobGraph,
    JobVertex,
    ModeOrigin,
    VertexId,
)
from hybrid_shuffle.plan.join_switch import find_candidates
from hybrid_shuffle.plan.logical import ExchangeSpec, LogicalNode
from hybrid_shuffle.plan.mode_advisor import MemoryBound, advise_modes
from hybrid_shuffle.plan.output_on_eof import KeptModes, apply_output_on_eof
from hybrid_shuffle.plan.partitioning import through
from hybrid_shuffle.plan.pruning import ColumnNeeds, prune_columns
from hybrid_shuffle.plan.regions import (
    DEFAULT_GROUP,
    Region,
    TaskKey,
    check_slots,
    pipelined_regions,
    vertex_regions,
)
from hybrid_shuffle.shuffle.partition_type import MODES, Mode, partition_type
from hybrid_shuffle.shuffle.routing import Partitioner, PartitionerKind

__all__ = ["ExchangeSpec", "LogicalNode", "Plan", "plan_job", "reachable"]


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
    #: logical source node id -> the columns its consumers read (``None``: all)
    source_columns: dict[int, Columns] = field(default_factory=dict)
    #: what ``explain()`` warns about: modes set in code or YAML against the output-on-EOF
    #: rule, not marked ``keep``
    warnings: list[str] = field(default_factory=list)
    #: what ``explain()`` notes: the exchanges left out because a cache read is already
    #: partitioned for them, then the explicit modes kept against the output-on-EOF rule
    #: on purpose (``keep``)
    notes: list[str] = field(default_factory=list)
    #: the sink's output goes to the driver (False: a run that only fills caches)
    collect: bool = True
    #: with ``collect``: the driver takes the result's refs, not its rows (to_ray_data)
    keep_blocks: bool = False
    #: the schema of each cache the job fills, where known before running
    cache_schemas: dict[str, pa.Schema | None] = field(default_factory=dict)

    @property
    def slots_needed(self) -> int:
        return max((r.slots for r in self.regions), default=0)

    def edge_modes(self) -> dict[str, tuple[str, str, int, str]]:
        """Edge name -> (effective mode, partitioner description, consumer subtasks: the
        decided count of an adaptive consumer once the job ran, where the mode came from)."""
        g = self.graph
        return {
            e.name: (
                e.mode,
                e.partitioner.describe(),
                g.vertices[e.target].parallelism,
                e.origin,
            )
            for e in g.edges
        }

    def vertex_names(self) -> list[str]:
        """Vertex names, producers first."""
        return [self.graph.vertices[v].name for v in self.graph.topological_order()]

    def cache_reads(self) -> list[JobVertex]:
        return [v for v in self.graph.vertices.values() if v.cache_read is not None]

    def cache_fills(self) -> list[JobVertex]:
        return [v for v in self.graph.vertices.values() if v.cache_fill is not None]

    def region_of(self, task: TaskKey) -> Region:
        for region in self.regions:
            if task in region.tasks:
                return region
        raise KeyError(task)

    def explain(self) -> str:
        """Per vertex its parallelism, region, operators, operator memory and slot sharing
        group; per edge its partitioner, mode and where the mode came from, partitions,
        shuffle service and region; then notes and warnings (``plan.explain``)."""
        return explain_plan(self).text()

    def explain_data(self) -> dict[str, Any]:
        """What ``explain()`` prints, as plain JSON-ready data (``hybrid-shuffle explain
        --format json``): ``job``, ``slots_needed``, ``slots``, ``vertices``, ``edges``,
        ``notes``, ``warnings``, ``speculation``; both come from one ``Explanation``
        (``plan.explain``)."""
        return explain_plan(self).as_dict()


def _read_of(columns: Columns, schema: pa.Schema | None) -> Columns:
    """A source's columns that are read: the pruning answer within its schema."""
    if columns is None or schema is None:
        return columns
    return frozenset(n for n in schema.names if n in columns)


def plan_job(job_name: str, sink: LogicalNode, config: Config, slots: int) -> Plan:
    nodes = reachable(sink)
    overrides = EdgeSettings(config.edges_for(job_name), config.rules_for(job_name))
    vertex_overrides = config.vertices_for(job_name)
    config.check_vertices(job_name, [n.name for n in nodes])
    elided = _elided_exchanges(nodes, overrides)
    auto = _resolve_parallelism(nodes, config, overrides, elided, vertex_overrides)
    schemas = _check_schemas(nodes)
    needs = prune_columns(nodes, sink, schemas)
    groups = _slot_sharing_groups(nodes, vertex_overrides)
    graph, kept = _build_graph(
        job_name, nodes, sink, config, overrides, needs, auto, elided, groups, slots
    )
    _check_co_locations(graph)
    hints = {}
    for node in nodes:
        vertex = None if node.switchable is None else _vertex_of(graph, node)
        if vertex is not None and node.switchable is not None:
            hints[vertex.id] = node.switchable
    # every probe task's join holds a switched build side whole: at most a quarter of
    # operators.memory, so that its hash table stays within the task's budget
    adaptive, memory = config.adaptive, config.operators.memory
    max_bytes = min(adaptive.broadcast_max_bytes, memory // 4)
    find_candidates(graph, hints, adaptive.broadcast_bytes, max_bytes)
    names = [e.name for e in graph.edges]
    # an exchange left out is still an edge the YAML may name (it has no effect)
    config.check_job(job_name, names + [e.edge for e in elided.values() if e.edge])
    regions = pipelined_regions(graph)
    vertex_region = vertex_regions(graph)
    sources = {
        n.id: _read_of(needs.outputs.get(n.id), n.source_schema) for n in nodes if n.is_source
    }
    plan = Plan(
        graph, regions, vertex_region, slots, config, schemas[sink.id], sources, kept.warnings
    )
    plan.notes = [e.note() for e in elided.values()] + kept.notes + overrides.unused(job_name)
    plan.cache_schemas = {n.cache.name: schemas[n.id] for n in nodes if n.fills_cache and n.cache}
    check_deployable(graph, vertex_region)
    check_slots(regions, vertex_region, graph, slots)
    return plan


def _vertex_of(graph: JobGraph, node: LogicalNode) -> JobVertex | None:
    """The vertex whose chain starts with ``node``'s operator, if any."""
    for vertex in graph.vertices.values():
        if vertex.operators and vertex.operators[0] is node.operator:
            return vertex
    return None


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


def _facts(spec: ExchangeSpec, consumer: LogicalNode) -> EdgeFacts:
    """What the exchange into ``consumer`` is, for ``edge_rules:``."""
    return spec.facts or derived_facts(spec.partitioner, consumer.operator)


def _edge_partitions(
    spec: ExchangeSpec, consumer: LogicalNode, overrides: EdgeSettings
) -> int | str | None:
    override, _ = overrides.lookup(spec.edge, _facts(spec, consumer))
    if override.partitions is not None:
        return override.partitions
    return spec.partitions


@dataclass(frozen=True)
class _Elided:
    """An exchange left out: its input is already partitioned the way it would be."""

    node: str
    #: the exchange's edge name, if the user gave one
    edge: str | None
    partitioning: HashPartitioning
    cache: str

    def note(self) -> str:
        edge = f" (edge '{self.edge}')" if self.edge else ""
        return (
            f"'{self.node}' needs no exchange on {', '.join(self.partitioning.keys)}{edge}: "
            f"it reads cache '{self.cache}' as it is partitioned, "
            f"{self.partitioning.describe()}"
        )


#: (node id, input index) -> the exchange left out there
_ElidedInputs = dict[tuple[int, int], _Elided]


def _elided_exchanges(nodes: list[LogicalNode], overrides: EdgeSettings) -> _ElidedInputs:
    """The hash exchanges whose input comes out of a cache read already partitioned on
    their keys into as many partitions as their consumer asks for (``None``: whatever
    the cache has).  A node's exchanges are left out together, and only if every other
    input of the node lands in the same partitions (``plan.partitioning``)."""
    known: dict[int, tuple[HashPartitioning, str] | None] = {}
    elided: _ElidedInputs = {}

    def hashes_as(spec: ExchangeSpec, node: LogicalNode, p: HashPartitioning) -> bool:
        wanted = _edge_partitions(spec, node, overrides)
        return (
            spec.partitioner.kind is PartitionerKind.HASH
            and tuple(spec.partitioner.keys) == p.keys
            and wanted in (None, p.count)
        )

    def after(node: LogicalNode, found: tuple[HashPartitioning, str]) -> None:
        assert node.operator is not None
        p = through(found[0], [node.operator])
        known[node.id] = None if p is None else (p, found[1])

    for node in nodes:
        known[node.id] = None
        if node.reads_cache:
            assert node.cache is not None
            partitioning = node.cache.layout.partitioning
            if partitioning is not None:
                after(node, (partitioning, node.cache.name))
            continue
        if node.operator is None or not node.inputs:
            continue
        ins = [(i, spec, known.get(up.id)) for i, (up, spec) in enumerate(node.inputs)]
        candidates = {
            i: k
            for i, spec, k in ins
            if spec is not None and k is not None and hashes_as(spec, node, k[0])
        }
        targets = {k[0] for k in candidates.values()}
        if len(targets) == 1:
            target = targets.pop()
            if all(
                i in candidates
                or (spec is None and k is not None and k[0] == target)
                or (spec is not None and hashes_as(spec, node, target))
                for i, spec, k in ins
            ):
                for i, (p, cache) in candidates.items():
                    spec = node.inputs[i][1]
                    assert spec is not None
                    elided[(node.id, i)] = _Elided(node.name, spec.edge, p, cache)
                after(node, next(iter(candidates.values())))
                continue
        forwarded = {k for _, spec, k in ins if spec is None}
        if len(forwarded) == 1 and all(spec is None for _, spec, _ in ins):
            found = forwarded.pop()
            if found is not None:
                after(node, found)
    return elided


def _resolve_parallelism(
    nodes: list[LogicalNode],
    config: Config,
    overrides: EdgeSettings,
    elided: _ElidedInputs,
    vertex_overrides: Any,
) -> set[int]:
    """Every node's parallelism; returns the ids of the nodes whose exchanges ask for
    ``auto`` (planned with the configured count, decided at run time if they can be).
    A cache read has the cache's; an exchange left out (``elided``) counts as forward;
    ``vertices.NAME.parallelism`` wins over everything but a source's splits."""
    auto: set[int] = set()
    for node in nodes:
        fixed = vertex_overrides[node.name].parallelism if node.name in vertex_overrides else None
        if fixed is not None and node.is_source:
            raise ConfigError(
                f"vertices.{node.name}.parallelism: '{node.name}' is a source, whose splits "
                "are made in code; pass parallelism= to from_arrow or from_spark instead"
            )
        if fixed is not None:
            node.parallelism = fixed
            continue
        if node.reads_cache:
            assert node.cache is not None
            node.parallelism = node.cache.layout.parallelism
            continue
        if node.parallelism is not None and node.is_source:
            continue
        ins = [
            (up, None if (node.id, i) in elided else spec)
            for i, (up, spec) in enumerate(node.inputs)
        ]
        exchanged = [_edge_partitions(spec, node, overrides) for _, spec in ins if spec is not None]
        forwarded = [up.parallelism for up, spec in ins if spec is None]
        if exchanged and not forwarded:
            wanted = {p for p in exchanged if p is not None}
            if len(wanted) > 1:
                raise PlanError(
                    f"'{node.name}': its input edges ask for different partition counts "
                    f"{sorted(map(str, wanted))}; give them the same 'partitions'"
                )
            count = wanted.pop() if wanted else None
            if count == AUTO:
                auto.add(node.id)
                count = None
            node.parallelism = int(count or node.parallelism or config.parallelism)
        elif forwarded:
            node.parallelism = max(p for p in forwarded if p is not None)
        if node.parallelism is None or node.parallelism < 1:
            raise PlanError(f"'{node.name}': parallelism must be a positive integer")
    return auto


def _make_adaptive(vertex: JobVertex, config: Config) -> None:
    """Decide at run time, or say why not (``adaptive_fallback``): only a vertex that
    starts after every producer finished (blocking inputs) can count their bytes, and
    only one whose subtasks are interchangeable (all-to-all, non-broadcast inputs; no
    forward output pinning subtask i to a consumer's i) can change how many it has."""
    for edge in vertex.inputs:
        if not edge.partition_type.is_blocking():
            vertex.adaptive_fallback = (
                f"edge '{edge.name}' is {edge.mode}, so its consumer starts before the bytes "
                "are known; make it blocking"
            )
            return
        if edge.partitioner.kind in (PartitionerKind.BROADCAST, PartitionerKind.FORWARD):
            vertex.adaptive_fallback = f"edge '{edge.name}' is a {edge.partitioner.kind} edge"
            return
    for edge in vertex.outputs:
        if not edge.partitioner.is_all_to_all():
            vertex.adaptive_fallback = f"its output '{edge.name}' is a forward edge"
            return
    a = config.adaptive
    vertex.adaptive = AdaptiveParallelism(a.target_bytes, a.min_partitions, a.max_partitions)


def _check_schemas(nodes: list[LogicalNode]) -> dict[int, pa.Schema | None]:
    """Every node's output schema where it is known; raises on missing key columns."""
    schemas: dict[int, pa.Schema | None] = {}
    for node in nodes:
        if node.reads_cache:
            assert node.cache is not None
            schemas[node.id] = node.cache.layout.schema
            continue
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
    overrides: EdgeSettings,
    needs: ColumnNeeds,
    auto: set[int],
    elided: _ElidedInputs,
    groups: dict[int, str],
    slots: int,
) -> tuple[JobGraph, KeptModes]:
    """The graph, with modes decided (what the output-on-EOF rule left as set beside it)."""
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
        if node.reads_cache:
            v.cache_read = node.cache
        v.slot_sharing_group = groups[node.id]
        vertices[v.id] = v
        return v

    for node in nodes:
        chainable = (
            len(node.inputs) >= 1
            and all(_is_side_input(spec) for _, spec in node.inputs[1:])
            and (node.inputs[0][1] is None or (node.id, 0) in elided)
            and consumers[node.inputs[0][0].id] == 1
            and node.inputs[0][0].parallelism == node.parallelism
            and not node.inputs[0][0].fills_cache  # the cache's partitions end its vertex
            and groups[node.inputs[0][0].id] == groups[node.id]  # a task is in one group
        )
        if node.local and not chainable:
            _check_local(node, groups)
        if chainable:
            vertex = vertex_of[node.inputs[0][0].id]
            vertex.name = f"{vertex.name}->{node.name}"
            combiner = node.inputs[0][1].combiner if node.inputs[0][1] is not None else None
            if combiner is not None:  # an exchange left out: its combiner stays in front
                vertex.operators.append(combiner)
        else:
            vertex = new_vertex(node)
        vertex_of[node.id] = vertex
        if node.operator is not None:
            vertex.operators.append(node.operator)
        if node.fills_cache:
            vertex.cache_fill = node.cache
        if node.co_location is not None:
            if vertex.co_location not in (None, node.co_location):
                raise PlanError(
                    f"'{node.name}' is chained into '{vertex.name}', which is co-located with "
                    "other operators already; co-locate the first operator of the chain only"
                )
            vertex.co_location = node.co_location
        # a chained node's other inputs (a broadcast join's build side) feed it where it
        # stands in the chain; an unchained node's inputs feed the head of a new vertex
        first, operator_index = (1, len(vertex.operators) - 1) if chainable else (0, 0)
        for input_index, (up, spec) in enumerate(node.inputs):
            if input_index < first:
                continue
            producer = vertex_of[up.id]
            if spec is not None and (node.id, input_index) in elided:
                spec = ExchangeSpec(
                    Partitioner(PartitionerKind.FORWARD),
                    spec.edge,
                    spec.mode,
                    None,
                    spec.combiner,
                    spec.keep,
                )
            elif spec is None:  # a forward input that could not be chained
                kind = (
                    PartitionerKind.FORWARD
                    if producer.parallelism == vertex.parallelism
                    else PartitionerKind.ROUND_ROBIN
                )
                spec = ExchangeSpec(Partitioner(kind))
            name = spec.edge or _generated(f"{up.name}->{node.name}", edges)
            settings, rule = overrides.lookup(name, _facts(spec, node))
            mode, origin, keep = _effective_mode(name, spec, config, settings, rule)
            edge = JobEdge(
                EdgeName(name),
                producer.id,
                vertex.id,
                input_index,
                spec.partitioner,
                partition_type(mode),
                origin,
                spec.combiner,
                needs.inputs.get((node.id, input_index)),
                settings.service or config.shuffle.service,
                target_operator=operator_index,
                mode_kept=keep,
                mode_rule=rule if origin is ModeOrigin.RULE else None,
            )
            edges.append(edge)
            producer.outputs.append(edge)
            vertex.inputs.append(edge)
    _unique_names(vertices)
    graph = JobGraph(job_name, vertices, edges, vertex_of[sink.id].id)
    kept = apply_output_on_eof(graph, config.shuffle.batch_mode)
    shuffle = config.shuffle
    advise_modes(
        graph,
        slots,
        MemoryBound(shuffle.executor_budget(slots), shuffle.credits * shuffle.buffer_size),
    )
    for node_id in auto:  # after the rule: it may have made a consumer's inputs blocking
        _make_adaptive(vertex_of[node_id], config)
    names = [e.name for e in edges]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise PlanError(
            f"edge name '{duplicates[0]}' is used for more than one exchange in job "
            f"'{job_name}'; give each exchange its own edge= name"
        )
    return graph, kept


def _is_side_input(spec: ExchangeSpec | None) -> bool:
    """An input that may feed an operator chained behind others: a broadcast edge (every
    subtask gets all of it, so it does not matter which task the operator runs in)."""
    return spec is not None and spec.partitioner.kind is PartitionerKind.BROADCAST


def _check_local(node: LogicalNode, groups: dict[int, str]) -> None:
    """A local operator that cannot be chained into its input's task: a ``PlanError`` if
    its subtasks would not be its input's (another parallelism or slot sharing group).
    An input that feeds other operators too, or fills a cache, ends its task, so the
    local operator reads it over a forward edge: subtask i from subtask i, no shuffle."""
    up = node.inputs[0][0]
    what = f"'{node.name}' (local_key_by) runs in the tasks of its input '{up.name}'"
    if up.parallelism != node.parallelism:
        raise PlanError(
            f"{what}, but it has parallelism {node.parallelism} and its input "
            f"{up.parallelism}; remove vertices.{node.name}.parallelism or set it on "
            f"'{up.name}' instead"
        )
    if groups[up.id] != groups[node.id]:
        raise PlanError(
            f"{what}, but it is in slot sharing group '{groups[node.id]}' and its input in "
            f"'{groups[up.id]}'; set the group on '{up.name}' instead"
        )


def _slot_sharing_groups(nodes: list[LogicalNode], vertex_overrides: Any) -> dict[int, str]:
    """Every node's slot sharing group: the YAML's (``vertices.NAME``), else the one set in
    code, else its inputs' when they all have the same, else ``default`` (Flink's
    rule)."""
    groups: dict[int, str] = {}
    for node in nodes:
        override = vertex_overrides.get(node.name)
        if override is not None and override.slot_sharing_group is not None:
            groups[node.id] = override.slot_sharing_group
            continue
        if node.slot_sharing_group is not None:
            groups[node.id] = node.slot_sharing_group
            continue
        inherited = {groups[up.id] for up, _ in node.inputs}
        groups[node.id] = inherited.pop() if len(inherited) == 1 else DEFAULT_GROUP
    return groups


def _check_co_locations(graph: JobGraph) -> None:
    """Co-located vertices run subtask i together: they need the same parallelism (fixed
    at plan time) and the same slot sharing group."""
    by_key: dict[str, list[JobVertex]] = defaultdict(list)
    for vertex in graph.vertices.values():
        if vertex.co_location is not None:
            by_key[vertex.co_location].append(vertex)
    for vertices in by_key.values():
        first = vertices[0]
        for other in vertices[1:]:
            if other.parallelism != first.parallelism or first.adaptive or other.adaptive:
                raise PlanError(
                    f"co_locate_with: '{first.name}' runs {first.describe_parallelism()} "
                    f"subtasks and '{other.name}' {other.describe_parallelism()}; co-located "
                    "operators run subtask i together, so give them the same fixed "
                    "parallelism (partitions=)"
                )
            if other.slot_sharing_group != first.slot_sharing_group:
                raise PlanError(
                    f"co_locate_with: '{first.name}' is in slot sharing group "
                    f"'{first.slot_sharing_group}' and '{other.name}' in "
                    f"'{other.slot_sharing_group}'; co-located operators share slots, so put "
                    "them in one group"
                )


def _unused(name: str, taken: Collection[str]) -> str:
    """``name``, or ``name_2``, ``name_3``, ... : the first not in ``taken``."""
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}_{n}"
    return candidate


def _generated(name: str, edges: list[JobEdge]) -> str:
    """A generated edge name not yet taken (``a->b``, then ``a->b_2``): a name the user
    gave twice is an error, one the planner made up must not be."""
    return _unused(name, {e.name for e in edges})


def _unique_names(vertices: dict[VertexId, JobVertex]) -> None:
    """Give vertices of the same name (two ``from_arrow`` sources left at the default
    ``source``) ``_2``, ``_3`` suffixes: a task is named by its vertex and subtask, and
    two tasks of one name would be one task to an executor's cancel flags and to the
    metrics."""
    seen: set[str] = set()
    for vid in sorted(vertices):
        vertex = vertices[vid]
        vertex.name = _unused(vertex.name, seen)
        seen.add(vertex.name)


def _effective_mode(
    name: str, spec: ExchangeSpec, config: Config, settings: EdgeConfig, rule: int | None
) -> tuple[str, ModeOrigin, bool]:
    """(mode, where it came from, kept against the output-on-EOF rule on purpose): the
    YAML mode (``settings``: the edge's ``edges:`` entry, or rule ``rule``'s) with its
    ``keep``, else code's with code's, else the default (never kept)."""
    if spec.keep and spec.mode is None:
        raise ConfigError(
            f"edge '{name}': keep=True needs the mode it keeps; pass mode= too, or drop keep"
        )
    if settings.mode is not None:
        origin = ModeOrigin.YAML if rule is None else ModeOrigin.RULE
        return settings.mode, origin, settings.keep
    if spec.mode is not None:
        if spec.mode not in MODES:
            raise ConfigError(
                f"edge '{name}': mode '{spec.mode}' is not a mode; use one of: {', '.join(MODES)}"
            )
        return spec.mode, ModeOrigin.CODE, spec.keep
    if config.shuffle.default_mode == AUTO:  # provisional: the advisor decides
        return Mode.PIPELINED, ModeOrigin.AUTO, False
    return config.shuffle.default_mode, ModeOrigin.DEFAULT, False
