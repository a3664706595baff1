"""One DuckDB query over batches pushed in while it runs.

The task pushes batches (``operators.base``'s call order) but DuckDB pulls
them: it scans a ``pyarrow.RecordBatchReader``.  ``StreamedQuery`` joins the
two with a bounded queue: the query runs in a thread of its own over a reader
whose generator takes batches from the queue, so an aggregate or a sort
consumes a pipelined or hybrid input as it arrives, within DuckDB's
``memory_limit``, instead of after it was all kept.  Its output batches come
back through a second bounded queue: ``push`` returns what is ready (a
streaming query's rows), ``finish`` ends the input and returns the rest.  A
query may end before its input does (``LIMIT``: DuckDB stops reading); the
batches pushed after that are dropped, not waited on.

Every wait is bounded: a push or a read that waits longer than
``wait_timeout`` raises ``WaitTimeoutError`` naming the operator, and a failed
query is seen by the next ``push`` or by ``finish`` (``QueryFailedError``, with
DuckDB's message).  ``close`` stops a query that is still running (the task
failed or was cancelled): the generator raises and ``interrupt`` stops DuckDB.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Generator, Iterator

import duckdb
import pyarrow as pa

from hybrid_shuffle.errors import QueryFailedError, WaitTimeoutError, summary

__all__ = ["OUTPUT_ROWS", "StreamedQuery", "close_query", "query_error"]

#: rows per output batch DuckDB is asked for (its vectors are 2,048 rows)
OUTPUT_ROWS = 1 << 17
_CAPACITY = 4  # batches queued each way
_POLL = 0.05  # seconds between looks at the other side while a queue is full or empty


class _End:
    """The query gave all its rows."""


class _Abort(Exception):
    """Raised in the query's input generator when the operator is closed early."""


def query_error(error: BaseException, what: str) -> QueryFailedError:
    """A DuckDB error as one sentence naming the operator (``what``)."""
    return QueryFailedError(f"{what}: DuckDB failed on the data: {summary(error)}")


class StreamedQuery:
    """``query`` over the pushed batches, which it names ``input``; see the module
    docstring.  ``schema`` is the input's (the first batch's)."""

    def __init__(
        self,
        cursor: duckdb.DuckDBPyConnection,
        query: str,
        schema: pa.Schema,
        what: str,
        wait_timeout: float = 300.0,
    ) -> None:
        self.cursor = cursor
        self.query = query
        self.schema = schema
        self.what = what
        self.wait_timeout = wait_timeout
        self._in: queue.Queue[pa.Table | None] = queue.Queue(_CAPACITY)
        self._out: queue.Queue[pa.RecordBatch | _End | BaseException] = queue.Queue(_CAPACITY)
        self._closed = threading.Event()
        self._generator: Generator[pa.RecordBatch] | None = None
        self._done = False
        #: CPU seconds the query's thread used, set when it ends (DuckDB runs its
        #: ``threads: 1`` work on it)
        self.cpu_seconds = 0.0
        self._thread = threading.Thread(target=self._run, name=f"duckdb {what}", daemon=True)
        self._thread.start()

    # -- the query's thread ---------------------------------------------------------------

    def _batches(self) -> Generator[pa.RecordBatch]:
        while True:
            try:
                table = self._in.get(timeout=_POLL)
            except queue.Empty:
                if self._closed.is_set():
                    raise _Abort() from None
                continue
            if table is None:
                return
            yield from table.to_batches()

    def _run(self) -> None:
        started = time.thread_time()
        try:
            self._generator = self._batches()
            reader = pa.RecordBatchReader.from_batches(self.schema, self._generator)
            self.cursor.register("input", reader)
            for batch in self.cursor.execute(self.query).to_arrow_reader(OUTPUT_ROWS):
                if not self._put_out(batch):
                    return
            self._put_out(_End())
        except BaseException as e:  # handed to the task's thread
            self._put_out(e)
        finally:
            self.cpu_seconds = time.thread_time() - started

    def _put_out(self, item: pa.RecordBatch | _End | BaseException) -> bool:
        while not self._closed.is_set():
            try:
                self._out.put(item, timeout=_POLL)
                return True
            except queue.Full:
                continue
        return False

    # -- the task's thread ----------------------------------------------------------------

    def push(self, table: pa.Table) -> list[pa.Table]:
        """Queue ``table`` for the query; return the output that is ready."""
        ready: list[pa.Table] = []
        started = time.monotonic()
        while not self._done:  # a query that ended early (LIMIT) reads no more input
            try:
                self._in.put(table, timeout=_POLL)
                break
            except queue.Full:
                self._drain(ready)
                self._check_wait(started, "to take a batch")
        self._drain(ready)
        return ready

    def finish(self) -> Iterator[pa.Table]:
        """End the input; the rest of the output, until the query ends."""
        ready: list[pa.Table] = []
        started = time.monotonic()
        while not self._done:
            try:
                self._in.put(None, timeout=_POLL)
                break
            except queue.Full:
                self._drain(ready)
                self._check_wait(started, "to take the end of its input")
        yield from ready
        while not self._done:
            started = time.monotonic()
            while True:
                try:
                    item = self._out.get(timeout=_POLL)
                    break
                except queue.Empty:
                    self._check_wait(started, "to give its output")
            table = self._take(item)
            if table is not None:
                yield table
        self._thread.join(self.wait_timeout)

    def _drain(self, into: list[pa.Table]) -> None:
        while not self._done:
            try:
                item = self._out.get_nowait()
            except queue.Empty:
                return
            table = self._take(item)
            if table is not None:
                into.append(table)

    def _take(self, item: pa.RecordBatch | _End | BaseException) -> pa.Table | None:
        if isinstance(item, _End):
            self._done = True
            return None
        if isinstance(item, BaseException):
            self._done = True
            if isinstance(item, duckdb.Error):
                raise query_error(item, self.what) from item
            raise item
        return pa.Table.from_batches([item])

    def _check_wait(self, started: float, what: str) -> None:
        if not self._thread.is_alive() and self._out.empty() and not self._done:
            raise QueryFailedError(f"{self.what}: DuckDB's query ended without a result")
        if time.monotonic() - started > self.wait_timeout:
            raise WaitTimeoutError(
                f"{self.what}: DuckDB waited more than {self.wait_timeout:g} s {what}; "
                "raise shuffle.wait_timeout if the operator is just slow"
            )

    def close(self) -> None:
        """Stop the query if it still runs (idempotent)."""
        if self._closed.is_set():
            return
        self._closed.set()
        if self._thread.is_alive():
            with contextlib.suppress(duckdb.Error):
                self.cursor.interrupt()
            self._thread.join(self.wait_timeout)
        self._end_input()

    def _end_input(self) -> None:
        """End the input's generator.  A query that ended early (``LIMIT``) leaves DuckDB
        still pulling from it; a thread left in it when Python exits aborts the process.
        ``_closed`` makes it raise within ``_POLL``; until then ``close`` cannot end it."""
        generator = self._generator
        if generator is None:
            return
        deadline = time.monotonic() + self.wait_timeout
        while True:
            try:
                generator.close()
                return
            except ValueError:  # "generator already executing", in DuckDB's thread
                if time.monotonic() > deadline:
                    return
                time.sleep(_POLL)


def close_query(query: StreamedQuery | None, cursor: duckdb.DuckDBPyConnection | None) -> None:
    """What an operator's ``close`` does with its DuckDB: stop ``query`` if it still runs,
    then close ``cursor`` (either may be ``None``; both idempotent)."""
    if query is not None:
        query.close()
    if cursor is not None:
        with contextlib.suppress(duckdb.Error):
            cursor.close()
