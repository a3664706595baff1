"""Spark's physical plan -> the engine's logical nodes (``Session.sql``,
``Session.from_dataframe``).

The walk is Comet's: bottom-up through the operator table
(``sparkplan.operators``), each exchange cutting the plan into stages
(``sparkplan.stage``), each stage one DuckDB query in the engine's tasks.  An
operator with no translation, or with an expression that has none, runs in
Spark instead, with its whole subtree, and comes in through ``from_spark``
(``fallback="spark"``, the default; recorded with its reason in
``explain_data()["spark_subtrees"]``), or is a ``UnsupportedPlanError``
(``fallback="error"``).  Because the result is ordinary logical nodes, every
rule of the engine (modes, output-on-EOF, auto parallelism, failover, caching)
applies to a translated plan as to a hand-built one.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hybrid_shuffle.api.spark_plan import SparkPlanInfo
from hybrid_shuffle.empty_column import EMPTY_COLUMN
from hybrid_shuffle.errors import HybridShuffleError, PlanError, UnsupportedPlanError, summary
from hybrid_shuffle.operators.python import PYTHON_STEPS
from hybrid_shuffle.operators.sql import rejection
from hybrid_shuffle.plan.edge_rules import EdgeFacts
from hybrid_shuffle.plan.logical import ExchangeSpec
from hybrid_shuffle.plan.planner import reachable
from hybrid_shuffle.shuffle.routing import Partitioner, PartitionerKind
from hybrid_shuffle.spark import SIZE_HINT
from hybrid_shuffle.spark.bridge import handover_types
from hybrid_shuffle.sparkplan.built_first import BuiltFirst
from hybrid_shuffle.sparkplan.edge_facts import consumer_kind, exchange_facts
from hybrid_shuffle.sparkplan.expressions import Sql, Unsupported, compile_expression
from hybrid_shuffle.sparkplan.expressions.arithmetic import precision_loss
from hybrid_shuffle.sparkplan.operators import OPERATORS
from hybrid_shuffle.sparkplan.operators.exchange import read_exchange
from hybrid_shuffle.sparkplan.physical import (
    PhysicalPlan,
    output_attributes,
    output_partitioning,
    subtree_dataframe,
)
from hybrid_shuffle.sparkplan.pushed_keys import Push
from hybrid_shuffle.sparkplan.pushed_keys import find as find_pushes
from hybrid_shuffle.sparkplan.relation import Column, Rel, distinct
from hybrid_shuffle.sparkplan.stage import Stage
from hybrid_shuffle.sparkplan.switchable import estimate, switchable_join
from hybrid_shuffle.sparkplan.tree import EXCHANGES, WRAPPERS, Node
from hybrid_shuffle.sparkplan.types import UnsupportedType, column_type

if TYPE_CHECKING:
    import pyarrow as pa

    from hybrid_shuffle.api.job import Job
    from hybrid_shuffle.api.stream import Stream
    from hybrid_shuffle.config import AdaptiveConfig
    from hybrid_shuffle.plan.logical import LogicalNode

__all__ = ["SparkPlanInfo", "Translator", "describe"]

FALLBACKS = ("spark", "error")
#: translations of one plan at most: each one after the first runs one more operator that
#: DuckDB rejected in Spark
_ATTEMPTS = 16


@dataclass
class _Producer:
    stream: Stream
    spec: ExchangeSpec


class _Rejected(Exception):
    """DuckDB cannot bind a finished stage's SQL: ``node`` is to run in Spark, and the
    plan is translated again."""

    def __init__(self, node: Node, reason: str) -> None:
        super().__init__(reason)
        self.node = node
        self.reason = reason


def _schema(node: LogicalNode) -> pa.Schema | None:
    """The output schema of a node the translation made, where known without running:
    a source's, or a checked stage's."""
    if node.is_source:
        return node.source_schema
    binding = getattr(node.operator, "binding", None)
    if binding is not None:
        return binding.schema
    if isinstance(node.operator, PYTHON_STEPS):  # its declared output, over its inputs'
        return node.operator.output_schema([_schema(up) for up, _ in node.inputs])
    return None


def describe(node: Node) -> str:
    """A Spark operator as the formatted explain names it: ``SortMergeJoin (12)``."""
    name = node.cls.removesuffix("Exec")
    return f"{name} ({node.op_id})" if node.op_id is not None else name


class Translator:
    """One plan's translation into ``job``."""

    def __init__(self, job: Job, plan: PhysicalPlan, spark: Any, fallback: str) -> None:
        self.job = job
        self.plan = plan
        self.spark = spark
        self.fallback = fallback
        self.info = SparkPlanInfo(formatted=plan.formatted)
        self.by_id = plan.nodes_by_id()
        self._exchanges: dict[int, tuple[_Producer, list[Column]]] = {}
        self._subqueries: dict[str, tuple[Stream, Column]] = {}
        #: per subquery, the edge each stage reading its value reads it over
        self._subquery_edges: dict[str, dict[Stage, str]] = {}
        self._stage: Stage | None = None
        #: the stages finished, in order, with their streams
        self._stages: list[tuple[Stage, Stream]] = []
        self._gathers = 0
        self._parent_of: dict[int, Node] | None = None
        #: ``id(node)`` -> why it runs in Spark: operators DuckDB rejected (``finish``)
        self._forced: dict[int, str] = {}
        #: every operator translated, in the order finished (children first), with its
        #: relation and the stage inputs it could read (token, node): what ``finish``
        #: checks one by one when DuckDB rejects a stage
        self._done: list[tuple[Node, Rel, list[tuple[str, LogicalNode]]]] = []
        #: ``id(operator)`` -> the selective broadcast joins' keys pushed onto its output
        #: (``sparkplan.pushed_keys``)
        originals = {r: self.by_id[o] for r, o in plan.reuses.items() if o in self.by_id}
        self._pushes = find_pushes(plan.trees(), originals)
        #: per built side pushed (its operator id), the edge each stage reads it over
        self._key_edges: dict[int, dict[Stage, str]] = {}
        #: the shuffled semi joins' right sides computed first (``sparkplan.built_first``)
        adaptive = job.cluster.config.adaptive
        self._pushes = {
            target: kept
            for target, pushes in self._pushes.items()
            if (kept := [p for p in pushes if _kept(plan, p, adaptive)])
        }
        #: ``id(join)`` of the shuffled semi and anti joins whose left keys were pushed
        #: down their right side: such a join may not switch to a broadcast join, whose
        #: left side's producer would wait for the right side's, which waits for its keys
        self._left_pushed: set[int] = set()
        self._first_joins = {
            id(p.build): p.join for ps in self._pushes.values() for p in ps if p.computed_first
        }
        self._first = BuiltFirst(self, self._first_joins)

    def translate(self) -> Stream:
        started = time.perf_counter()
        # decimal arithmetic is typed as Spark typed it (the JSON lacks the types)
        loss = self.spark.conf.get("spark.sql.decimalOperations.allowPrecisionLoss", "true")
        with precision_loss(str(loss).strip().lower() == "true"):
            stream = self._translate_checked()
        self.info.spark_seconds = self.plan.spark_seconds
        self.info.translate_seconds = time.perf_counter() - started + self.plan.parse_seconds
        return stream

    def _translate_checked(self) -> Stream:
        """The plan translated, every stage bound on DuckDB as it is finished (Gluten's
        plan-time validation); an operator whose SQL DuckDB rejects runs in Spark, and
        the plan is translated again with it there."""
        for attempt in range(_ATTEMPTS + 1):
            self._exchanges, self._subqueries, self._done = {}, {}, []
            self._subquery_edges, self._stages, self._key_edges = {}, [], {}
            self._left_pushed = set()
            self._first = BuiltFirst(self, self._first_joins)
            self.info.edges, self.info.spark_subtrees = {}, []
            try:
                stage = Stage(self.job)
                rel = self.rel(self.plan.root, stage)
                stream = self.finish(stage, rel, self.plan.root, "result", final=True)
                self._keep_the_jobs_edges(stream)
                return stream
            except _Rejected as e:
                node = e.node
                # the same operator again (a reused exchange's original), or too many:
                # the whole plan runs in Spark rather than fail a query Spark answers
                if id(node) in self._forced or attempt == _ATTEMPTS - 1:
                    node = self.plan.root
                if id(node) in self._forced:
                    raise PlanError(
                        f"the Spark plan cannot run in the engine: {e.reason}"
                    ) from None
                self._forced[id(node)] = e.reason
        raise AssertionError("unreachable: the root runs in Spark at the last attempt")

    def finish(self, stage: Stage, rel: Rel, top: Node, name: str, final: bool) -> Stream:
        """``stage.finish``, then the stage's query bound on DuckDB over its inputs'
        schemas; if DuckDB rejects it, the lowest operator whose own SQL it rejects (or
        ``top``, the stage's last) is to run in Spark (``_Rejected``)."""
        stream = stage.finish(rel, name, final)
        self._stages.append((stage, stream))
        # a shuffled join that may become a broadcast join at run time (``plan.join_switch``)
        rels = {id(node): out for node, out, _ in self._done}
        stream.node.switchable = switchable_join(
            self.plan, top, stage, rel, final, rels, vetoed=self._left_pushed
        )
        schemas = [_schema(up) for up, _ in stream.node.inputs]
        operator = stream.node.operator
        if operator is None or any(s is None for s in schemas):
            return stream
        try:
            operator.output_schema(schemas)
        except PlanError as e:
            culprit, reason = self._culprit()
            if culprit is None:
                culprit, reason = top, summary(e.__cause__ or e)
            raise _Rejected(culprit, f"DuckDB could not plan the stage: {reason}") from e
        return stream

    def _keep_the_jobs_edges(self, stream: Stream) -> None:
        """``info.edges`` for the edges of the job ending in ``stream`` only: not those of a
        subtree translated before an operator above it turned out to run in Spark (its
        stages are no part of the job), nor a ``ReusedExchange``'s that a stage read
        over its original's edge (``Stage.read``), whose text says so instead."""
        nodes = reachable(stream.node)
        reached = {id(node) for node in nodes}
        edges = {spec.edge for node in nodes for _, spec in node.inputs if spec and spec.edge}
        texts = dict(self.info.edges)
        for stage, finished in self._stages:
            if id(finished.node) not in reached:
                continue
            for item in stage.inputs:
                kept = item.spec.edge if item.spec is not None else None
                if kept and item.aliases:
                    also = "; ".join(texts.get(a, a) for a in item.aliases)
                    self.info.edges[kept] = (
                        f"{self.info.edges.get(kept, kept)}; read once for {also}"
                    )
        self.info.edges = {k: v for k, v in self.info.edges.items() if k in edges}

    def _culprit(self) -> tuple[Node | None, str]:
        """The first operator translated whose own SQL DuckDB rejects, and why."""
        for node, rel, inputs in self._done:
            if id(node) in self._forced:
                continue
            tables = {token: _schema(up) for token, up in inputs}
            known = {t: s for t, s in tables.items() if s is not None}
            if len(known) < len(tables):
                continue
            reason = rejection(rel.sql, known)
            if reason is not None:
                return node, reason
        return None, ""

    # -- the walk -------------------------------------------------------------------------

    def rel(self, node: Node, stage: Stage) -> Rel:
        """``node``'s output as a relation of ``stage`` (its own subtree, in the engine or,
        failing that, in Spark)."""
        forced = self._forced.get(id(node))
        if forced is not None:
            return self._fall_back(node, stage, forced)
        first = self._first.read(node, stage)
        if first is not None:
            return first
        handler = OPERATORS.get(node.cls)
        inputs, subtrees = len(stage.inputs), len(self.info.spark_subtrees)
        previous, self._stage = self._stage, stage
        try:
            if handler is None:
                raise Unsupported(
                    f"the operator {node.cls.removesuffix('Exec')} has no translation"
                )
            out = handler(self, node, stage)
        except (_Rejected, HybridShuffleError):
            raise
        except (Unsupported, UnsupportedType) as e:
            # an opaque column (``types.column_type``: an array, a collated string) where
            # its DuckDB type is needed falls back as an untranslated expression does
            reason = f"a column of {e}" if isinstance(e, UnsupportedType) else str(e)
        except Exception as e:  # a translation's own failure: the operator runs in Spark
            reason = f"its translation failed ({type(e).__name__}: {summary(e)})"
        else:
            for push in self._pushes.get(id(node), ()):
                out = self._pushed_onto(node, out, stage, push)
            self._record(node, out, stage)
            return out
        finally:
            self._stage = previous
        del stage.inputs[inputs:]
        del self.info.spark_subtrees[subtrees:]
        return self._fall_back(node, stage, _sentence(reason))

    def _pushed_onto(self, node: Node, out: Rel, stage: Stage, push: Push) -> Rel:
        """``out`` (``node``'s rows, a stage below ``push.join``'s) semi-joined with the
        join's built side, read by this stage too (``sparkplan.pushed_keys``); ``out``
        itself where a key is not among its columns or the built side's key does not
        translate."""
        by_id = {c.id: c for c in out.columns}
        if push.build.op_id is None or any(key not in by_id for key, _ in push.keys):
            return out
        readers = self._key_edges.setdefault(push.build.op_id, {})
        edge = readers.get(stage)
        if edge is None:
            edge = f"exchange_{self.plan.shown_id(push.build.op_id)}_keys"
            if push.computed_first:
                edge = f"build_{self.plan.shown_id(push.join.op_id or -1)}_keys"
            edge += f"_{len(readers) + 1}" if readers else ""
        inputs = len(stage.inputs)
        try:
            if push.computed_first:
                built = self._first.keys(push.build, stage, edge)
            else:
                built = read_exchange(self, push.build, stage, edge, broadcast=push.left_side)
            scope = built.scope(self.subquery_of_stage)
            on = " AND ".join(
                f"({by_id[key].ref} = {compile_expression(expr, scope).text})"
                for key, expr in push.keys
            )
        except (Unsupported, UnsupportedType):
            del stage.inputs[inputs:]
            return out
        readers[stage] = edge
        build, join, cut = (self.describe(n) for n in (push.build, push.join, node))
        if push.left_side:
            self._left_pushed.add(id(push.join))
            self.info.edges[edge] = (
                f"the rows of {build}, the left side of {join}, whose keys drop the rows of "
                f"{cut} on its right side that cannot join, before their exchange"
            )
        else:
            self.info.edges[edge] = (
                f"the keys of {build}, which {join} joins: the rows of {cut} that cannot "
                "join there are dropped before their exchange"
            )
        if push.computed_first or push.left_side:
            return self._filtered_unless_many(out, built, on, stage, edge)
        semi = f"({out.sql}) AS l SEMI JOIN ({built.sql}) AS r ON {on}"
        return Rel(f"SELECT {out.select_list()} FROM {semi}", out.columns, streams=out.streams)

    def _filtered_unless_many(self, out: Rel, built: Rel, on: str, stage: Stage, edge: str) -> Rel:
        """``out`` semi-joined with a side computed first (``sparkplan.built_first``),
        unless the task gets more than ``adaptive.semi_join_filter_max_keys`` of its
        rows: then every row passes.  The task decides once the keys are staged, in a
        DuckDB variable (``SqlQuery.variables``) that DuckDB's optimizer folds, so only
        the branch taken is planned: no hash table of the keys when there are too many,
        one scan of the rows either way.  Unset (the query bound, or moved by a rewrite
        of the graph without it), it means the semi join."""
        limit = self.job.cluster.config.adaptive.semi_join_filter_max_keys
        self.info.edges[edge] += (
            f", unless there are more than {limit:,} keys (then every row passes; "
            "adaptive.semi_join_filter_max_keys)"
        )
        variable = f"hs_every_row_{edge}"  # an edge's name is unique in its job
        stage.variables[variable] = f"(SELECT count(*) FROM ({built.sql}) AS k) > {limit}"
        every = f"coalesce(getvariable('{variable}'), false)"
        items = out.select_list()
        keys = f"(SELECT * FROM ({built.sql}) AS b WHERE NOT {every}) AS r"
        sql = (
            f"WITH l AS NOT MATERIALIZED ({out.sql}) "
            f"SELECT {items} FROM l WHERE {every} "
            f"UNION ALL SELECT {items} FROM l SEMI JOIN {keys} ON {on}"
        )
        return Rel(f"SELECT {items} FROM ({sql}) AS u", out.columns, streams=out.streams)

    def rewritten(self, node: Node, rel: Rel) -> None:
        """``node``'s relation is now ``rel`` (an operator above it moved into it:
        ``operators.join``), for what reads the translated operators after the stage
        (``switchable_join``'s split: the query it cuts out of the stage)."""
        assert self._stage is not None
        self._record(node, rel, self._stage)

    def _record(self, node: Node, rel: Rel, stage: Stage) -> None:
        """``node`` translated as ``rel``, with the inputs ``stage`` has so far."""
        self._done.append((node, rel, [(i.token, i.stream.node) for i in stage.inputs]))

    def _fall_back(self, node: Node, stage: Stage, reason: str) -> Rel:
        what = self.describe(node)
        if self.fallback == "error":
            raise UnsupportedPlanError(
                f"the Spark operator {what} cannot run in the engine ({reason}); pass "
                "fallback='spark' to let Spark compute that part of the plan"
            )
        columns = self.jvm_output(node)
        self.info.spark_subtrees.append({"operator": what, "reason": reason})
        return self.spark_leaf(node, stage, columns)

    def spark_leaf(self, node: Node, stage: Stage, columns: list[Column]) -> Rel:
        """``node``'s subtree computed by Spark and read through ``from_spark``."""
        columns = distinct(columns)  # an attribute output twice: its copies named apart
        df = subtree_dataframe(self.plan, node, self.spark)
        hint = vars(df).get(SIZE_HINT)  # getattr parses the schema: no calendar interval
        df = handover_types(df.toDF(*[c.ref for c in columns]))  # what Arrow cannot carry
        if not columns:  # rows of no column: Arrow hands over one null column per row
            df = df.selectExpr(f"CAST(NULL AS BOOLEAN) AS {EMPTY_COLUMN}")
        if hint is not None:
            setattr(df, SIZE_HINT, hint)
        stream = self.job.from_spark(df, name=f"spark_{node.op_id}")
        return stage.read(stream, self._handover_spec(node, columns), columns)

    def _handover_spec(self, node: Node, columns: list[Column]) -> ExchangeSpec | None:
        """The edge a Spark-computed subtree is read over.  Spark may plan no exchange
        above a subtree already partitioned as its parent needs (a join or an aggregate
        on the keys it is hash-partitioned by, a global aggregate over one partition),
        but its rows reach the engine in splits that keep no such partitioning: so they
        are hash-partitioned again by the engine on the same keys (as the engine
        partitions the parent's other inputs), or gathered into one task, over an edge
        ``handover_<id>``.  Under an exchange, or at the plan's root, the splits are
        read as they come (forward)."""
        parents = self.parents()
        parent = parents.get(id(node))
        while parent is not None and parent.cls in WRAPPERS:
            parent = parents.get(id(parent))
        if parent is None or parent.cls in EXCHANGES:  # an exchange makes its own partitioning
            return None
        keys = output_partitioning(self.plan, node)
        if keys is None:
            return None
        by_id = {c.id: c for c in columns}
        refs = [by_id[k].ref for k in keys if k in by_id]
        edge = f"handover_{self.plan.shown_id(node.op_id or -1)}"
        if keys and len(refs) == len(keys) and not any(by_id[k].type.opaque for k in keys):
            self.info.edges[edge] = (
                f"the rows of {self.describe(node)} from Spark, hash-partitioned again on "
                "the keys Spark left them partitioned by"
            )
            names = tuple(by_id[k].name for k in keys)
            facts = EdgeFacts("hash", names, consumer_kind(node, parents))
            return ExchangeSpec(Partitioner(PartitionerKind.HASH, tuple(refs)), edge, facts=facts)
        self.info.edges[edge] = f"the rows of {self.describe(node)} from Spark, in one task"
        facts = EdgeFacts("gather", (), consumer_kind(node, parents))
        return ExchangeSpec(Partitioner(PartitionerKind.ROUND_ROBIN), edge, None, 1, facts=facts)

    def parents(self) -> dict[int, Node]:
        """``id(child)`` -> its parent operator, over the plan and its subqueries' plans."""
        if self._parent_of is None:
            self._parent_of = {}
            for top in self.plan.trees():
                for parent in top.walk():
                    for child in parent.children:
                        self._parent_of[id(child)] = parent
        return self._parent_of

    def jvm_output(self, node: Node) -> list[Column]:
        """``node``'s output attributes, asked of the JVM (most operators' JSON lacks them)."""
        return [
            Column(a.id, a.name, column_type(a.type_name), a.nullable)
            for a in output_attributes(self.plan, node)
        ]

    # -- edges ----------------------------------------------------------------------------

    def exchange_producer(
        self,
        node: Node,
        build: Callable[[Stage], tuple[Rel, Partitioner, int | None, list[Column]]],
    ) -> tuple[_Producer, list[Column]]:
        """The stage feeding exchange ``node`` and the edge's spec, built once per exchange
        (a reused exchange gets the same)."""
        assert node.op_id is not None
        found = self._exchanges.get(node.op_id)
        if found is not None:
            return found
        stage = Stage(self.job)
        rel, partitioner, partitions, columns = build(stage)
        stream = self.finish(stage, rel, node, f"stage_{node.op_id}", final=False)
        edge = f"exchange_{self.plan.shown_id(node.op_id)}"
        facts = exchange_facts(node, self.parents())
        spec = ExchangeSpec(partitioner, edge, None, partitions, facts=facts)
        self.info.edges[edge] = self.spark_text(node.op_id)
        found = (_Producer(stream, spec), columns)
        self._exchanges[node.op_id] = found
        return found

    def reuse(self, producer: _Producer, node: Node, original_id: int) -> _Producer:
        """The edge of ``ReusedExchange (<id>)``: the same producer as the exchange it
        reuses (its rows are computed once), over an edge of its own, ``exchange_<id>``."""
        edge = f"exchange_{self.plan.shown_id(node.op_id or -1)}"
        self.info.edges[edge] = (
            f"ReusedExchange ({self.plan.shown_id(node.op_id or -1)}), reusing "
            f"{self.spark_text(original_id)}"
        )
        facts = producer.spec.facts
        if facts is not None:  # read by this node's consumer, not the original's
            facts = dataclasses.replace(facts, into=consumer_kind(node, self.parents()))
        spec = dataclasses.replace(producer.spec, edge=edge, facts=facts)
        return _Producer(producer.stream, spec)

    def describe(self, node: Node) -> str:
        """``describe`` with the id the user's ``df.explain(mode="formatted")`` shows."""
        if node.op_id is None:
            return describe(node)
        return f"{node.cls.removesuffix('Exec')} ({self.plan.shown_id(node.op_id)})"

    def spark_text(self, op_id: int) -> str:
        """Operator ``op_id`` as the formatted plan details it (``Exchange (11)
        hashpartitioning(...)``), with the id the user sees."""
        text = self.plan.arguments.get(op_id, f"operator ({op_id})")
        return text.replace(f"({op_id})", f"({self.plan.shown_id(op_id)})", 1)

    def original(self, op_id: int) -> Node | None:
        return self.by_id.get(op_id)

    def gather(self, local: Rel, stage: Stage, node: Node, in_order: bool = False) -> Rel:
        """End ``stage`` with ``local`` and read its rows in one subtask, over an edge
        ``gather_<id>`` (Spark's implicit single-partition step of a limit or top-n);
        ``in_order``: one producer subtask after the other (rows sorted across them)."""
        producer = Stage(self.job)
        producer.inputs, stage.inputs = stage.inputs, []
        stream = self.finish(producer, local, node, f"stage_{node.op_id}_partial", final=False)
        edge = f"gather_{self.plan.shown_id(node.op_id or -1)}"
        self.info.edges[edge] = f"the gather of {self.describe(node)} (its rows into one task)"
        facts = EdgeFacts("gather", (), "limit")
        partitioner = Partitioner(PartitionerKind.ROUND_ROBIN, in_producer_order=in_order)
        spec = ExchangeSpec(partitioner, edge, None, 1, facts=facts)
        return stage.read(stream, spec, local.columns)

    def subquery_of_stage(self, plan: Node) -> Sql:
        """A scalar subquery's value in the current stage: its plan runs as its own stages
        and its one row reaches every subtask over a broadcast edge ``subquery_<n>``, ``n``
        the number ``df.explain(mode="formatted")`` prints for it (``Subquery:n``)."""
        name = str(plan.get("name", "subquery"))
        found = self._subqueries.get(name)
        if found is None:
            body = plan.children[0] if plan.cls == "SubqueryExec" and plan.children else plan
            stage = Stage(self.job)
            saved = self._stage
            rel = self.rel(body, stage)
            self._stage = saved
            number = self.plan.subquery_number(name)
            stream = self.finish(stage, rel, body, f"subquery_{number}", final=False)
            found = (stream, rel.columns[0])
            self._subqueries[name] = found
        stream, column = found
        if self._stage is None:
            raise Unsupported("a scalar subquery outside a stage")
        # one edge per stage reading the value (a subquery Spark reuses in two stages):
        # ``subquery_<n>``, then ``subquery_<n>_2``..
        readers = self._subquery_edges.setdefault(name, {})
        edge = readers.get(self._stage)
        if edge is None:
            edge = f"subquery_{self.plan.subquery_number(name)}"
            edge += f"_{len(readers) + 1}" if readers else ""
            readers[self._stage] = edge
        self.info.edges[edge] = f"{name} (its value, broadcast to the stage using it)"
        facts = EdgeFacts("broadcast", (), None)
        spec = ExchangeSpec(Partitioner(PartitionerKind.BROADCAST), edge, facts=facts)
        rel = self._stage.read(stream, spec, [column])
        return Sql(f"({rel.sql})", column.type)


