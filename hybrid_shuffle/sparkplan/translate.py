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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hybrid_shuffle.errors import UnsupportedPlanError
from hybrid_shuffle.plan.logical import ExchangeSpec
from hybrid_shuffle.shuffle.routing import Partitioner, PartitionerKind
from hybrid_shuffle.sources.parquet import EMPTY_COLUMN
from hybrid_shuffle.spark import SIZE_HINT
from hybrid_shuffle.sparkplan.expressions import Sql, Unsupported
from hybrid_shuffle.sparkplan.operators import OPERATORS
from hybrid_shuffle.sparkplan.physical import PhysicalPlan, output_attributes, subtree_dataframe
from hybrid_shuffle.sparkplan.relation import Column, Rel
from hybrid_shuffle.sparkplan.stage import Stage
from hybrid_shuffle.sparkplan.tree import Node
from hybrid_shuffle.sparkplan.types import UnsupportedType, column_type

if TYPE_CHECKING:
    from hybrid_shuffle.api.job import Job
    from hybrid_shuffle.api.stream import Stream

__all__ = ["SparkPlanInfo", "Translator", "describe"]

FALLBACKS = ("spark", "error")


@dataclass
class SparkPlanInfo:
    """What a translated job keeps of its Spark plan, for ``explain()``."""

    #: edge name -> the Spark exchange it replaces (``Exchange (11) hashpartitioning(..)``)
    edges: dict[str, str] = field(default_factory=dict)
    #: what ran in Spark and why: ``{"operator": "Generate (4)", "reason": ...}``
    spark_subtrees: list[dict[str, str]] = field(default_factory=list)
    formatted: str = ""
    #: seconds Spark took to plan the query (AQE off), and the translation after it
    spark_seconds: float = 0.0
    translate_seconds: float = 0.0


@dataclass
class _Producer:
    stream: Stream
    spec: ExchangeSpec


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
        self._stage: Stage | None = None
        self._gathers = 0

    def translate(self) -> Stream:
        started = time.perf_counter()
        stage = Stage(self.job)
        rel = self.rel(self.plan.root, stage)
        stream = stage.finish(rel, "result", final=True)
        self.info.spark_seconds = self.plan.spark_seconds
        self.info.translate_seconds = time.perf_counter() - started + self.plan.parse_seconds
        return stream

    # -- the walk -------------------------------------------------------------------------

    def rel(self, node: Node, stage: Stage) -> Rel:
        """``node``'s output as a relation of ``stage`` (its own subtree, in the engine or,
        failing that, in Spark)."""
        handler = OPERATORS.get(node.cls)
        inputs, subtrees = len(stage.inputs), len(self.info.spark_subtrees)
        previous, self._stage = self._stage, stage
        try:
            if handler is None:
                raise Unsupported(
                    f"the operator {node.cls.removesuffix('Exec')} has no translation"
                )
            return handler(self, node, stage)
        except (Unsupported, UnsupportedType) as e:
            # an opaque column (``types.column_type``: an array, a collated string) where
            # its DuckDB type is needed falls back as an untranslated expression does
            reason = f"a column of {e}" if isinstance(e, UnsupportedType) else str(e)
            del stage.inputs[inputs:]
            del self.info.spark_subtrees[subtrees:]
            return self._fall_back(node, stage, reason)
        finally:
            self._stage = previous

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
        df = subtree_dataframe(self.plan, node, self.spark)
        hint = getattr(df, SIZE_HINT, None)
        df = df.toDF(*[c.ref for c in columns])
        if not columns:  # rows of no column: Arrow hands over one null column per row
            df = df.selectExpr(f"CAST(NULL AS BOOLEAN) AS {EMPTY_COLUMN}")
        if hint is not None:
            setattr(df, SIZE_HINT, hint)
        stream = self.job.from_spark(df, name=f"spark_{node.op_id}")
        return stage.read(stream, None, columns)

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
        stream = stage.finish(rel, f"stage_{node.op_id}", final=False)
        edge = f"exchange_{self.plan.shown_id(node.op_id)}"
        spec = ExchangeSpec(partitioner, edge, None, partitions)
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
        return _Producer(producer.stream, dataclasses.replace(producer.spec, edge=edge))

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

    def gather(self, local: Rel, stage: Stage, node: Node) -> Rel:
        """End ``stage`` with ``local`` and read its rows in one subtask, over an edge
        ``gather_<id>`` (Spark's implicit single-partition step of a limit or top-n)."""
        producer = Stage(self.job)
        producer.inputs, stage.inputs = stage.inputs, []
        stream = producer.finish(local, f"stage_{node.op_id}_partial", final=False)
        edge = f"gather_{self.plan.shown_id(node.op_id or -1)}"
        self.info.edges[edge] = f"the gather of {self.describe(node)} (its rows into one task)"
        spec = ExchangeSpec(Partitioner(PartitionerKind.ROUND_ROBIN), edge, None, 1)
        return stage.read(stream, spec, local.columns)

    def subquery_of_stage(self, plan: Node) -> Sql:
        """A scalar subquery's value in the current stage: its plan runs as its own stages
        and its one row reaches every subtask over a broadcast edge ``subquery_<n>``."""
        name = str(plan.get("name", "subquery"))
        found = self._subqueries.get(name)
        if found is None:
            body = plan.children[0] if plan.cls == "SubqueryExec" and plan.children else plan
            stage = Stage(self.job)
            saved = self._stage
            rel = self.rel(body, stage)
            self._stage = saved
            number = name.rsplit("#", 1)[-1]
            stream = stage.finish(rel, f"subquery_{number}", final=False)
            found = (stream, rel.columns[0])
            self._subqueries[name] = found
        stream, column = found
        edge = f"subquery_{name.rsplit('#', 1)[-1]}"
        self.info.edges[edge] = f"{name} (its value, broadcast to the stage using it)"
        spec = ExchangeSpec(Partitioner(PartitionerKind.BROADCAST), edge)
        if self._stage is None:
            raise Unsupported("a scalar subquery outside a stage")
        rel = self._stage.read(stream, spec, [column])
        return Sql(f"({rel.sql})", column.type)
