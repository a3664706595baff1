"""Hash aggregate and top_n on DuckDB: one streamed GROUP BY (or window) per task.

``DuckAggregate`` is the twin of ``HashAggregate`` for both its reductions:

- ``Aggregation`` (sum, count, min, max, mean): the query reduces rows (phase
  ``complete``) or partials (``final``, ``merge``) to one row of fully
  combined partials per key, in the partial columns and types the Arrow
  kernel uses (``Aggregation.partial_columns``), and ``Aggregation.results``
  turns each output batch into the user's columns.  So ``mean`` is the float64
  sum over the count exactly as on Arrow, a decimal sum has Spark's type and
  overflowing it is the same ``PlanError``, an integer sum wraps in int64 (uint64)
  as pyarrow's does (DuckDB sums in int128; ``_wrapped``), a float ``max`` skips
  NaN unless a key has nothing else (pyarrow's rule; DuckDB's NaN is above every
  number), and a combiner's partials from either kernel merge alike.
- ``TopN``: ``row_number()`` over each key's rows in ``TopN``'s total order
  (``by``, then every other column ascending, nulls last), keeping the first
  ``n``; a key's rows come out together, best first (float columns are ordered by
  ``sort_key``, which keeps their ``-0.0`` values).

DuckDB spills the hash table (or the window's partitions) to the task's temp
directory within ``memory_limit`` (the Arrow operator aggregates in memory).
Float keys (and a descending float ``by``) fall back to the
Arrow operator (``twin``'s module docstring says why).
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

from hybrid_shuffle.operators.aggregate import HashAggregate
from hybrid_shuffle.operators.aggregation import Aggregation, spark_sum_types
from hybrid_shuffle.operators.duck.twin import DuckTwin, conform, quote, sort_key
from hybrid_shuffle.operators.top_n import TopN

__all__ = ["DuckAggregate"]

#: partial -> (its SQL on raw rows, its SQL merging partials); ``{c}`` is the column
_ON_ROWS = {
    "sum": "sum({c})",
    "count": "count({c})",
    "min": "min({c})",
    "max": "max({c})",
    "fsum": "sum(CAST({c} AS DOUBLE))",
}
_MERGING = {"sum": "sum({c})", "count": "sum({c})", "min": "min({c})", "max": "max({c})"}
_MERGING["fsum"] = _MERGING["sum"]
_ROW_NUMBER = "__hs_row"
_TWO_64 = 1 << 64


def _wrapped(expression: str, kind: pa.DataType) -> str:
    """An integer sum (DuckDB's int128) wrapped into pyarrow's sum type for a column of
    ``kind``: int64 for a signed column, uint64 for an unsigned one, modulo 2^64 as
    pyarrow's own ``sum`` wraps; any other expression as it is."""
    if pa.types.is_signed_integer(kind):
        low = 1 << 63
        wrapped = f"(({expression}) % {_TWO_64} + {_TWO_64 + low}) % {_TWO_64} - {low}"
        return f"CAST({wrapped} AS BIGINT)"
    if pa.types.is_unsigned_integer(kind):
        return f"CAST((({expression}) % {_TWO_64} + {_TWO_64}) % {_TWO_64} AS UBIGINT)"
    return expression


def _floating(schema: pa.Schema, names: Iterable[str]) -> bool:
    return any(pa.types.is_floating(schema.field(n).type) for n in names)


class DuckAggregate(DuckTwin):
    """``HashAggregate`` (any phase, ``Aggregation`` or ``TopN``) on DuckDB."""

    original: HashAggregate

    def __init__(self, original: HashAggregate) -> None:
        super().__init__(original)

    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        if self._fallback is not None:
            return self._fallback.process(table, input_index)
        if self._query is None and not self._start(table.schema):
            return self.fall_back().process(table, input_index)
        assert self._query is not None
        return [self._convert(t) for t in self._query.push(table)]

    def end_input(self, input_index: int) -> Iterable[pa.Table]:
        if self._fallback is not None:
            return self._fallback.end_input(input_index)
        return ()

    def finish(self) -> Iterable[pa.Table]:
        if self._fallback is not None:
            return self._fallback.finish()
        if self._query is None:  # no batch at all: the original knows what that gives
            return self.fall_back().finish()
        empty = self._convert(self._target.empty_table())
        return self.streamed((self._convert(t) for t in self._query.finish()), empty)

    # -- the query ------------------------------------------------------------------------

    def _start(self, schema: pa.Schema) -> bool:
        """Start the query for input ``schema``; False if the Arrow kernel must run it."""
        reduction = self.original.reduction
        keys = reduction.keys
        if _floating(schema, keys):
            return False
        if self.original.phase == "complete":
            reduction.check(schema)
        elif self.original.phase == "merge":
            reduction.check_partials(schema)
        if isinstance(reduction, Aggregation):
            query, self._target = self._aggregation(reduction, schema)
        elif isinstance(reduction, TopN):
            if not reduction.ascending and _floating(schema, reduction.by):
                return False
            query, self._target = self._top_n(reduction, schema), schema
        else:  # a reduction DuckDB has no SQL for
            return False
        self.stream(query, schema)
        return True

    def _aggregation(self, agg: Aggregation, schema: pa.Schema) -> tuple[str, pa.Schema]:
        """The GROUP BY giving combined partials, and the partials' schema."""
        on_rows = self.original.phase == "complete"
        sql = _ON_ROWS if on_rows else _MERGING
        columns = [quote(k) for k in agg.keys]
        for column, partial in agg.partials:
            read = column if on_rows else f"{column}_{partial}"
            source = quote(read)
            if on_rows and partial == "fsum" and pa.types.is_decimal(schema.field(column).type):
                expression = f"sum({source})"  # exact; divided in float64 by ``results``
            else:
                expression = sql[partial].format(c=source)
            kind = schema.field(read).type
            if partial == "sum":
                expression = _wrapped(expression, kind)
            elif partial == "max" and pa.types.is_floating(kind):
                # pyarrow's max skips NaN unless a group has nothing else; DuckDB's NaN
                # is above every number (its min already skips it so)
                expression = (
                    f"coalesce(max({source}) FILTER (WHERE NOT isnan({source})), max({source}))"
                )
            columns.append(f"{expression} AS {quote(f'{column}_{partial}')}")
        keys = ", ".join(quote(k) for k in agg.keys)
        query = f"SELECT {', '.join(columns)} FROM input GROUP BY {keys}"
        if on_rows:
            target = agg.partial_schema(schema)
            types = spark_sum_types(schema, agg.partials)
            target = pa.schema([f.with_type(types.get(f.name, f.type)) for f in target])
        else:
            names = [*agg.keys, *(f"{c}_{p}" for c, p in agg.partials)]
            target = pa.schema([schema.field(n) for n in names])
        return query, target

    def _top_n(self, top: TopN, schema: pa.Schema) -> str:
        direction = "ASC" if top.ascending else "DESC"
        order = [f"{sort_key(b, schema)} {direction} NULLS LAST" for b in top.by]
        ties = [n for n in schema.names if n not in top.keys and n not in top.by]
        order += [f"{sort_key(t, schema)} ASC NULLS LAST" for t in ties]
        partition = ", ".join(quote(k) for k in top.keys)
        columns = ", ".join(quote(n) for n in schema.names)
        ranked = (
            f"SELECT *, row_number() OVER (PARTITION BY {partition} ORDER BY "
            f"{', '.join(order)}) AS {_ROW_NUMBER} FROM input"
        )
        keys = ", ".join(f"{quote(k)} NULLS LAST" for k in top.keys)
        return (
            f"SELECT {columns} FROM ({ranked}) WHERE {_ROW_NUMBER} <= {int(top.n)} "
            f"ORDER BY {keys}, {_ROW_NUMBER}"
        )

    def _convert(self, table: pa.Table) -> pa.Table:
        conformed = conform(table, self._target, f"aggregate {self.what}")
        return self.original.reduction.results(conformed)
