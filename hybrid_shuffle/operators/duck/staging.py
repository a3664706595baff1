"""Inputs staged in DuckDB TEMP tables: the one helper the join and ``sql`` share.

An operator whose query reads an input whole (a join's build side, a
translated stage that scans ``input`` twice, the probe rows that came before
the build side ended) cannot stream that input into a ``StreamedQuery``: the
inputs arrive interleaved, and a reader blocking on one input's queue while
the task holds a batch of another would deadlock.  So each batch of such an
input is appended to a TEMP table of its own as it arrives (``CREATE TEMP
TABLE ... AS`` on the first batch, ``INSERT INTO`` after), and the query runs
over the tables once they are complete.  DuckDB keeps the tables within the
task's ``memory_limit`` and spills the rest to the task's temp directory.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import duckdb
import pyarrow as pa

from hybrid_shuffle.operators.duck.streamed_query import query_error

__all__ = ["StagedInputs"]

#: the name a batch is registered under while it is appended to its table
_BATCH = "__hs_staged_batch"


class StagedInputs:
    """One TEMP table per input, named ``names[index]`` (SQL identifiers, quoted if need
    be), on the cursor ``cursor()`` gives (called when the first batch is staged, so an
    operator opens its cursor lazily).  ``what`` names the operator in DuckDB's
    errors (``QueryFailedError``)."""

    def __init__(
        self,
        cursor: Callable[[], duckdb.DuckDBPyConnection],
        names: Sequence[str],
        what: str,
    ) -> None:
        self._cursor = cursor
        self.names = tuple(names)
        self.what = what
        #: the inputs whose table exists
        self.staged: set[int] = set()

    def __contains__(self, index: object) -> bool:
        return index in self.staged

    def __bool__(self) -> bool:
        return bool(self.staged)

    def execute(self, sql: str) -> duckdb.DuckDBPyConnection:
        """Run ``sql`` on the cursor; a DuckDB error is a ``QueryFailedError``."""
        try:
            return self._cursor().execute(sql)
        except duckdb.Error as e:
            raise query_error(e, self.what) from e

    def stage(self, table: pa.Table, index: int = 0) -> None:
        """Append ``table`` to input ``index``'s table (made by its first batch)."""
        cursor = self._cursor()
        name = self.names[index]
        cursor.register(_BATCH, table)
        try:
            if index in self.staged:
                self.execute(f"INSERT INTO {name} SELECT * FROM {_BATCH}")
            else:
                self.execute(f"CREATE TEMP TABLE {name} AS SELECT * FROM {_BATCH}")
                self.staged.add(index)
        finally:
            cursor.unregister(_BATCH)

    def stage_empty(self, schema: pa.Schema, index: int) -> None:
        """Make input ``index``'s table, empty with ``schema``'s columns, if no batch made
        it (an input that sent no batch is an empty table of its planned columns)."""
        if index not in self.staged:
            self.stage(schema.empty_table(), index)

    def drop(self, index: int) -> None:
        """Drop input ``index``'s table, if it exists (errors ignored: the task may be
        ending on another)."""
        if index in self.staged:
            self.staged.discard(index)
            with contextlib.suppress(duckdb.Error):
                self._cursor().execute(f"DROP TABLE IF EXISTS {self.names[index]}")
