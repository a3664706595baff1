"""The base of the DuckDB operators: every aggregate, sort, top-n and join a task runs.

The planner only ever sees the operators a ``Stream`` built (``HashAggregate``,
``SortPartition``, ``HashJoin``, ``SortMergeJoin``): they answer every planning
question (schemas, columns, keys), hold the parameters and run nothing.  Before
it opens the chain a task swaps each for the DuckDB operator that runs it
(``operators.duck.operators.on_duckdb``), which plans as it does and runs its
work as the SQL ``lowering`` writes over its input staged by ``encoding``; its
DuckDB result is decoded and cast to the planned output types
(``lowering.conform``), so a later batch, an exchange or ``to_spark`` sees the
types pyarrow's answer has.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import duckdb
import pyarrow as pa

from hybrid_shuffle.operators.base import Columns, Operator
from hybrid_shuffle.operators.context import OperatorContext
from hybrid_shuffle.operators.duck.streamed_query import StreamedQuery, close_query

__all__ = ["DuckOperator"]


class DuckOperator(Operator):
    """Base of the DuckDB operators: plans as ``original`` (the operator the ``Stream``
    built), owns the cursor and the streamed query, records DuckDB's peaks in the
    operator's metrics."""

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

    @property
    def cursor(self) -> duckdb.DuckDBPyConnection:
        if self._cursor is None:
            self._cursor = self.context.database.cursor()
        return self._cursor

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
        rows, ``empty`` (when given) comes out instead: one empty table, so the schema
        still travels downstream."""
        given = False
        for table in convert:
            given = True
            yield table
        if not given and empty is not None:
            yield empty
        self.record()

    def close(self) -> None:
        close_query(self._query, self._cursor)
        self._query, self._cursor = None, None
