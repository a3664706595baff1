"""Sort of one partition (the range exchange in front of it makes the sort global)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pyarrow as pa

from hybrid_shuffle.operators.base import Columns, Operator
from hybrid_shuffle.operators.columns import require_key_columns
from hybrid_shuffle.operators.context import OperatorContext

__all__ = ["SortPartition"]


class SortPartition(Operator):
    """Collects its input and emits it sorted by ``by``; nulls last in both directions."""

    output_on_eof = True

    def __init__(self, by: Sequence[str], descending: bool, name: str) -> None:
        self.by = list(by)
        self.descending = descending
        self.name = name

    def open(self, context: OperatorContext | None = None) -> None:
        self._parts: list[pa.Table] = []
        self._schema: pa.Schema | None = None

    def _check(self, schema: pa.Schema) -> None:
        require_key_columns(schema, self.by, f"sort '{self.name}'")

    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        if self._schema is None:
            self._check(table.schema)
            self._schema = table.schema
        if table.num_rows:
            self._parts.append(table)
        return ()

    def finish(self) -> Iterable[pa.Table]:
        if self._schema is None:
            return ()
        table = pa.concat_tables(self._parts) if self._parts else self._schema.empty_table()
        self._parts = []
        order = "descending" if self.descending else "ascending"
        return (table.sort_by([(c, order, "at_end") for c in self.by]),)

    def output_schema(self, input_schemas: Sequence[pa.Schema | None]) -> pa.Schema | None:
        schema = input_schemas[0]
        if schema is not None:
            self._check(schema)
        return schema

    def input_columns(self, wanted: Columns) -> list[Columns]:
        return [None if wanted is None else wanted | frozenset(self.by)]
