"""Inputs staged in DuckDB TEMP tables: the one helper the join and ``sql`` share.

An operator whose query reads an input whole (a join's build side, a
translated stage that scans ``input`` twice, the probe rows that came before
the build side ended) cannot stream that input into a ``StreamedQuery``: the
inputs arrive interleaved, and a reader blocking on one input's queue while
the task holds a batch of another would deadlock.  So each input's batches go
into a TEMP table of its own, and the query runs over the tables once they are
complete.  DuckDB keeps the tables within the task's ``memory_limit`` and spills
the rest to the task's temp directory.

**Batches are held, then written in one statement.**  Every statement DuckDB runs
from Python costs 1.4 ms before it moves a row, and an ``INSERT`` of a 64k-row batch
3.3 ms more than the same rows written by one ``CREATE TABLE ... AS`` (DuckDB 1.5, one
thread; 900k rows of Q7's join input in 14 batches: 95 ms inserted one by one, 48 ms
in one statement).  An exchange hands a consumer its rows in buffer-sized batches,
so the batches of each input are held as Arrow and written together (``CREATE TEMP
TABLE ... AS`` the first time, ``INSERT INTO`` after) once the held batches of all
inputs pass ``hold_bytes``, and before any query reads the tables (``flush``, which
``execute`` calls; an operator that runs a query on its cursor itself calls it
first).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import duckdb
import pyarrow as pa

from hybrid_shuffle.operators.duck.streamed_query import query_error

__all__ = ["StagedInputs", "hold_bytes"]

#: the name the held batches are registered under while they are written to their table
_BATCH = "__hs_staged_batch"
#: the most bytes held unwritten, whatever the memory: past it a statement costs little
_MAX_HOLD = 32 << 20


def hold_bytes(memory: int) -> int:
    """What an operator given ``memory`` holds unwritten (``StagedInputs.hold_bytes``): a
    sixteenth of it, inside the quarter DuckDB's ``memory_limit`` leaves as headroom,
    and at most 32 MiB."""
    return min(memory // 16, _MAX_HOLD)


class StagedInputs:
    """One TEMP table per input, named ``names[index]`` (SQL identifiers, quoted if need
    be), on the cursor ``cursor()`` gives (called when the first batches are written, so
    an operator opens its cursor lazily).  ``what`` names the operator in DuckDB's
    errors (``QueryFailedError``); ``hold_bytes`` bounds the batches held unwritten,
    all inputs together (see the module docstring).

    The tables are complete only after ``flush``: a query over them runs through
    ``execute`` or after a ``flush`` of its own."""

    def __init__(
        self,
        cursor: Callable[[], duckdb.DuckDBPyConnection],
        names: Sequence[str],
        what: str,
        hold_bytes: int = 0,
    ) -> None:
        self._cursor = cursor
        self.names = tuple(names)
        self.what = what
        self.hold_bytes = hold_bytes
        #: the inputs staged: their table exists, or batches of it are held for it
        self.staged: set[int] = set()
        #: the inputs whose table exists
        self._written: set[int] = set()
        #: per input, the batches held for its table
        self._held: dict[int, list[pa.Table]] = {}
        self._held_bytes = 0

    def __contains__(self, index: object) -> bool:
        return index in self.staged

    def __bool__(self) -> bool:
        return bool(self.staged)

    def execute(self, sql: str) -> duckdb.DuckDBPyConnection:
        """Run ``sql`` on the cursor, the held batches written first; a DuckDB error is a
        ``QueryFailedError``."""
        self.flush()
        return self._execute(sql)

    def _execute(self, sql: str) -> duckdb.DuckDBPyConnection:
        try:
            return self._cursor().execute(sql)
        except duckdb.Error as e:
            raise query_error(e, self.what) from e

    def stage(self, table: pa.Table, index: int = 0) -> None:
        """Add ``table`` to input ``index``'s table (made by its first batch); written once
        the held batches pass ``hold_bytes``, or by the next ``flush``."""
        self.staged.add(index)
        self._held.setdefault(index, []).append(table)
        self._held_bytes += table.nbytes
        if self._held_bytes > self.hold_bytes:
            self.flush()

    def held(self, index: int) -> list[pa.Table] | None:
        """Input ``index``'s batches as staged, if none of them was written yet (its rows
        are all held as Arrow), else None (read its table instead)."""
        if index in self._written:
            return None
        return list(self._held.get(index, []))

    def stage_empty(self, schema: pa.Schema, index: int) -> None:
        """Make input ``index``'s table, empty with ``schema``'s columns, if no batch made
        it (an input that sent no batch is an empty table of its planned columns)."""
        if index not in self.staged:
            self.stage(schema.empty_table(), index)

    def flush(self) -> None:
        """Write every held batch to its input's table: the tables are complete."""
        held, self._held, self._held_bytes = self._held, {}, 0
        for index, tables in held.items():
            # one statement per run of batches with one schema (DuckDB casts each run to
            # the table's columns as it would a single batch)
            run = [tables[0]]
            for table in tables[1:]:
                if table.schema.equals(run[0].schema):
                    run.append(table)
                else:
                    self._write(index, run)
                    run = [table]
            self._write(index, run)

    def _write(self, index: int, tables: list[pa.Table]) -> None:
        """One statement over ``tables`` (batches of one input, of one schema)."""
        cursor = self._cursor()
        name = self.names[index]
        batch = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
        cursor.register(_BATCH, batch)
        try:
            if index in self._written:
                self._execute(f"INSERT INTO {name} SELECT * FROM {_BATCH}")
            else:
                self._execute(f"CREATE TEMP TABLE {name} AS SELECT * FROM {_BATCH}")
                self._written.add(index)
        finally:
            cursor.unregister(_BATCH)

    def drop(self, index: int) -> None:
        """Drop input ``index``'s table and its held batches, if any (errors ignored: the
        task may be ending on another)."""
        held = self._held.pop(index, [])
        self._held_bytes -= sum(t.nbytes for t in held)
        self.staged.discard(index)
        if index in self._written:
            self._written.discard(index)
            with contextlib.suppress(duckdb.Error):
                self._cursor().execute(f"DROP TABLE IF EXISTS {self.names[index]}")
