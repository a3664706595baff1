"""A shuffled join turned into a broadcast join at run time (Spark AQE's
``DynamicJoinSelection``, done in the engine; ``adaptive.broadcast_bytes``).

The engine runs the physical plan Spark made with adaptive execution off, so a join
Spark planned as a shuffled (sort-merge or shuffled hash) join on its size estimates
hash-exchanges both sides even when one of them turns out small (a filtered
dimension table).  Here, a join stage that reads two hash edges, one per side
(``SwitchableJoin``, found by the translation), is a *candidate* (the stage may also
read broadcast inputs, which go with the join):

* **Plan time** (``find_candidates``): the side that may be built (Spark's rule: inner
  either, left outer/semi/anti/existence the right, right outer the left, full outer
  never), the likely smaller when both may (``SwitchableJoin.build_edge``), is the
  *build* side.  The
  other side's producer (the *probe* producer) is **held**: its regions come after
  the build side's producer's (``plan.regions``) and do not deploy before that
  producer finished.  Only joins whose stage can run in other tasks are candidates:
  the translation checked that nothing in the stage above the join relies on the
  hash partitioning (a final aggregate on the join keys would: then the stage may
  only split, below), and this module that the graph allows it (both edges plain
  hash exchanges, not pipelined, the build edge re-readable, any other input the
  moved query reads a blocking broadcast, the probe producer feeding only the join, no cache, no
  co-location, no adaptive count, no cycle through the holds).
  The join may be the job's last stage: the probe producer then writes the result.
* **Run time** (``JoinSwitch.decide``, called by the scheduler once the build
  producer finished): if the bytes it wrote over the build edge are at most the join's
  limit (``JoinSwitch.limit``), the graph is rewritten (``switch``): the join stage's
  query is chained into the probe producer's tasks (its probe side streamed in from
  the chain, as a ``join(strategy="broadcast")``), the build edge feeds it there and
  every consumer task reads *all* subpartitions of every build producer
  (``JobEdge.reads_whole``; the stage's broadcast inputs follow the same way), the
  probe edge and the join vertex are gone, and the join's outputs leave the probe
  producer.  The probe producer's chain, its name and its parallelism are kept: a
  from_parquet scan's splits decide how many tasks run the join; if that chain is one
  ``sql`` query (a translated stage), the join's query takes it in as its probe side,
  one query and one DuckDB pipeline (``_fusable``).  The moved query gives what the
  join stage gave, so it takes the stage's output schema (``SqlQuery.bind_as``)
  instead of DuckDB planning it again on the driver between two stages (20-30 ms for
  TPC-H Q5's).  If the build side is larger,
  nothing changes but the hold.  Either way the hold ends, and the scheduler computes the
  regions again.
* **A split** (``SwitchableJoin.split``): when the stage's operators above the join
  need its hash partitioning (a final aggregate on the join keys, a window, a sort),
  the translation also kept the join's own query.  Switched, only that query runs in
  the probe producer's tasks (fused with its query the same way); the probe edge is
  kept, now carrying the joined rows hashed on the same key columns, and the join
  stage runs the rest of its query over them.  Each joined row lands in the task its
  probe row went to before, so every task of the rest reads the rows it read before
  (Q3 at TPC-H SF1: 30,000 joined rows cross the exchange instead of 3.2M ``lineitem``
  rows).  An inner join whose side is rows of its exchange that semi and anti joins of
  the stage keep splits before them (``sparkplan.switchable``): the moved query joins
  the exchange's rows, the rest of the stage runs the semi and anti joins on the joined
  rows, and the input they read stays with it, whatever its edge (``SwitchableJoin.build``
  names the side not so filtered, the only one built when one is).

**The limit.** ``adaptive.broadcast_bytes`` (10 MiB, Spark's threshold) is a fixed
size, so the same query keeps a join shuffled once its data grows, however much larger
the probe side grows with it: TPC-H Q5 at SF10 hash-exchanged all 60M ``lineitem``
rows (2.7 GiB, spilled) to join them with a 35 MiB side, and took 19.5 s where the
broadcast join takes 3.1 s.  So a larger build side is broadcast too while it is at
most ``adaptive.broadcast_max_bytes`` (and a quarter of ``operators.memory``: every
probe task's join holds it whole) and one copy of it per probe task stays within
the estimate of the probe side (``SwitchableJoin``'s bounds): the copies then
move fewer bytes than the shuffle they replace, which is how Trino's cost-based join
distribution chooses (its broadcast side capped by ``join_max_broadcast_table_size``).
The probe side has not run when the decision is made (it waits for it), so its size
can only be estimated: where that is unknown, or below an operator that may
drop rows by any factor (an aggregate, a semi join: ``sparkplan.switchable.bound``),
the limit is ``adaptive.broadcast_bytes``.  A probe side that is a Parquet scan (no
join below it) is estimated as its rows take as Arrow (``sparkplan.switchable.estimate``
with ``decoded``), the unit of the build side's bytes: Spark's own figure counts the
files' compressed bytes, about 6 times fewer for ``lineitem``, and kept TPC-H Q10's
join with its 102 MiB ``customer`` side at SF10 shuffled (4.9 s; 3.1 s broadcast).

Every change is recorded as an ``AdaptiveChange`` (``JobResult.adaptive``,
``explain()`` after a run).  Plain Python, no Ray.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hybrid_shuffle.operators.sql import SqlQuery, input_name
from hybrid_shuffle.shuffle.routing import PartitionerKind

if TYPE_CHECKING:
    import pyarrow as pa

    from hybrid_shuffle.plan.graph import JobEdge, JobGraph, JobVertex, VertexId

__all__ = [
    "SPLIT_TOKEN",
    "AdaptiveChange",
    "JoinSwitch",
    "SwitchableJoin",
    "build_sides",
    "find_candidates",
]

#: Spark's ``canBuildBroadcastRight`` / ``canBuildBroadcastLeft``
_BUILD_RIGHT = frozenset({"Inner", "Cross", "LeftOuter", "LeftSemi", "LeftAnti", "ExistenceJoin"})
_BUILD_LEFT = frozenset({"Inner", "Cross", "RightOuter"})
#: where a split stage's query reads the join's rows (``SwitchableJoin.split``)
SPLIT_TOKEN = "__hs_split_join__"


def build_sides(join_type: str) -> tuple[str, ...]:
    """The sides a broadcast join of ``join_type`` may build, preferred first."""
    return tuple(s for s, ok in (("right", _BUILD_RIGHT), ("left", _BUILD_LEFT)) if join_type in ok)


@dataclass(frozen=True)
class SwitchableJoin:
    """What the translation knows of a join stage that could run as a broadcast join:
    its Spark join, the edge each side arrives over, how big each side is likely to be
    (``sparkplan.switchable``), and the stage's query with its inputs still as tokens
    (to name them again)."""

    #: ``SortMergeJoin (12)``
    spark_join: str
    #: Spark's join type (``Inner``, ``LeftOuter``, ``LeftSemi``...)
    join_type: str
    left_edge: str
    right_edge: str
    #: how many bytes each side is likely to be (``None``: unknown)
    left_estimate: int | None
    right_estimate: int | None
    #: the stage's query with ``tokens[edge]`` where each input's table name goes (with
    #: ``split``: the rest of it, reading the join's rows as ``SPLIT_TOKEN``)
    template: str
    tokens: dict[str, str] = field(default_factory=dict)
    #: the join's own query (with its tokens) when the stage above it needs the join's hash
    #: partitioning: only this runs in the probe producer's tasks
    split: str | None = None
    #: the columns ``split`` outputs: the probe edge's keys must be among them
    split_columns: tuple[str, ...] = ()
    #: each side's estimate where it may bound how big the other side may be broadcast
    #: (``sparkplan.switchable.bound``; None: unknown, or not to be trusted for that)
    left_bound: int | None = None
    right_bound: int | None = None
    #: the only edge that may be built, where the other side is rows semi or anti joins
    #: in the stage keep (the split runs the join before them: ``split``)
    build: str | None = None

    def build_edge(self) -> str | None:
        """The side to build, if any: the one that may be built with the smaller estimate
        (the right one when the estimates say nothing)."""
        if self.build is not None:
            return self.build
        sides = build_sides(self.join_type)
        if not sides:
            return None
        if len(sides) == 1:
            return self.right_edge if sides[0] == "right" else self.left_edge
        left, right = self.left_estimate, self.right_estimate
        if left is not None and right is not None and left < right:
            return self.left_edge
        return self.right_edge


@dataclass
class AdaptiveChange:
    """A decision made at run time (``JobResult.adaptive``): whether a shuffled join became
    a broadcast join, from the bytes its build side wrote."""

    #: the join's vertex as planned (``stage_12``) and Spark's join (``SortMergeJoin (9)``)
    vertex: str
    spark_join: str
    #: the edge of the side built (read whole) and the edge left out, if switched
    build_edge: str
    probe_edge: str
    #: bytes the build side's producers wrote over ``build_edge``
    build_bytes: int
    #: ``adaptive.broadcast_bytes`` at the time
    threshold: int
    #: True: the join runs as a broadcast join in the probe side's producer tasks
    switched: bool
    #: True: only the join moved; the probe edge carries its rows to the rest of the stage
    split: bool = False
    #: the build side's subtasks that had finished when it was decided: fewer than all
    #: when those already wrote more than ``limit`` (then ``build_bytes`` is theirs)
    build_subtasks_finished: int | None = None
    build_subtasks: int | None = None
    #: the most bytes the build side could write and be broadcast (``JoinSwitch.limit``):
    #: ``threshold``, or more where the probe side's estimate allowed
    limit: int | None = None
    #: the estimate of the probe side's bytes (None: unknown; ``sparkplan.switchable``)
    probe_estimate: int | None = None

    def describe(self) -> str:
        size = f"{self.build_bytes / 2**20:.2f} MiB over '{self.build_edge}'"
        limit = f"adaptive.broadcast_bytes {self.threshold / 2**20:g} MiB"
        if self.limit is not None and self.limit > self.threshold:
            limit = (
                f"its limit {self.limit / 2**20:.2f} MiB (over {limit}: a copy per probe task "
                f"within the estimate of '{self.probe_edge}', "
                f"{(self.probe_estimate or 0) / 2**20:.2f} MiB, and at most "
                "adaptive.broadcast_max_bytes and a quarter of operators.memory)"
            )
        done, total = self.build_subtasks_finished, self.build_subtasks
        if done is not None and total is not None and done < total:
            return (
                f"'{self.vertex}' ({self.spark_join}) stayed shuffled: the first {done} of its "
                f"{total} build subtasks wrote {size} > {limit}, so its probe side did not "
                "wait for the others"
            )
        if self.switched and self.split:
            return (
                f"'{self.vertex}' ({self.spark_join}) became a broadcast join: its build side "
                f"wrote {size} <= {limit}; the join ran in the tasks producing "
                f"'{self.probe_edge}', which carried the joined rows to the rest of the stage"
            )
        if self.switched:
            return (
                f"'{self.vertex}' ({self.spark_join}) became a broadcast join: its build side "
                f"wrote {size} <= {limit}; edge '{self.probe_edge}' was left out and the join "
                "ran in its producer's tasks"
            )
        return f"'{self.vertex}' ({self.spark_join}) stayed shuffled: {size} > {limit}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "vertex": self.vertex,
            "spark_join": self.spark_join,
            "build_edge": self.build_edge,
            "probe_edge": self.probe_edge,
            "build_bytes": self.build_bytes,
            "threshold": self.threshold,
            "switched": self.switched,
            "split": self.split,
            "build_subtasks_finished": self.build_subtasks_finished,
            "build_subtasks": self.build_subtasks,
            "limit": self.limit,
            "probe_estimate": self.probe_estimate,
        }


@dataclass
class JoinSwitch:
    """One candidate join (see the module docstring): the probe producer waits for the
    build producer until ``decide`` is called."""

    join: SwitchableJoin
    #: the join's vertex name as planned
    vertex: str
    build_edge: str
    probe_edge: str
    #: ``adaptive.broadcast_bytes``
    threshold: int
    #: ``adaptive.broadcast_max_bytes``, at most a quarter of ``operators.memory`` (0: the
    #: limit is ``threshold``)
    max_bytes: int = 0
    #: set once decided
    change: AdaptiveChange | None = None

    @property
    def holding(self) -> bool:
        return self.change is None

    def probe_estimate(self) -> int | None:
        """The estimate of the probe side's bytes, where it may bound the build side
        (None: unknown, or not to be trusted: ``SwitchableJoin.left_bound``)."""
        join = self.join
        return join.left_bound if self.probe_edge == join.left_edge else join.right_bound

    def limit(self, graph: JobGraph) -> int:
        """The most bytes the build side may write and still be broadcast (see the module
        docstring): ``threshold``, or up to ``max_bytes`` while one copy per probe task
        stays within the probe side's estimate.  The probe producer's parallelism is read
        when asked: an earlier switch may have made another vertex that producer."""
        estimate = self.probe_estimate()
        if estimate is None or self.max_bytes <= self.threshold:
            return self.threshold
        tasks = max(graph.vertices[graph.edge(self.probe_edge).source].parallelism, 1)
        return max(self.threshold, min(self.max_bytes, estimate // tasks))

    def producers(self, graph: JobGraph) -> tuple[VertexId, VertexId]:
        """(build producer, probe producer): looked up by edge, since an earlier switch may
        have merged a join into another vertex."""
        return graph.edge(self.build_edge).source, graph.edge(self.probe_edge).source

    def describe(self) -> str:
        """For explain before the run."""
        limit = f"{self.threshold / 2**20:g} MiB (adaptive.broadcast_bytes)"
        if self.max_bytes > self.threshold and self.probe_estimate() is not None:
            limit += (
                f", or up to {self.max_bytes / 2**20:g} MiB (adaptive.broadcast_max_bytes, "
                "at most a quarter of operators.memory) "
                "while a copy per probe task stays within the estimate of "
                f"'{self.probe_edge}', {(self.probe_estimate() or 0) / 2**20:.2f} MiB"
            )
        rest = (
            f", and '{self.probe_edge}' carries the joined rows to the rest of the stage"
            if self.join.split is not None
            else ""
        )
        return (
            f"'{self.vertex}' ({self.join.spark_join}, {self.join.join_type}) may become a "
            f"broadcast join: if '{self.build_edge}' carries at most {limit}, the join "
            f"runs in the tasks producing "
            f"'{self.probe_edge}'{rest}, which wait for '{self.build_edge}'s producer to "
            "finish"
        )

    def decide(self, graph: JobGraph, written: int, done: int, subtasks: int) -> AdaptiveChange:
        """Switch the join if ``written`` (the build side's bytes) is within ``limit``;
        ``done`` of ``subtasks`` build subtasks wrote it (a partial side may only be
        decided as staying shuffled: ``runtime.join_switch``)."""
        limit = self.limit(graph)
        switched = written <= limit
        assert not (switched and done < subtasks)
        if switched:
            switch(graph, self)
        self.change = AdaptiveChange(
            self.vertex,
            self.join.spark_join,
            self.build_edge,
            self.probe_edge,
            written,
            self.threshold,
            switched,
            split=switched and self.join.split is not None,
            build_subtasks_finished=done,
            build_subtasks=subtasks,
            limit=limit,
            probe_estimate=self.probe_estimate(),
        )
        return self.change


def find_candidates(
    graph: JobGraph, hints: dict[VertexId, SwitchableJoin], threshold: int, max_bytes: int = 0
) -> None:
    """Add to ``graph.join_switches`` the joins that may switch (``hints``: the join
    vertices the translation marked), and to ``graph.join_notes`` why the others may
    not.  ``threshold`` (``adaptive.broadcast_bytes``) <= 0 turns it off; ``max_bytes``
    is ``adaptive.broadcast_max_bytes``, at most a quarter of ``operators.memory``."""
    if threshold <= 0:
        return
    for vid in sorted(hints):
        join = hints[vid]
        vertex = graph.vertices[vid]
        reason = _ineligible(graph, vertex, join)
        if reason is not None:
            graph.join_notes.append(
                f"'{vertex.name}' ({join.spark_join}) stays a shuffled join: {reason}"
            )
            continue
        build = join.build_edge()
        assert build is not None
        probe = join.left_edge if build == join.right_edge else join.right_edge
        small, big = graph.edge(build).source, graph.edge(probe).source
        if _reaches(graph, big, small):
            graph.join_notes.append(
                f"'{vertex.name}' ({join.spark_join}) stays a shuffled join: its probe side "
                "feeds its build side"
            )
            continue
        graph.join_switches.append(
            JoinSwitch(join, vertex.name, build, probe, threshold, max_bytes)
        )


def _ineligible(graph: JobGraph, vertex: JobVertex, join: SwitchableJoin) -> str | None:
    """Why the join stage ``vertex`` cannot become a broadcast join (None: it can)."""
    if join.build_edge() is None:
        return f"a {join.join_type} join has no side a broadcast join may build"
    names = [e.name for e in vertex.inputs]
    if sorted(set(names)) != sorted(names) or not {join.left_edge, join.right_edge} <= set(names):
        return "its stage does not read the join's two sides once each"
    for edge in vertex.inputs:
        if edge.name in (join.left_edge, join.right_edge):
            continue
        if join.split is not None and join.tokens.get(edge.name, "") not in join.split:
            continue  # the rest of the stage reads it, as before
        if edge.partitioner.kind is not PartitionerKind.BROADCAST or edge.target_operator:
            return f"its stage also reads '{edge.name}', which is not a broadcast input"
        if not (edge.partition_type.is_blocking() and edge.partition_type.reconsumable):
            return f"its broadcast input '{edge.name}' is {edge.mode}, not blocking"
    if vertex.cache_fill or vertex.cache_read or vertex.co_location:
        return "its stage fills or reads a cache, or is co-located"
    if vertex.adaptive is not None or len(vertex.operators) != 1:
        return "its stage's parallelism is adaptive or it has operators chained"
    if not isinstance(vertex.operators[0], SqlQuery) or vertex.operators[0].binding is None:
        return "its stage's query was not bound when planned"
    if join.split is None and not all(e.partitioner.is_all_to_all() for e in vertex.outputs):
        return "its stage feeds a forward edge"
    for edge in (graph.edge(join.left_edge), graph.edge(join.right_edge)):
        if edge.partitioner.kind is not PartitionerKind.HASH or edge.combiner is not None:
            return f"edge '{edge.name}' is not a plain hash exchange"
        if edge.partition_type.must_be_pipelined():
            return f"edge '{edge.name}' is pipelined"
    build = graph.edge(join.build_edge() or "")
    if not build.partition_type.reconsumable:
        return f"edge '{build.name}' is {build.mode}, whose partitions are read once"
    probe_name = join.left_edge if build.name == join.right_edge else join.right_edge
    probe = graph.vertices[graph.edge(probe_name).source]
    if len(probe.outputs) != 1:
        return f"the producer of '{probe_name}' feeds more than the join"
    if probe.adaptive is not None or probe.cache_fill is not None:
        return f"the producer of '{probe_name}' is adaptive or fills a cache"
    keys = graph.edge(probe_name).partitioner.keys
    if join.split is not None and not set(keys) <= set(join.split_columns):
        return f"the join's rows lack the key columns of '{probe_name}'"
    return None


def _reaches(graph: JobGraph, start: VertexId, goal: VertexId) -> bool:
    """Whether ``goal`` is downstream of ``start`` (over edges and the holds so far): the
    probe side must not feed the build side, or the hold would never end."""
    holds: dict[VertexId, set[VertexId]] = {}
    for s in graph.join_switches:
        small, big = s.producers(graph)
        holds.setdefault(small, set()).add(big)
    seen, stack = set(), [start]
    while stack:
        v = stack.pop()
        if v == goal:
            return True
        if v in seen:
            continue
        seen.add(v)
        stack.extend(e.target for e in graph.vertices[v].outputs)
        stack.extend(holds.get(v, ()))
    return False


def switch(graph: JobGraph, candidate: JoinSwitch) -> None:
    """Rewrite ``graph``: the join stage (or, split, its join) runs chained into the probe
    producer, reading the build edge whole (see the module docstring).  Called before
    the probe producer or the join deployed."""
    build, probe = graph.edge(candidate.build_edge), graph.edge(candidate.probe_edge)
    join_vertex = graph.vertices[build.target]
    producer = graph.vertices[probe.source]
    old = join_vertex.operators[0]
    assert isinstance(old, SqlQuery) and old.binding is not None
    join = candidate.join
    # the inputs anew: the probe side streamed in from the chain, the build side, then
    # the stage's broadcast inputs the moved query reads, each read whole
    others = sorted(
        (e for e in join_vertex.inputs if e is not probe and e is not build),
        key=lambda e: e.target_input,
    )
    planned = old.planned_inputs
    bound = len(planned) == len(others) + 2
    moved = (
        others if join.split is None else [e for e in others if join.tokens[e.name] in join.split]
    )
    order = [probe, build, *moved]
    operator, first = _probe_side_query(
        producer, old, join.template if join.split is None else join.split, order, join, bound
    )
    if join.split is None:
        producer.outputs.remove(probe)
        graph.edges.remove(probe)
    build.reads_whole = join_vertex.parallelism  # the subpartitions its producers write
    for index, edge in enumerate(order[1:], start=first):
        join_vertex.inputs.remove(edge)
        edge.target, edge.target_input = producer.id, index
        edge.target_operator = len(producer.operators) - 1
        if edge is not build:
            edge.reads_whole = 1  # a broadcast partition's one subpartition
        producer.inputs.append(edge)
    if join.split is not None:
        _rest_of_stage(join_vertex, old, join, probe, operator, bound)
        return
    join_vertex.inputs.clear()
    for edge in join_vertex.outputs:
        edge.source = producer.id
        producer.outputs.append(edge)
    if graph.sink == join_vertex.id:  # the job's last stage: its tasks write the result
        graph.sink = producer.id
    del graph.vertices[join_vertex.id]


def _probe_side_query(
    producer: JobVertex,
    old: SqlQuery,
    template: str,
    order: list[JobEdge],
    join: SwitchableJoin,
    bound: bool,
) -> tuple[SqlQuery, int]:
    """The query the probe producer's tasks run for the join (``template`` over ``order``:
    the probe edge, the build edge, the broadcast inputs), appended to its chain, and
    the number of its first input after the probe side."""
    planned = old.planned_inputs
    tokens = join.tokens
    head = _fusable(producer, bound)
    name = old.name if join.split is None else f"{old.name}.join"
    if head is None:
        # the probe producer's chain ends in the join, its probe side input 0
        first = 1
        names = {tokens[e.name]: input_name(i) for i, e in enumerate(order)}
        operator = SqlQuery(_named(template, names), name, inputs=len(order))
        schemas = [planned[e.target_input] for e in order] if bound else []
    else:
        # the producer's query is the join's probe side, in the same query: its inputs
        # keep their numbers, the join's others come after them, so its variables
        # (``SqlQuery.variables``, over its own inputs) still read what they read
        first = head.num_inputs
        names = {tokens[order[0].name]: f"({head.query})"}
        names |= {tokens[e.name]: input_name(first + i) for i, e in enumerate(order[1:])}
        operator = SqlQuery(
            _named(template, names),
            f"{head.name}->{name}",
            inputs=first + len(order) - 1,
            streams=head.streams or head.num_inputs == 1,
            variables=head.variables,
        )
        schemas = head.planned_inputs + [planned[e.target_input] for e in order[1:]]
        producer.operators.clear()
    if schemas and _same_output(old, join, head, planned[order[0].target_input]):
        assert old.binding is not None
        operator.bind_as(schemas, old.binding.schema)
    elif schemas:
        operator.output_schema(schemas)
    producer.operators.append(operator)
    return operator, first


def _same_output(
    old: SqlQuery, join: SwitchableJoin, head: SqlQuery | None, probe: pa.Schema
) -> bool:
    """Whether the moved query outputs what the join stage's did (``old``): the whole
    stage moved, and its probe side is the edge's rows as planned or the producer's
    query giving exactly their schema.  Then the query is bound as the stage's without
    asking DuckDB again (``SqlQuery.bind_as``)."""
    if join.split is not None or old.binding is None:
        return False
    return head is None or (head.binding is not None and head.binding.schema.equals(probe))


def _rest_of_stage(
    vertex: JobVertex,
    old: SqlQuery,
    join: SwitchableJoin,
    probe: JobEdge,
    moved: SqlQuery,
    bound: bool,
) -> None:
    """A split stage (``SwitchableJoin.split``): ``vertex`` runs the rest of its query over
    the joined rows that ``probe`` now carries (input 0), its other inputs after."""
    assert join.split is not None
    planned = old.planned_inputs
    kept = sorted((e for e in vertex.inputs if e is not probe), key=lambda e: e.target_input)
    names = {SPLIT_TOKEN: input_name(0)}
    names |= {join.tokens[e.name]: input_name(i) for i, e in enumerate(kept, start=1)}
    operator = SqlQuery(_named(join.template, names), old.name, inputs=1 + len(kept))
    joined = moved.binding.schema if moved.binding is not None else None
    if bound and joined is not None:
        operator.output_schema([joined, *(planned[e.target_input] for e in kept)])
    # the producer sends every column the join outputs, hashed on the same keys as before
    probe.columns = None
    for index, edge in enumerate([probe, *kept]):
        edge.target_input, edge.target_operator = index, 0
    vertex.inputs[:] = [probe, *kept]
    vertex.operators[:] = [operator]


def _fusable(producer: JobVertex, planned: bool) -> SqlQuery | None:
    """The probe producer's query, if the join can take it in as its probe side: the
    producer runs one ``sql`` query (a translated stage), bound when planned, as is the
    join (``planned``).  Then DuckDB runs both as one pipeline (a Parquet split read by
    DuckDB goes straight into the join), where two chained queries hand every probe
    row over through Arrow and a second query's input queue (Q5's ``lineitem`` stage
    at TPC-H SF1, half the file on one thread: 0.70 s of CPU chained, 0.24 s as one)."""
    if not planned or len(producer.operators) != 1:
        return None
    head = producer.operators[0]
    if not isinstance(head, SqlQuery) or head.binding is None:
        return None
    return head if len(head.planned_inputs) == head.num_inputs else None


def _named(template: str, names: dict[str, str]) -> str:
    """``template`` with each token replaced by its table name, in one pass."""
    pattern = re.compile("|".join(re.escape(t) for t in names))
    return pattern.sub(lambda m: names[m.group(0)], template)
