"""Sort of one partition (the range exchange in front of it makes the sort global),
as the planner sees it.

A task runs it on DuckDB (``duck/sort.py``, swapped in by
``duck.operators.on_duckdb``), which sorts within the task's ``memory_limit``
and spills, in pyarrow's order: nulls last in both directions, NaN just before
them.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from hybrid_shuffle.operators.base import Columns, PlannedOperator
from hybrid_shuffle.operators.columns import require_key_columns

__all__ = ["SortPartition"]


class SortPartition(PlannedOperator):
    """Emits its input sorted by ``by``; nulls last in both directions."""

    operator_kind = "sort"
    output_on_eof = True
    uses_memory = True

    def __init__(self, by: Sequence[str], descending: bool, name: str) -> None:
        self.by = list(by)
        self.descending = descending
        self.name = name

    def output_schema(self, input_schemas: Sequence[pa.Schema | None]) -> pa.Schema | None:
        schema = input_schemas[0]
        if schema is not None:
            require_key_columns(schema, self.by, f"sort '{self.name}'")
        return schema

    def input_columns(self, wanted: Columns) -> list[Columns]:
        return [None if wanted is None else wanted | frozenset(self.by)]
