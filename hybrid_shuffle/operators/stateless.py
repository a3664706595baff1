"""Row-local operators: each batch in gives at most one batch out, no state."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hybrid_shuffle.errors import PlanError
from hybrid_shuffle.operators.base import Columns, Operator
from hybrid_shuffle.operators.columns import require_columns
from hybrid_shuffle.operators.context import OperatorContext

__all__ = ["Filter", "Identity", "MapBatches", "Rename", "Select"]


def as_table(out: Any, what: str, accepted: str) -> pa.Table:
    """A user function's result as a table: a pandas frame or record batch converted, any
    other type a ``PlanError`` naming ``what`` (``map_batches 'x'``) and the ``accepted``
    ones."""
    if _is_pandas_frame(out):
        out = pa.Table.from_pandas(out, preserve_index=False)
    elif isinstance(out, pa.RecordBatch):
        out = pa.Table.from_batches([out])
    if not isinstance(out, pa.Table):
        raise PlanError(f"{what}: the function returned a {type(out).__name__}; return {accepted}")
    return out


def _is_pandas_frame(out: Any) -> bool:
    """Whether ``out`` is a pandas DataFrame, without importing pandas for anything else:
    an executor that never meets a frame saves pandas' import (a third of a second of CPU
    per executor process, at every session's start).

    The class says whether pandas can be involved at all; only then is pandas imported,
    with an ``import`` statement, which waits while another of the executor's threads is
    still importing it (``sys.modules`` would hand out the half-imported module, which
    has no ``DataFrame`` yet)."""
    if not any(c.__module__.partition(".")[0] == "pandas" for c in type(out).__mro__):
        return False
    import pandas as pd

    return isinstance(out, pd.DataFrame)


class MapBatches(Operator):
    """``fn(table) -> table`` (or a pandas DataFrame) on every batch."""

    operator_kind = "udf"

    def __init__(self, fn: Callable[[pa.Table], Any], name: str) -> None:
        self.fn = fn
        self.name = name

    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        out = as_table(
            self.fn(table), f"map_batches '{self.name}'", "a pyarrow.Table or a pandas.DataFrame"
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

    def partition_keys(self, keys: tuple[str, ...]) -> tuple[str, ...] | None:
        return keys


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

    def input_columns(self, wanted: Columns) -> list[Columns]:
        return [frozenset(self.columns)]

    def partition_keys(self, keys: tuple[str, ...]) -> tuple[str, ...] | None:
        return keys if set(keys) <= set(self.columns) else None


class Rename(Operator):
    """Rename columns (``{old: new}``), as Spark's ``withColumnRenamed``; other columns
    pass unchanged.  Unlike a ``map_batches`` doing the same, column pruning sees
    through it."""

    def __init__(self, mapping: Mapping[str, str], name: str) -> None:
        if not mapping:
            raise PlanError(f"rename '{name}': give at least one {{old: new}} pair")
        targets = list(mapping.values())
        if len(set(targets)) != len(targets):
            raise PlanError(f"rename '{name}': two columns would get the same new name")
        self.mapping = dict(mapping)
        self.name = name

    def _renamed(self, names: Sequence[str]) -> list[str]:
        out = [self.mapping.get(n, n) for n in names]
        if len(set(out)) != len(out):
            clash = next(n for n in out if out.count(n) > 1)
            raise PlanError(
                f"rename '{self.name}': column '{clash}' would appear twice; rename or drop "
                "the column that already has that name"
            )
        return out

    def open(self, context: OperatorContext | None = None) -> None:
        self._checked: pa.Schema | None = None
        self._names: list[str] = []

    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        if self._checked is not table.schema:
            require_columns(table.schema, list(self.mapping), f"rename '{self.name}'")
            self._names = self._renamed(table.column_names)
            self._checked = table.schema
        return (table.rename_columns(self._names),)

    def output_schema(self, input_schemas: Sequence[pa.Schema | None]) -> pa.Schema | None:
        schema = input_schemas[0]
        if schema is None:
            return None
        require_columns(schema, list(self.mapping), f"rename '{self.name}'")
        names = self._renamed(schema.names)
        return pa.schema([f.with_name(n) for f, n in zip(schema, names, strict=True)])

    def input_columns(self, wanted: Columns) -> list[Columns]:
        if wanted is None:
            return [None]
        back = {new: old for old, new in self.mapping.items()}
        # every renamed column stays needed: a missing one is an error the user must see
        return [frozenset(back.get(c, c) for c in wanted) | frozenset(self.mapping)]

    def partition_keys(self, keys: tuple[str, ...]) -> tuple[str, ...] | None:
        return tuple(self.mapping.get(k, k) for k in keys)


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

    def input_columns(self, wanted: Columns) -> list[Columns]:
        return [wanted] * self.num_inputs

    def partition_keys(self, keys: tuple[str, ...]) -> tuple[str, ...] | None:
        return keys
