"""Sort of one partition on DuckDB: one streamed ``ORDER BY`` per task.

Runs ``SortPartition`` (``lowering.sort_query``): DuckDB's sort runs within the task's
``memory_limit`` and spills sorted runs to the task's temp directory.  The order is
pyarrow's (``lowering.sort_key``): nulls last in both directions, NaN just before
them, a float key sorted on as an expression so that its ``-0.0`` values come out
as they went in.  Each batch is staged encoded (``encoding.Encoding``), so types
and names DuckDB would not give back come back as they were.  An input with no
batch at all gives nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

from hybrid_shuffle.operators.columns import require_key_columns
from hybrid_shuffle.operators.duck.base import DuckOperator
from hybrid_shuffle.operators.duck.encoding import Encoding
from hybrid_shuffle.operators.duck.lowering import conform, sort_query
from hybrid_shuffle.operators.sort import SortPartition

__all__ = ["DuckSort"]


class DuckSort(DuckOperator):
    """``SortPartition`` on DuckDB."""

    original: SortPartition

    def __init__(self, original: SortPartition) -> None:
        super().__init__(original)

    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        if self._query is None:
            schema = table.schema
            require_key_columns(schema, self.original.by, f"sort {self.what}")
            by, descending = self.original.by, self.original.descending
            self._schema = schema
            self._encoding = Encoding(schema)
            query = sort_query(by, descending, schema, self._encoding.names)
            self.stream(query, self._encoding.staged)
        assert self._query is not None
        return [self._conform(t) for t in self._query.push(self._encoding.encode(table))]

    def finish(self) -> Iterable[pa.Table]:
        if self._query is None:  # no batch at all: no schema, no row
            return ()
        return self.streamed(
            (self._conform(t) for t in self._query.finish()), self._schema.empty_table()
        )

    def _conform(self, table: pa.Table) -> pa.Table:
        return conform(table, self._schema, f"sort {self.what}")
