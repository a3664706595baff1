"""co_group's sorter on DuckDB: one streamed ``ORDER BY`` per input, spilling within
the task's ``memory_limit``.

``DuckSorter`` has the interface of pyarrow's ``sorter.Sorter``
(``add``, ``rows``, ``sorted_batches``, ``close``, held bytes reported through
``HeldBytes``), so ``co_group.SortedSides`` takes either.  Each side is a
``StreamedQuery`` of ``SELECT * FROM input ORDER BY keys ASC NULLS LAST`` on a
cursor of its own on the task's database (two sides: two cursors, two
queries): ``add`` pushes a batch in as it arrives, ``sorted_batches`` ends the
input and streams the sorted rows out, conformed to the input's types, and
then records DuckDB's peaks (``peak_memory_bytes``, ``spilled_bytes``).

The two sides must come out in exactly the order ``key_groups.align`` compares
with (pyarrow's: nulls last, strings by their bytes), so ``usable`` keeps the
Arrow sorter for float keys (DuckDB puts NaN above every number in both
directions and ties ``0.0`` with ``-0.0`` differently: ``lowering.sort_key``) and for
a side with a column whose type the round trip through DuckDB does not keep
(``lowering.duck_types``), or names DuckDB cannot tell apart.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

import duckdb
import pyarrow as pa

from hybrid_shuffle.operators.context import HeldBytes, OperatorContext
from hybrid_shuffle.operators.duck.lowering import conform, duck_types, sort_query
from hybrid_shuffle.operators.duck.streamed_query import StreamedQuery, close_query

__all__ = ["DuckSorter", "usable"]


def usable(schema: pa.Schema, on: Sequence[str]) -> bool:
    """Whether a side of ``schema`` sorts on DuckDB by ``on`` exactly as on Arrow."""
    return duck_types(schema, on)


class DuckSorter:
    """Sorts one input of ``schema`` ascending by ``on`` (nulls last) on DuckDB; see the
    module docstring.  ``what`` names the operator in DuckDB's errors."""

    def __init__(
        self,
        on: Sequence[str],
        schema: pa.Schema,
        context: OperatorContext,
        what: str,
        held: HeldBytes | None = None,
    ) -> None:
        self.schema = schema
        self.context = context
        self.what = what
        self.held = held if held is not None else HeldBytes(context)
        #: rows added so far
        self.rows = 0
        self._cursor: duckdb.DuckDBPyConnection | None = context.database.cursor()
        self._query: StreamedQuery | None = StreamedQuery(
            self._cursor,
            sort_query(on, False, schema),
            schema,
            what,
            context.wait_timeout,
        )
        #: output the query gave while its input was still coming (none: ORDER BY)
        self._early: list[pa.Table] = []

    def add(self, table: pa.Table) -> None:
        """Push ``table`` (of the sorter's schema) into the query."""
        assert self._query is not None, "add after sorted_batches or close"
        self.rows += table.num_rows
        if table.num_rows:
            if not table.schema.equals(self.schema):
                table = pa.Table.from_arrays(table.columns, schema=self.schema)
            self._early.extend(self._query.push(table))

    def sorted_batches(self) -> Iterator[pa.Table]:
        """Every row added, sorted; call once, after the last ``add``.  DuckDB's peaks are
        recorded once the query gave its last row; the query ends with the iterator."""
        try:
            query = self._query
            if query is None:
                return
            for table in itertools.chain(self._early, query.finish()):
                if table.num_rows:
                    yield conform(table, self.schema, self.what)
            self._early = []
            self._record(query)
        finally:
            self.close()

    def _record(self, query: StreamedQuery) -> None:
        if self._cursor is not None:
            self.held.set(self, self.context.record_query(self._cursor, query))

    def close(self) -> None:
        """Stop the query if it still runs and close the cursor (idempotent)."""
        close_query(self._query, self._cursor)
        self._query, self._cursor = None, None
