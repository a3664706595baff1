"""Hash aggregation, memory-bounded by partial aggregation per batch.

Each batch is reduced to one row per key right away (``Table.group_by``); the
partials are re-reduced whenever they pile up, and ``finish`` combines them.
``mean`` travels as a partial sum and count.  Results equal one
``group_by().aggregate()`` over the whole input (null keys form a group, sums
of all-null groups are null, ``count`` counts non-null values).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from hybrid_shuffle.errors import PlanError
from hybrid_shuffle.operators.base import Operator

__all__ = ["AGGREGATIONS", "HashAggregate"]

AGGREGATIONS = ("sum", "count", "min", "max", "mean")
_COMPACT_EVERY = 16  # partial tables kept before they are re-reduced
# partial column -> how partials of it combine
_COMBINE = {"sum": "sum", "count": "sum", "min": "min", "max": "max"}


class HashAggregate(Operator):
    output_on_eof = True

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
        # the partial aggregates every output needs (mean = sum + count)
        partials: list[tuple[str, str]] = []
        for column, fn in self.outputs:
            for p in ("sum", "count") if fn == "mean" else (fn,):
                if (column, p) not in partials:
                    partials.append((column, p))
        self.partials = partials

    def open(self) -> None:
        self._parts: list[pa.Table] = []
        self._schema: pa.Schema | None = None

    def _check(self, schema: pa.Schema) -> None:
        for column in [*self.keys, *(c for c, _ in self.outputs)]:
            if column not in schema.names:
                raise PlanError(
                    f"aggregate '{self.name}': column '{column}' not in input; columns are: "
                    f"{', '.join(schema.names)}"
                )
        for column, fn in self.outputs:
            t = schema.field(column).type
            numeric = pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
            if fn in ("sum", "mean") and not numeric:
                raise PlanError(
                    f"aggregate '{self.name}': cannot {fn} column '{column}' of type {t}; "
                    "cast it to a number first"
                )

    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        if self._schema is None:
            self._check(table.schema)
            self._schema = table.schema
        if table.num_rows:
            self._parts.append(self._partial(table))
            if len(self._parts) >= _COMPACT_EVERY:
                self._parts = [self._combine(pa.concat_tables(self._parts))]
        return ()

    def _partial(self, table: pa.Table) -> pa.Table:
        return table.group_by(self.keys, use_threads=False).aggregate(
            [(c, fn) for c, fn in self.partials]
        )

    def _combine(self, partials: pa.Table) -> pa.Table:
        out = partials.group_by(self.keys, use_threads=False).aggregate(
            [(f"{c}_{p}", _COMBINE[p]) for c, p in self.partials]
        )
        return out.rename_columns([*self.keys, *(f"{c}_{p}" for c, p in self.partials)])

    def finish(self) -> Iterable[pa.Table]:
        if self._schema is None:
            return ()
        if self._parts:
            combined = self._combine(pa.concat_tables(self._parts))
        else:
            combined = self._combine(self._partial(self._schema.empty_table()))
        self._parts = []
        columns = {k: combined.column(k) for k in self.keys}
        for column, fn in self.outputs:
            if fn == "mean":
                total = pc.cast(combined.column(f"{column}_sum"), pa.float64())
                count = combined.column(f"{column}_count")
                nonzero = pc.if_else(pc.equal(count, 0), pa.scalar(None, pa.int64()), count)
                columns[f"{column}_mean"] = pc.divide(total, pc.cast(nonzero, pa.float64()))
            else:
                columns[f"{column}_{fn}"] = combined.column(f"{column}_{fn}")
        return (pa.table(columns),)

    def output_schema(self, input_schemas: Sequence[pa.Schema | None]) -> pa.Schema | None:
        schema = input_schemas[0]
        if schema is None:
            return None
        self._check(schema)
        self.open()
        try:
            self.process(schema.empty_table())
            return next(iter(self.finish())).schema
        finally:
            self.open()
