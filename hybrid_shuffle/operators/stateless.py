"""Row-local operators: each batch in gives at most one batch out, no state."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from hybrid_shuffle.errors import PlanError
from hybrid_shuffle.operators.base import Operator
from hybrid_shuffle.operators.columns import require_columns

__all__ = ["Filter", "Identity", "MapBatches", "Select"]


class MapBatches(Operator):
    """``fn(table) -> table`` (or a pandas DataFrame) on every batch."""

    def __init__(self, fn: Callable[[pa.Table], Any], name: str) -> None:
        self.fn = fn
        self.name = name

    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        out = self.fn(table)
        if isinstance(out, pd.DataFrame):
            out = pa.Table.from_pandas(out, preserve_index=False)
        elif isinstance(out, pa.RecordBatch):
            out = pa.Table.from_batches([out])
        if not isinstance(out, pa.Table):
            raise PlanError(
                f"map_batches '{self.name}': the function returned a {type(out).__name__}; "
                "return a pyarrow.Table or a pandas.DataFrame"
            )
        return (out,)


class Filter(Operator):
    """Keep the rows where a ``pyarrow.compute`` expression or a mask function is true."""

    def __init__(self, predicate: pc.Expression | Callable[[pa.Table], Any], name: str) -> None:
        self.predicate = predicate
        self.name = name

    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        if isinstance(self.predicate, pc.Expression):
            try:
                return (table.filter(self.predicate),)
            except (pa.ArrowInvalid, KeyError) as e:
                raise PlanError(
                    f"filter '{self.name}': {e}; columns are: {', '.join(table.column_names)}"
                ) from e
        mask = self.predicate(table)
        if isinstance(mask, np.ndarray):
            mask = pa.array(mask, type=pa.bool_())
        return (table.filter(mask),)


class Select(Operator):
    def __init__(self, columns: Sequence[str], name: str) -> None:
        if not columns:
            raise PlanError(f"select '{name}': name at least one column")
        self.columns = list(columns)
        self.name = name

    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        require_columns(table.schema, self.columns, f"select '{self.name}'")
        return (table.select(self.columns),)

    def output_schema(self, input_schemas: Sequence[pa.Schema | None]) -> pa.Schema | None:
        schema = input_schemas[0]
        if schema is None:
            return None
        require_columns(schema, self.columns, f"select '{self.name}'")
        return pa.schema([schema.field(c) for c in self.columns])


class Identity(Operator):
    """Pass-through: the consumer of union, rebalance and broadcast exchanges."""

    def __init__(self, name: str, num_inputs: int = 1) -> None:
        self.name = name
        self.num_inputs = num_inputs

    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        return (table,)

    def output_schema(self, input_schemas: Sequence[pa.Schema | None]) -> pa.Schema | None:
        known = [s for s in input_schemas if s is not None]
        for schema in known[1:]:
            if not schema.equals(known[0]):
                raise PlanError(
                    f"union '{self.name}': inputs have different schemas ({known[0]} vs "
                    f"{schema}); select and cast them to the same columns first"
                )
        return known[0] if len(known) == len(input_schemas) and known else None
