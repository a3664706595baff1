"""A shuffled semi join's right side computed in a stage of its own, before the join's
(``pushed_keys.Push.computed_first``), so that its keys can cut the other side's rows
before their exchange: a runtime filter.

TPC-H Q18 semi-joins ``orders`` and ``lineitem`` with the orders of over 300 units,
``l_orderkey IN (SELECT .. GROUP BY l_orderkey HAVING sum(l_quantity) > 300)``.  Spark
plans both as sort-merge semi joins in one stage with the final aggregate, so every
``lineitem`` row (6M at SF1) and every order crosses an exchange, and only the join
stage learns that 57 orders pass.  Neither Spark's estimate nor AQE's (the aggregate's
exchange before the ``HAVING``) can know it.  Here the rows the aggregate's ``HAVING``
keeps are a stage of their own (``stage_<id>``, named after the operator heading the
join's right side as every stage is), reading the aggregate's exchange.  Its rows go
to the join's stage over a hash edge on the join's keys, ``build_<join id>``, where
the join reads them as it read the aggregate's (each task gets the keys of its own
partition, as before), and to the stage making the other side's rows over a broadcast
edge, ``build_<join id>_keys``, where the rows whose key none of them has are dropped
before the exchange.  The join still runs on what arrives: the filter only drops rows
it would drop.

The filter costs every task of the other side a hash table of the keys, and its scan
waits for the aggregate: when a ``HAVING`` keeps most groups that is all cost (1.24x
the time without the filter, every order of TPC-H SF1 kept).  So a task given more
than ``adaptive.semi_join_filter_max_keys`` keys (a million; Spark caps its runtime
filters' creation side too) lets every row pass.  The task decides once the keys are
staged, in a DuckDB variable DuckDB's optimizer folds (``SqlQuery.variables``), so
only the branch taken is planned.  Written into the query instead, as
``count(*) > n OR EXISTS (..)``, the cap saved nothing: DuckDB built the hash table
anyway (BENCHMARKS.md, issue 34's thirty-fourth session).  A count is not a
selectivity: past the cap the filter stops even where it would cut most rows of a
larger table.  Only the keys' stage knows how many groups its ``HAVING`` cut, and it
does not say.

Two such right sides Spark computes alike (Q18's second, over a ``ReusedExchange``)
are one stage: the JVM's ``sameResult`` says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from hybrid_shuffle.plan.logical import ExchangeSpec
from hybrid_shuffle.shuffle.routing import Partitioner, PartitionerKind
from hybrid_shuffle.sparkplan.relation import Column, Rel
from hybrid_shuffle.sparkplan.stage import Stage

if TYPE_CHECKING:
    from hybrid_shuffle.api.stream import Stream
    from hybrid_shuffle.sparkplan.translate import Translator
    from hybrid_shuffle.sparkplan.tree import Node

__all__ = ["BuiltFirst"]


@dataclass
class _Built:
    """One right side computed first: its stage's output and that output's columns."""

    node: Node
    stream: Stream
    columns: list[Column]


class BuiltFirst:
    """The right sides one translation computes first, and the reads of them."""

    def __init__(self, tr: Translator, joins: dict[int, Node]) -> None:
        self.tr = tr
        #: ``id(right side)`` -> the shuffled semi join it is the right side of
        self.joins = joins
        #: ``id(right side)`` -> its stage (that of a right side of the same result)
        self._built: dict[int, _Built] = {}

    def keys(self, build: Node, stage: Stage, edge: str) -> Rel:
        """Right side ``build``'s rows read by ``stage`` over broadcast edge ``edge``."""
        built = self._stage_of(build)
        spec = ExchangeSpec(Partitioner(PartitionerKind.BROADCAST), edge)
        return self._renamed(build, built, stage.read(built.stream, spec, built.columns))

    def read(self, node: Node, stage: Stage) -> Rel | None:
        """``node``'s rows read by its join's stage over ``build_<join id>``, if ``node``
        is a right side computed first and the join's keys are among its columns
        (hashed on them, each task gets the rows it got of the aggregate); else None."""
        built = self._built.get(id(node))
        join = self.joins.get(id(node))
        if built is None or join is None:
            return None
        outputs = self._outputs(node, built)
        by_id = {c.id: built.columns[i] for i, c in enumerate(outputs)}
        refs: list[str] = []
        for key in join.exprs("rightKeys"):
            column = by_id.get(key.expr_id)
            if key.cls != "AttributeReference" or column is None or column.type.opaque:
                return None
            refs.append(column.ref)
        shown = self.tr.plan.shown_id(join.op_id or -1)
        edge = f"build_{shown}"
        spec = ExchangeSpec(Partitioner(PartitionerKind.HASH, tuple(refs)), edge)
        self.tr.info.edges[edge] = (
            f"the rows of {self.tr.describe(node)}, which {self.tr.describe(join)} "
            "semi-joins, computed before its stage (their keys cut its other side)"
        )
        return self._renamed(node, built, stage.read(built.stream, spec, built.columns))

    def _stage_of(self, build: Node) -> _Built:
        found = self._built.get(id(build))
        if found is not None:
            return found
        for other in {id(b): b for b in self._built.values()}.values():
            if _same_result(self.tr, other.node, build):
                self._built[id(build)] = other
                return other
        stage = Stage(self.tr.job)
        rel = self.tr.rel(build, stage)
        name = f"stage_{build.op_id}"
        stream = self.tr.finish(stage, rel, build, name, final=False)
        found = self._built[id(build)] = _Built(build, stream, rel.columns)
        return found

    def _outputs(self, node: Node, built: _Built) -> list[Column]:
        """``node``'s columns, position by position those of ``built``'s stage."""
        return built.columns if built.node is node else self.tr.jvm_output(node)

    def _renamed(self, node: Node, built: _Built, rel: Rel) -> Rel:
        """``rel`` (the stage's rows) with ``node``'s column names, where ``node`` is a
        right side of the same result as the one the stage computes."""
        if built.node is node:
            return rel
        outputs = self._outputs(node, built)
        items = ", ".join(f"{a.ref} AS {b.ref}" for a, b in zip(rel.columns, outputs, strict=True))
        return Rel(f"SELECT {items} FROM ({rel.sql}) AS t", outputs, streams=rel.streams)


def _same_result(tr: Translator, a: Node, b: Node) -> bool:
    """Whether Spark computes ``a`` and ``b`` alike (a reused exchange below one counts
    as the exchange it reuses), and their outputs line up."""
    from hybrid_shuffle.sparkplan.physical import jvm_node

    try:
        same = bool(jvm_node(tr.plan, a).sameResult(jvm_node(tr.plan, b)))
        return same and len(tr.jvm_output(a)) == len(tr.jvm_output(b))
    except Exception:  # no JVM node (a plan read from JSON), or another Spark's API
        return False
