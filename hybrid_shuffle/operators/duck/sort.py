"""Sort of one partition on DuckDB: one streamed ``ORDER BY`` per task.

Runs ``SortPartition`` (``lowering.sort_query``): DuckDB's sort runs within the task's
``memory_limit`` and spills sorted runs to the task's temp directory (the Arrow
operator sorts in memory).  Nulls are last in both
directions, as on Arrow; a float key is sorted on as an expression (``sort_key``),
so that its ``-0.0`` values come out as they went in.  A descending float key
falls back to the pyarrow operator (DuckDB puts NaN first there, pyarrow last), as
does an input with no batch at all.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

from hybrid_shuffle.operators.columns import require_key_columns
from hybrid_shuffle.operators.duck.base import DuckOperator
from hybrid_shuffle.operators.duck.lowering import conform, floating, sort_query
from hybrid_shuffle.operators.sort import SortPartition

__all__ = ["DuckSort"]


class DuckSort(DuckOperator):
    """``SortPartition`` on DuckDB."""

    original: SortPartition

    def __init__(self, original: SortPartition) -> None:
        super().__init__(original)

    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        if self._fallback is not None:
            return self._fallback.process(table, input_index)
        if self._query is None:
            schema = table.schema
            require_key_columns(schema, self.original.by, f"sort {self.what}")
            by, descending = self.original.by, self.original.descending
            if descending and floating(schema, by):
                return self.fall_back().process(table, input_index)
            self._schema = schema
            self.stream(sort_query(by, descending, schema), schema)
        assert self._query is not None
        return [self._conform(t) for t in self._query.push(table)]

    def finish(self) -> Iterable[pa.Table]:
        if self._fallback is not None:
            return self._fallback.finish()
        if self._query is None:
            return self.fall_back().finish()
        return self.streamed(
            (self._conform(t) for t in self._query.finish()), self._schema.empty_table()
        )

    def _conform(self, table: pa.Table) -> pa.Table:
        return conform(table, self._schema, f"sort {self.what}")
