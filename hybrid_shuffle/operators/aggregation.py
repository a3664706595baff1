"""The reduction of a hash aggregate: spec checks, partials, combining and results.

``Aggregation`` is what ``HashAggregate`` (which runs it as DuckDB SQL,
``duck/lowering.py``, or through ``dense`` when its input fits),
``PartialAggregate`` and ``LocalAggregate`` share: the functions
(``AGGREGATIONS``) per column, the partials they need, the reduction of rows to one
partial row per key (``Table.group_by``, or ``dense_aggregate`` on a small-range
integer key), the re-reduction of partials, and the user's columns from fully
combined ones.  ``mean`` travels as a partial
float64 sum and a count.  Results equal one ``group_by().aggregate()`` over the
whole input (null keys form a group, sums of all-null groups are null, ``count``
counts non-null values; float keys group by their bits, as pyarrow's do: ``0.0``
and ``-0.0`` apart, NaNs by payload).

``mean`` is computed as pyarrow's is: pyarrow adds every value, cast to float64,
into a float64 sum and divides by the count, so an integer column's mean never
overflows or fails, whatever its sum (its exact integer sum may pass 2^53, or
wrap in int64 as pyarrow's own ``sum`` does).  The partials here do the same
additions, grouped differently, so a mean agrees with pyarrow's up to float64
rounding (exactly, when the partial sums are exact).  Decimal means are the
exact decimal sum divided in float64.

The ``sum`` of a ``decimal(p, s)`` column is a ``decimal(min(p + 10, 38), s)``,
Spark's type for it (pyarrow's own ``sum`` widens to precision 38), so a
PySpark pipeline gets back the types plain PySpark gives.  The partials carry
that type from the first batch on; a sum that outgrows it is an error naming
the column (Spark with ANSI mode on fails the same way), never a wrong value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from hybrid_shuffle.errors import PlanError
from hybrid_shuffle.operators.columns import require_columns, require_key_columns
from hybrid_shuffle.operators.dense_aggregate import (
    dense_aggregate,
    dense_applies,
    working_row_bytes,
)

__all__ = ["AGGREGATIONS", "Aggregation", "spark_sum_types"]

#: the functions a spec may name for a column
AGGREGATIONS = ("sum", "count", "min", "max", "mean")
#: partial -> (the ``group_by`` function that makes it from rows, how partials of it combine);
#: ``fsum`` is the float64 sum ``mean`` divides (the values cast to float64, then added)
_PARTIALS = {
    "sum": ("sum", "sum"),
    "count": ("count", "sum"),
    "min": ("min", "min"),
    "max": ("max", "max"),
    "fsum": ("sum", "sum"),
}
#: suffix of the float64 copy of a column that ``fsum`` adds up (in no user's table)
_AS_FLOAT = "\x00float64"


class Aggregation:
    """One aggregate's spec, checked once, and the reductions both phases share.

    ``partial`` reduces raw rows to partials, ``combine`` reduces partials to fewer
    (associative, so batches may be grouped in any way and on either side of the
    exchange), ``results`` turns fully combined partials into the user's columns.
    Errors name the aggregate (``name``) and the column.
    """

    def __init__(
        self, keys: Sequence[str], spec: Mapping[str, str | Sequence[str]], name: str
    ) -> None:
        self.keys = list(keys)
        self.name = name
        self.outputs: list[tuple[str, str]] = []
        for column, fns in spec.items():
            for fn in [fns] if isinstance(fns, str) else list(fns):
                if fn not in AGGREGATIONS:
                    raise PlanError(
                        f"aggregate '{name}': '{fn}' is not an aggregation; use one of: "
                        f"{', '.join(AGGREGATIONS)}"
                    )
                self.outputs.append((column, fn))
        if not self.outputs:
            raise PlanError(f"aggregate '{name}': give at least one column and function")
        # the partial aggregates every output needs (mean = fsum / count)
        partials: list[tuple[str, str]] = []
        for column, fn in self.outputs:
            for p in ("fsum", "count") if fn == "mean" else (fn,):
                if (column, p) not in partials:
                    partials.append((column, p))
        self.partials = partials
        self._schemas: dict[pa.Schema, pa.Schema] = {}
        produced = {f"{c}_{f}" for c, f in [*self.outputs, *self.partials]}
        for key in self.keys:
            if key in produced:
                raise PlanError(
                    f"aggregate '{name}': key column '{key}' has the name of an aggregate "
                    "output; rename the key column first (select or map_batches)"
                )

    @property
    def columns(self) -> frozenset[str]:
        """The input columns it reads: the keys and the aggregated columns."""
        return frozenset([*self.keys, *(c for c, _ in self.outputs)])

    @property
    def partial_columns(self) -> frozenset[str]:
        """The columns of its partials: the keys and ``<column>_<partial>`` per partial
        (``<column>_fsum`` is the float64 sum a mean divides by ``<column>_count``)."""
        return frozenset([*self.keys, *(f"{c}_{p}" for c, p in self.partials)])

    def check_partials(self, schema: pa.Schema) -> None:
        """Raise a PlanError naming the column if ``schema`` lacks a partial this
        aggregate merges (it reads a local aggregate's output)."""
        require_key_columns(schema, self.keys, f"aggregate '{self.name}'")
        require_columns(schema, [f"{c}_{p}" for c, p in self.partials], f"aggregate '{self.name}'")

    def check(self, schema: pa.Schema) -> None:
        """Raise a PlanError naming the column if the logical input cannot be aggregated."""
        require_key_columns(schema, self.keys, f"aggregate '{self.name}'")
        require_columns(schema, [c for c, _ in self.outputs], f"aggregate '{self.name}'")
        for column, fn in self.outputs:
            t = schema.field(column).type
            numeric = pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
            if fn in ("sum", "mean") and not numeric:
                raise PlanError(
                    f"aggregate '{self.name}': cannot {fn} column '{column}' of type {t}; "
                    "cast it to a number first"
                )

    def partial(self, table: pa.Table) -> pa.Table:
        """Raw rows -> one row per key: the keys, then ``<column>_<partial>`` columns."""
        out = self._reduce(table, on_rows=True, group_by=True)
        assert out is not None
        return out

    def combine(self, partials: pa.Table) -> pa.Table:
        """Partials -> fewer partials, same columns and types (associative: any grouping of
        batches)."""
        out = self._reduce(partials, on_rows=False, group_by=True)
        assert out is not None
        return out

    def dense(self, table: pa.Table, on_rows: bool) -> pa.Table | None:
        """``partial`` of raw rows (``on_rows``) or ``combine`` of partials, if
        ``dense_aggregate`` gives it (one bincount per column over a small-range integer
        key, every row in one group per key), else None."""
        return self._reduce(table, on_rows, group_by=False)

    def may_be_dense(self, schema: pa.Schema, on_rows: bool) -> bool:
        """Whether ``dense`` may give the reduction of a table of ``schema``, as far as its
        types tell (``dense_aggregate.dense_applies``)."""
        if on_rows:
            prepared = self._with_floats(schema.empty_table()).schema
            return dense_applies(prepared, self.keys, self._from_rows())
        return dense_applies(schema, self.keys, self._merging())

    @property
    def dense_row_bytes(self) -> int:
        """What ``dense`` may take beside each row it reduces (``working_row_bytes``)."""
        return working_row_bytes(len(self.partials))

    def _reduce(self, table: pa.Table, on_rows: bool, group_by: bool) -> pa.Table | None:
        """Rows (``on_rows``) or partials reduced to one partial row per key: by
        ``dense_aggregate`` where it applies, else by ``group_by`` (or None without it)."""
        if on_rows:
            prepared, wanted = self._with_floats(table), self._from_rows()
            schema = self.partial_schema(table.schema)
            types = spark_sum_types(table.schema, self.partials)
        else:
            prepared, wanted = table, self._merging()
            schema = table.schema
            types = {f.name: f.type for f in table.schema}
        out = dense_aggregate(prepared, self.keys, wanted, schema)
        if out is None:
            if not group_by:
                return None
            out = self._group_by(prepared, wanted)
        return self._as_types(out, types)

    def _merging(self) -> list[tuple[str, str, str]]:
        """``(partial column, group_by function, partial name)`` per partial, on partials."""
        return [(f"{c}_{p}", _PARTIALS[p][1], f"{c}_{p}") for c, p in self.partials]

    def _as_types(self, table: pa.Table, types: Mapping[str, pa.DataType]) -> pa.Table:
        """``table`` with its decimal sums cast to ``types`` (see the module docstring)."""
        for name, wanted in types.items():
            index = table.schema.get_field_index(name)
            if (
                index < 0
                or not pa.types.is_decimal(wanted)
                or table.schema.field(index).type == wanted
            ):
                continue
            try:
                column = pc.cast(table.column(index), wanted)
            except pa.ArrowInvalid as e:
                raise PlanError(
                    f"aggregate '{self.name}': a sum in '{name}' does not fit {wanted}, the "
                    "type Spark gives it; cast the column to a wider decimal first"
                ) from e
            table = table.set_column(index, name, column)
        return table

    def _from_rows(self) -> list[tuple[str, str, str]]:
        """``(input column, group_by function, partial name)`` per partial, on raw rows."""
        return [
            (f"{c}{_AS_FLOAT}" if p == "fsum" else c, _PARTIALS[p][0], f"{c}_{p}")
            for c, p in self.partials
        ]

    def _with_floats(self, table: pa.Table) -> pa.Table:
        """``table`` with the float64 copy of every column a mean adds up (a decimal
        column as it is: its sum is exact and becomes float64 at the end)."""
        for column in dict.fromkeys(c for c, p in self.partials if p == "fsum"):
            values = table.column(column)
            if not pa.types.is_decimal(values.type):
                values = pc.cast(values, pa.float64(), safe=False)  # rounds, as pyarrow's mean
            table = table.append_column(f"{column}{_AS_FLOAT}", values)
        return table

    def _group_by(self, table: pa.Table, wanted: Sequence[tuple[str, str, str]]) -> pa.Table:
        out = table.group_by(self.keys, use_threads=False).aggregate(
            [(column, fn) for column, fn, _ in wanted]
        )
        return out.rename_columns([*self.keys, *(name for _, _, name in wanted)])

    def partial_schema(self, schema: pa.Schema) -> pa.Schema:
        """The schema ``group_by`` gives partials of this input (what the dense path must
        match, so that partials from either path concatenate)."""
        if schema not in self._schemas:
            empty = self._with_floats(schema.empty_table())
            self._schemas[schema] = self._group_by(empty, self._from_rows()).schema
        return self._schemas[schema]

    def results(self, combined: pa.Table) -> pa.Table:
        """The user's output columns from fully combined partials."""
        columns = {k: combined.column(k) for k in self.keys}
        for column, fn in self.outputs:
            if fn == "mean":
                total = pc.cast(combined.column(f"{column}_fsum"), pa.float64(), safe=False)
                count = combined.column(f"{column}_count")
                nonzero = pc.if_else(pc.equal(count, 0), pa.scalar(None, pa.int64()), count)
                columns[f"{column}_mean"] = pc.divide(total, pc.cast(nonzero, pa.float64()))
            else:
                columns[f"{column}_{fn}"] = combined.column(f"{column}_{fn}")
        return pa.table(columns)


def spark_sum_types(
    schema: pa.Schema, partials: Sequence[tuple[str, str]]
) -> dict[str, pa.DataType]:
    """Partial name -> the type Spark gives the sum of a decimal column."""
    out: dict[str, pa.DataType] = {}
    for column, p in partials:
        t = schema.field(column).type
        if p == "sum" and pa.types.is_decimal(t):
            out[f"{column}_sum"] = pa.decimal128(min(t.precision + 10, 38), t.scale)
    return out
