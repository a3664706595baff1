"""Sort of one partition (the range exchange in front of it makes the sort global).

A task runs it on DuckDB (``duck/sort.py``, swapped in by
``duck.operators.on_duckdb``), which sorts within the task's ``memory_limit``
and spills; this operator plans it, and sorts in memory with pyarrow
(``sorter.Sorter``) only the inputs the DuckDB sort hands back to it.
``finish`` yields the sorted rows in batches of bounded size; nulls are last in
both directions.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa

from hybrid_shuffle.operators.base import Columns, Operator
from hybrid_shuffle.operators.columns import require_key_columns
from hybrid_shuffle.operators.context import OperatorContext
from hybrid_shuffle.operators.sorter import Sorter

__all__ = ["SortPartition"]


class SortPartition(Operator):
    """Collects its input and emits it sorted by ``by``; nulls last in both directions."""

    operator_kind = "sort"
    output_on_eof = True
    uses_memory = True

    def __init__(self, by: Sequence[str], descending: bool, name: str) -> None:
        self.by = list(by)
        self.descending = descending
        self.name = name

    def open(self, context: OperatorContext | None = None) -> None:
        context = context or OperatorContext.unbounded()
        order = "descending" if self.descending else "ascending"
        keys = [(c, order) for c in self.by]
        self._sorter = Sorter(keys, context)
        self._schema: pa.Schema | None = None

    def _check(self, schema: pa.Schema) -> None:
        require_key_columns(schema, self.by, f"sort '{self.name}'")

    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        if self._schema is None:
            self._check(table.schema)
            self._schema = table.schema
        self._sorter.add(table)
        return ()

    def finish(self) -> Iterable[pa.Table]:
        return self._sorted()

    def _sorted(self) -> Iterator[pa.Table]:
        if self._schema is None:
            return
        if self._sorter.rows == 0:  # the schema still travels downstream
            yield self._schema.empty_table()
            return
        yield from self._sorter.sorted_batches()

    def output_schema(self, input_schemas: Sequence[pa.Schema | None]) -> pa.Schema | None:
        schema = input_schemas[0]
        if schema is not None:
            self._check(schema)
        return schema

    def input_columns(self, wanted: Columns) -> list[Columns]:
        return [None if wanted is None else wanted | frozenset(self.by)]