def _kept(plan: PhysicalPlan, push: Push, adaptive: AdaptiveConfig) -> bool:
    """Whether the translation makes ``push``: a runtime filter's (a side computed first,
    a left side) only under ``adaptive.semi_join_filters``, a left side only where it
    goes first (``_left_first``)."""
    if (push.computed_first or push.left_side) and not adaptive.semi_join_filters:
        return False
    return not push.left_side or _left_first(plan, push, adaptive)


def _left_first(plan: PhysicalPlan, push: Push, adaptive: AdaptiveConfig) -> bool:
    """Whether a semi or anti join's left side (``Push.left_side``) goes first: its rows go
    to every task of the right side's, so only as many as a broadcast may hold
    (``broadcast_max_bytes``, by ``switchable.estimate``, as Spark caps its runtime
    filters' creation side), and only where the runtime join switch would not broadcast
    the right side instead (estimated over ``broadcast_bytes``: the switch needs the
    opposite order, the left side's producer waiting for the right side's)."""
    left = estimate(plan, push.build, decoded=True)
    if left is None or left > adaptive.broadcast_max_bytes:
        return False
    right = estimate(plan, push.join.children[1], decoded=True)
    return right is None or right > adaptive.broadcast_bytes


def _sentence(reason: str) -> str:
    """A fallback's reason as one sentence: its first line, and never a plan's raw JSON
    (a field of a plan node printed whole is cut at its first brace)."""
    text = reason.strip().splitlines()[0] if reason.strip() else "no reason given"
    for brace in ("{", "["):
        cut = text.find(brace + "'") if brace + "'" in text else text.find(brace + '"')
        if cut > 0:
            text = text[:cut].rstrip(" :(") + " (details omitted)"
    return text if len(text) <= 300 else text[:297] + "..."
