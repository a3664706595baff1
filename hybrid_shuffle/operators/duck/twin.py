"""The DuckDB twin of an Arrow operator: plans like it, runs its work as SQL.

The planner only ever sees the operators a ``Stream`` built (``HashAggregate``,
``SortPartition``, ...); on ``operators.kernel: duckdb`` the task swaps each
for its twin (``Operator.on_kernel``) before it opens the chain.  A twin
answers every planning question as its original does and computes the same
rows: its DuckDB result is cast to the original's output types (``conform``),
so a later batch, an exchange or ``to_spark`` cannot tell the kernels apart.

Where DuckDB's semantics differ from pyarrow's on a given input (float keys:
DuckDB groups ``0.0`` with ``-0.0`` and sorts NaN above every number in both
directions), the twin hands that task's input to its original instead
(``fall_back``), decided on the first batch, when the schema is known.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from hybrid_shuffle.errors import PlanError
from hybrid_shuffle.operators.base import Columns, Operator
from hybrid_shuffle.operators.context import OperatorContext
from hybrid_shuffle.operators.duck.streamed_query import StreamedQuery, close_query

__all__ = ["DuckTwin", "conform", "quote", "sort_key"]


def quote(name: str) -> str:
    """``name`` as a DuckDB identifier (any character, quotes doubled)."""
    return '"' + name.replace('"', '""') + '"'


def sort_key(name: str, schema: pa.Schema) -> str:
    """Column ``name`` as an ORDER BY expression that leaves the column's values as they
    are: DuckDB writes a float column it sorts on back from its normalized sort key,
    so ``-0.0`` came out as ``0.0``; ordering by ``column + 0.0`` (the same order:
    the zeros tie, NaN stays above every number) keeps the column itself a payload."""
    if pa.types.is_floating(schema.field(name).type):
        return f"({quote(name)} + 0.0)"
    return quote(name)


def conform(table: pa.Table, schema: pa.Schema, what: str) -> pa.Table:
    """``table`` (DuckDB's output) with ``schema``'s column types; a value that does not
    fit its type (a decimal sum past its precision) is a ``PlanError`` naming it."""
    if table.schema.types == schema.types:
        return table if table.schema.names == schema.names else table.rename_columns(schema.names)
    columns = []
    for column, field in zip(table.columns, schema, strict=True):
        if column.type == field.type:
            columns.append(column)
            continue
        try:
            columns.append(pc.cast(column, field.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise PlanError(
                f"{what}: column '{field.name}' does not fit {field.type} ({e}); cast the "
                "input column to a wider type first"
            ) from e
    return pa.Table.from_arrays(columns, schema=schema)


class DuckTwin(Operator):
    """Base of the twins: delegates planning to ``original``, owns the cursor and the
    streamed query, records DuckDB's peaks in the operator's metrics."""

    def __init__(self, original: Operator) -> None:
        self.original = original
        self.name = original.name
        self.num_inputs = original.num_inputs
        self.output_on_eof = original.output_on_eof
        self.operator_kind = original.operator_kind
        self.uses_memory = original.uses_memory
        self.needs_context = original.needs_context

    # -- planning: the original's answers ------------------------------------------------

    def describe(self) -> str:
        return self.original.describe()

    def output_schema(self, input_schemas: Sequence[pa.Schema | None]) -> pa.Schema | None:
        return self.original.output_schema(input_schemas)

    def input_columns(self, wanted: Columns) -> list[Columns]:
        return self.original.input_columns(wanted)

    def partition_keys(self, keys: tuple[str, ...]) -> tuple[str, ...] | None:
        return self.original.partition_keys(keys)

    # -- running --------------------------------------------------------------------------

    @property
    def what(self) -> str:
        return f"{self.original.name!r}"

    def open(self, context: OperatorContext | None = None) -> None:
        self.context = context if context is not None else OperatorContext.unbounded()
        self._cursor: duckdb.DuckDBPyConnection | None = None
        self._query: StreamedQuery | None = None
        self._fallback: Operator | None = None

    @property
    def cursor(self) -> duckdb.DuckDBPyConnection:
        if self._cursor is None:
            self._cursor = self.context.database.cursor()
        return self._cursor

    def fall_back(self) -> Operator:
        """Run the rest of this task on the original (see the module docstring)."""
        self.original.open(self.context)
        self._fallback = self.original
        return self.original

    def stream(self, query: str, schema: pa.Schema) -> StreamedQuery:
        """Start ``query`` over the input (named ``input``), whose schema is ``schema``."""
        self._query = StreamedQuery(
            self.cursor, query, schema, self.what, self.context.wait_timeout
        )
        return self._query

    def record(self) -> None:
        """Count the finished query's peaks in the operator's metrics."""
        if self._cursor is None:
            return
        self.context.hold(self.context.record_query(self._cursor, self._query))

    def streamed(
        self, convert: Iterable[pa.Table], empty: pa.Table | None = None
    ) -> Iterator[pa.Table]:
        """``convert``'s tables, then the query's peaks recorded.  If the query gave no
        rows, ``empty`` (when given) comes out instead: the original emits one empty
        table then, so the schema still travels downstream."""
        given = False
        for table in convert:
            given = True
            yield table
        if not given and empty is not None:
            yield empty
        self.record()

    def close(self) -> None:
        if self._fallback is not None:
            self._fallback.close()
        close_query(self._query, self._cursor)
        self._query, self._cursor = None, None
