"""A stage: the operators between Spark's exchanges, run as one DuckDB query per task.

Comet fuses the consecutive operators it supports into one native block; here a
stage's operators become one SQL query (``SqlQuery`` with one input per edge the
stage reads), so DuckDB runs the whole chain as one pipeline.  Inputs are read
through placeholder tables while the query is built and given their names
(``input``, ``input1``..) when the stage is finished: the stage's main input
(a scan or a shuffle) first, its broadcast inputs after, so a broadcast build
side is chained into the task of the side it joins (``join(strategy=
"broadcast")``'s rule).  Of two main inputs (a shuffled hash join's sides), the one
whose rows stream through the query (``Rel.streams``: the probe side) is first,
which is the input ``SqlQuery`` streams once the others ended.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hybrid_shuffle.empty_column import EMPTY_SELECT
from hybrid_shuffle.operators.sql import SqlQuery, input_name
from hybrid_shuffle.plan.logical import ExchangeSpec
from hybrid_shuffle.shuffle.routing import PartitionerKind
from hybrid_shuffle.sparkplan.relation import Column, Rel, engine_names

if TYPE_CHECKING:
    from hybrid_shuffle.api.job import Job
    from hybrid_shuffle.api.stream import Stream

__all__ = ["Stage"]


@dataclass
class _Input:
    stream: Stream
    spec: ExchangeSpec | None
    token: str
    #: the names of the other edges of the same rows this input stands for (a
    #: ``ReusedExchange`` of an exchange the stage reads too)
    aliases: list[str] = field(default_factory=list)

    @property
    def side(self) -> bool:
        return self.spec is not None and self.spec.partitioner.kind is PartitionerKind.BROADCAST


class Stage:
    """The inputs one stage reads, gathered while its operators are translated."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.inputs: list[_Input] = []
        #: DuckDB variables the query reads (``SqlQuery.variables``): name -> a scalar
        #: expression over the inputs' tokens
        self.variables: dict[str, str] = {}

    def read(self, stream: Stream, spec: ExchangeSpec | None, columns: list[Column]) -> Rel:
        """A relation over ``stream`` (its columns already named ``c<id>``) read through
        ``spec``; reading the same rows again reuses the input: the same stream over the
        same edge, or over another edge partitioned the same way (Spark's
        ``ReusedExchange`` of an exchange this stage reads too, as in TPC-H Q18, where
        both sides of a join are semi-joined with one aggregate).  The producer then
        writes its rows once and the stage fetches and stages them once; its query
        scans them twice."""
        for existing in self.inputs:
            if existing.stream.node is stream.node and _same_rows(existing.spec, spec):
                edge = spec.edge if spec is not None else None
                kept = existing.spec.edge if existing.spec is not None else None
                if edge and edge != kept and edge not in existing.aliases:
                    existing.aliases.append(edge)
                token = existing.token
                return Rel(f"SELECT {_list(columns)} FROM {token}", columns, streams=token)
        token = f"__hs_input_{len(self.inputs)}__"
        self.inputs.append(_Input(stream, spec, token))
        return Rel(f"SELECT {_list(columns)} FROM {token}", columns, streams=token)

    def read_named(self, stream: Stream, names: list[str], columns: list[Column]) -> Rel:
        """A relation over a source whose columns have their own names (a Parquet scan,
        a Spark DataFrame): ``names[i]`` becomes ``columns[i]``.

        A struct column is cast to the type Spark gave it, which matches its fields by
        name: Spark prunes a struct to the fields the query reads (``p.b`` of a
        ``p struct<a, b>`` reads ``p struct<b>``, and ``GetStructField`` then reads
        position 0), where the file holds them all."""
        from hybrid_shuffle.sparkplan.expressions import quote

        token = f"__hs_input_{len(self.inputs)}__"
        self.inputs.append(_Input(stream, None, token))
        items = ", ".join(
            f"{_as_declared(quote(n), c)} AS {c.ref}" for n, c in zip(names, columns, strict=True)
        )
        return Rel(f"SELECT {items or _list([])} FROM {token}", columns, streams=token)

    def finish(self, rel: Rel, name: str, final: bool) -> Stream:
        """The stage as a node of the job: ``rel``'s query over the inputs read."""
        from hybrid_shuffle.api.stream import Stream

        # the input whose rows stream through the query first (``SqlQuery`` streams input
        # 0), then the other main inputs, then the broadcast ones
        first = [i for i in self.inputs if i.token == rel.streams and not i.side]
        rest = [i for i in self.inputs if i.token != rel.streams]
        order = first + [i for i in rest if not i.side] + [i for i in rest if i.side]
        # the last stage: unique names, Spark's own (duplicates too) applied at the end
        spark_names = [c.name for c in rel.columns]
        query = rel.renamed(engine_names(spark_names)) if final else rel.sql
        if not order:
            raise AssertionError(f"stage {name} reads no input")
        # a variable is kept if the query still reads it (not cut away with what read it)
        # and its expression reads none of the inputs the stage dropped
        named = {v: _named(e, order) for v, e in self.variables.items()}
        variables = {
            v: e
            for v, e in named.items()
            if f"getvariable('{v}')" in query and "__hs_input_" not in e
        }
        query = _named(query, order)
        operator = SqlQuery(
            query, name, inputs=len(order), streams=bool(first), variables=variables
        )
        node = self.job._node("spark", name, operator, [(i.stream.node, i.spec) for i in order])
        stream = Stream(self.job, node)
        if final:
            stream.spark_names = spark_names
        return stream


def _named(sql: str, order: list[_Input]) -> str:
    """``sql`` with each input's token replaced by its name in the query (``input``,
    ``input1``..: its place in ``order``)."""
    for index, item in enumerate(order):
        sql = sql.replace(item.token, input_name(index))
    return sql


def _same_rows(a: ExchangeSpec | None, b: ExchangeSpec | None) -> bool:
    """Whether two reads of one stream give each task the same rows: both forward, or
    exchanges alike in all but their names and what consumes them (``facts``)."""
    if a is None or b is None:
        return a is b
    return (
        a.partitioner == b.partitioner
        and a.partitions == b.partitions
        and a.mode == b.mode
        and a.combiner is b.combiner
        and a.keep == b.keep
    )


def _list(columns: list[Column]) -> str:
    return ", ".join(c.ref for c in columns) or EMPTY_SELECT


def _as_declared(column: str, declared: Column) -> str:
    """``column`` (SQL) of a source, as the type Spark declared (``read_named``)."""
    if declared.type.fields is None:
        return column
    return f"CAST({column} AS {declared.type.duck})"
