"""co_group's sorter on DuckDB: one streamed ``ORDER BY`` per input, spilling within
the task's ``memory_limit``.

``DuckSorter`` (``add``, ``rows``, ``sorted_batches``, ``close``, held bytes reported
through ``HeldBytes``) sorts one side of ``co_group.SortedSides``.  Each side is a
``StreamedQuery`` of ``SELECT * FROM input ORDER BY keys ASC NULLS LAST`` on a
cursor of its own on the task's database (two sides: two cursors, two
queries): ``add`` pushes a batch in as it arrives, ``sorted_batches`` ends the
input and streams the sorted rows out, conformed to the input's types, and
then records DuckDB's peaks (``peak_memory_bytes``, ``spilled_bytes``).

The two sides must come out in exactly the order ``key_groups.align`` compares
with, pyarrow's: nulls last, strings by their bytes, NaN after every number
(``lowering.sort_key``, which also keeps ``-0.0`` as it came).  Each batch is
staged encoded (``encoding.Encoding``), so types and names DuckDB would not give
back come back as they were.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

import duckdb
import pyarrow as pa

from hybrid_shuffle.operators.context import HeldBytes, OperatorContext
from hybrid_shuffle.operators.duck.encoding import Encoding
from hybrid_shuffle.operators.duck.lowering import conform, sort_query
from hybrid_shuffle.operators.duck.streamed_query import StreamedQuery, close_query

__all__ = ["DuckSorter"]


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
        self._encoding = Encoding(schema)
        self._cursor: duckdb.DuckDBPyConnection | None = context.database.cursor()
        self._query: StreamedQuery | None = StreamedQuery(
            self._cursor,
            sort_query(on, False, schema, self._encoding.names),
            self._encoding.staged,
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
            self._early.extend(self._query.push(self._encoding.encode(table)))

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
