"""One DuckDB database per task attempt: its threads, its memory, its spill directory.

A Ray executor runs several tasks in one process, and DuckDB's default is one
thread per core and 80% of the machine's memory *per database*: eight tasks
would each start two threads on a 2-core machine and each believe it owns the
RAM.  So every task attempt gets a database of its own, opened on first use
(a task whose operators all run on Arrow never opens one), with

- ``threads`` = ``operators.threads`` (one slot is one core: 1 by default);
- ``memory_limit`` = three quarters of the task's ``operators.memory`` (the sum of its
  DuckDB operators' shares; see "The headroom" below); the config refuses a budget
  under ``OPERATORS_MIN_MEMORY`` when it is loaded (see "The floor");
- ``temp_directory`` = a directory private to the attempt (0700), created on
  connect and removed by the task however it ends, after ``close``.

**The floor, measured** (DuckDB 1.5, one thread, a streamed ``GROUP BY`` of 5M rows
over 2.5M keys, ``benchmarks/tight_memory.py`` at scale): ``memory_limit`` bounds
DuckDB's buffer pool, not the process.  At 16 MB the aggregate cannot run at all
("failed to pin block of size 256 KiB (15.1 MiB/15.2 MiB used)"); at 24 MB it runs,
its pool stays at the limit, but DuckDB's own peak (``peak_memory_bytes``) is 41 MiB
and the process's resident memory rises by 50 MiB; at 64 MB the same figures are
82 MiB and 89 MiB.  Past the pool there is a fixed ~20-25 MiB (DuckDB's allocations
outside its pool, its allocator's caches, the Arrow batches queued into and out of the
query), so no ``memory_limit`` keeps an aggregate within 1.5x a budget below about
40 MiB, and below ~24 MiB it fails.  At 64 MiB the peak is ~1.3x the limit.
So ``operators.memory`` below 64 MiB (``config.OPERATORS_MIN_MEMORY``) is refused when
the config is loaded, naming the floor and why, rather than raised in silence: the
limit a task's DuckDB gets is the figure ``explain()``, ``VertexMetrics.memory`` and
the timeline show.  (Before, a smaller budget was raised to 64 MiB behind the user's
back: ``operators.memory: 16 MiB`` peaked near 83 MiB, 5.2x what it said.)

**The headroom, measured** (DuckDB 1.5, one thread, 4M-row hash join, sort and
aggregate over registered Arrow tables, results read as Arrow batches; process RSS rise
from ``ru_maxrss``): with ``memory_limit`` 64 MiB, DuckDB's own peak
(``system_peak_buffer_memory``) is 128 MiB for the join, 97 for the sort and 82 for the
aggregate, and the process rises by 95, 75 and 73 MiB: a task given 64 MiB as its limit
holds up to 2x it by DuckDB's count and 1.5x by the kernel's.  With the limit at 48 MiB
the figures are 96 / 48 / 81 MiB and 67 / 58 / 57 MiB.  DuckDB's count never went past
twice its limit (a hash join reaches it), and a hash aggregate needs more memory the
more distinct keys it holds (16M keys need about 46 MiB, 32M more than 64 MiB).  So a
task's DuckDB gets three quarters of the budget (``duckdb_memory_limit``): its peak, by
either count, stays within 1.5x of ``operators.memory``, which is the figure the task
reports as its ``memory``, and at the 64 MiB floor an aggregate still takes 4x the budget
of distinct keys (``tests/integration/test_operator_budget.py``).

``peak_memory_bytes`` is the peak of the database's buffer pool *while the cursor
lived* (DuckDB keeps the figure per connection, not per query: a cursor's later query
reports the earlier one's peak too), so an operator's peak includes what other
operators of the task held meanwhile.

Each operator works on a cursor of its own (``cursor``): cursors share the
database (its buffer pool, threads and spill files) but run queries
independently, so two operators of one chain may both have a query open.
Profiling is on for every cursor with only the two system metrics the
operators report (``QueryProfile``): the peak of DuckDB's buffer memory
(``peak_memory_bytes``) and of its temp directory (``spilled_bytes``).

Opening a DuckDB database costs 15-50 ms (its catalog, buffer manager and extensions
are built anew), more than a small task's whole run.  So an executor keeps the
databases its finished tasks used in a ``DatabasePool`` and its next tasks reuse
them: each task still gets its own database for its life, with its threads, memory
limit and temp directory set anew when it takes one (only those that differ from what
the database last had: ``SET memory_limit`` makes DuckDB hand its allocator's cached
memory back, 2.4-3 ms after a task's work, for a limit that is most often the same).
A database goes back to the
pool only as it was opened: its task finished, every cursor the task opened is
closed (their registered inputs and TEMP tables go with them), it never wrote a temp
file (DuckDB cannot move a temp directory it has used, and the task's is removed
with it) and it holds no table or view; anything else closes it, as a database
without a pool is closed.

**Parquet footers are read once per database** (``PARQUET_METADATA_CACHE``): a task
whose stage reads its split with ``read_parquet`` parsed the file's footer first, 11 ms
for TPC-H's ``lineitem`` at SF10 (524 row groups, a 1 MiB footer) against 0.4 ms once
DuckDB keeps it.  A pooled database keeps it for the executor's next tasks; DuckDB
checks the file's modification time on every read and parses a changed file again, and
counts what it keeps in its memory (``OBJECT_CACHE``: 1.1 MB for that footer).

**Handing back happens after the task reported.** Closing a task's cursors (their
query results and registered inputs are freed) and checking the database cost 2-10 ms
(TPC-H Q3 at SF1: 1.8-10.6 ms a task), and the task's report waited for it: every hop
of a query paid it on its critical path.  So ``close`` queues a finished task's
database to the pool's hand-back thread, which closes the cursors, checks it, keeps or
closes it and then runs what the task left to do after it (removing its directory);
the report goes back meanwhile.  A task that finds no idle database waits for the
hand-backs queued before it (bounded: ``_SETTLE_SECONDS``; past it, it opens one), so
the next task of the executor reuses the database, and the executor's leak probes wait
for them too (``DatabasePool.settle``).  A task that failed, was cancelled or spilled
closes its database at once, before it reports.
"""

from __future__ import annotations

import contextlib
import json
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import duckdb

from hybrid_shuffle.spill_dirs import make_private_dirs

__all__ = [
    "PARQUET_METADATA_CACHE",
    "DatabasePool",
    "QueryProfile",
    "TaskDatabase",
    "duckdb_memory_limit",
]

#: every database of the engine keeps the Parquet footers it read (see the docstring)
PARQUET_METADATA_CACHE = "SET parquet_metadata_cache = true"

_PROFILE = json.dumps({"SYSTEM_PEAK_BUFFER_MEMORY": "true", "SYSTEM_PEAK_TEMP_DIR_SIZE": "true"})
#: idle databases a pool keeps (one per task an executor runs at once is enough)
_KEEP = 8
#: the longest a task waits for earlier tasks' databases to be handed back before it
#: opens one of its own (a hand-back takes milliseconds)
_SETTLE_SECONDS = 5.0
#: what a database handed back must not hold: tables and views its tasks created
_LEFT_OVER = (
    "SELECT (SELECT count(*) FROM duckdb_tables()) "
    "+ (SELECT count(*) FROM duckdb_views() WHERE NOT internal)"
)


def duckdb_memory_limit(memory: int) -> int:
    """The ``memory_limit`` of a task's DuckDB given the task's ``operators.memory``:
    three quarters of it, the rest headroom for what DuckDB holds past its limit (see "The
    headroom" in the module docstring)."""
    return memory * 3 // 4


@dataclass(frozen=True)
class QueryProfile:
    """What one finished query used at its peak (DuckDB's own figures)."""

    peak_memory_bytes: int = 0
    #: the most bytes its spill files held at once
    spilled_bytes: int = 0


@dataclass(frozen=True)
class _Settings:
    """What a task sets on its database: ``threads`` and ``memory_limit`` (bytes, or
    ``None``: DuckDB's default)."""

    threads: int
    memory_limit: int | None


#: what the hand-back thread is given: a database, its settings, the cursors to close
#: first and what to run once it is kept or closed
_HandBack = tuple[
    duckdb.DuckDBPyConnection,
    _Settings,
    list[duckdb.DuckDBPyConnection],
    Callable[[], None] | None,
]


class DatabasePool:
    """The idle DuckDB databases of one process, for its next tasks (see the module
    docstring), each with the settings it last had; thread-safe, at most ``keep``.
    Databases come back through ``give_later`` on a thread of the pool's own."""

    def __init__(self, keep: int = _KEEP) -> None:
        self._keep = keep
        self._idle: list[tuple[duckdb.DuckDBPyConnection, _Settings]] = []
        self._lock = threading.Lock()
        #: notified whenever a queued hand-back is done
        self._settled = threading.Condition(self._lock)
        self._queued = 0
        self._backlog: queue.SimpleQueue[_HandBack] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False

    def take(self) -> tuple[duckdb.DuckDBPyConnection, _Settings] | None:
        """An idle database (its temp directory unset) and its settings, or None: open a
        new one.  With none idle, waits for the hand-backs queued before it (bounded)."""
        with self._lock:
            self._settled.wait_for(lambda: self._idle or self._queued == 0, _SETTLE_SECONDS)
            return self._idle.pop() if self._idle else None

    def settle(self, timeout: float = _SETTLE_SECONDS) -> bool:
        """Wait (at most ``timeout`` s) until every queued hand-back is done; whether
        they all are.  The executor's leak probes call it: a finished task's cursors
        and directory are gone once it returns."""
        with self._lock:
            return self._settled.wait_for(lambda: self._queued == 0, timeout)

    def give_later(
        self,
        connection: duckdb.DuckDBPyConnection,
        settings: _Settings,
        cursors: list[duckdb.DuckDBPyConnection],
        then: Callable[[], None] | None = None,
    ) -> None:
        """Close ``cursors``, then ``give`` the database back, then run ``then``, on the
        pool's thread; returns at once."""
        with self._lock:
            self._queued += 1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._hand_back, name="duckdb-hand-back", daemon=True
                )
                self._thread.start()
        self._backlog.put((connection, settings, cursors, then))

    def _hand_back(self) -> None:
        while True:
            connection, settings, cursors, then = self._backlog.get()
            try:
                try:
                    for cursor in cursors:
                        cursor.close()
                except duckdb.Error:
                    connection.close()
                else:
                    self.give(connection, settings)
            except Exception:  # a broken database is dropped, never kept
                with contextlib.suppress(Exception):
                    connection.close()
            finally:
                try:
                    if then is not None:
                        then()
                finally:
                    with self._lock:
                        self._queued -= 1
                        self._settled.notify_all()

    def give(self, connection: duckdb.DuckDBPyConnection, settings: _Settings) -> None:
        """Keep ``connection`` (whose settings are ``settings``) for a later task if it is
        as it was opened, else close it.  Its task's cursors must be closed."""
        try:
            # raises once DuckDB wrote a temp file: it cannot move the directory then
            connection.execute("SET temp_directory = ''")
            left = connection.execute(_LEFT_OVER).fetchone()
            clean = left is not None and left[0] == 0
        except duckdb.Error:
            clean = False
        with self._lock:
            if clean and not self._closed and len(self._idle) < self._keep:
                self._idle.append((connection, settings))
                return
        connection.close()

    def close(self) -> None:
        """Close every idle database once the queued hand-backs are done (bounded);
        later ones handed back are closed at once."""
        self.settle()
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for connection, _ in idle:
            connection.close()


class TaskDatabase:
    """The DuckDB database of one task attempt (see the module docstring).

    ``memory`` is the task's budget in bytes (DuckDB gets ``duckdb_memory_limit`` of
    it) or ``None`` (DuckDB's default: an operator opened outside a task, in a unit
    test or on the driver); ``temp_directory`` ``None`` keeps
    DuckDB from spilling at all.  With a ``pool``, the database is taken from it on
    first use and handed back by ``close`` (see the module docstring).
    """

    def __init__(
        self,
        threads: int = 1,
        memory: int | None = None,
        temp_directory: str | None = None,
        pool: DatabasePool | None = None,
    ):
        self.threads = threads
        self.memory_limit = None if memory is None else duckdb_memory_limit(memory)
        self.temp_directory = temp_directory
        self._pool = pool
        self._connection: duckdb.DuckDBPyConnection | None = None
        #: every cursor handed out: closed before the database goes back to a pool
        self._cursors: list[duckdb.DuckDBPyConnection] = []
        self._lock = threading.Lock()

    @property
    def _settings(self) -> _Settings:
        return _Settings(self.threads, self.memory_limit)

    def _connect(self) -> duckdb.DuckDBPyConnection:
        if self.temp_directory is not None:
            make_private_dirs(self.temp_directory)
        reused = self._pool.take() if self._pool is not None else None
        if reused is not None:
            connection, settings = reused
            try:
                return self._configure(connection, settings)
            except duckdb.Error:  # never kept in a state it cannot leave: open a new one
                connection.close()
        config: dict[str, Any] = {
            "threads": self.threads,
            # output order within one subtask is never promised; keeping it costs memory
            "preserve_insertion_order": False,
            # no spilling where nothing would clean up
            "temp_directory": self.temp_directory or "",
        }
        if self.memory_limit is not None:
            config["memory_limit"] = f"{self.memory_limit}B"
        connection = duckdb.connect(":memory:", config=config)
        connection.execute(PARQUET_METADATA_CACHE)
        return connection

    def _configure(
        self, connection: duckdb.DuckDBPyConnection, had: _Settings
    ) -> duckdb.DuckDBPyConnection:
        """A pooled database, which had the settings ``had``, with this task's."""
        statements = []
        if had.threads != self.threads:
            statements.append(f"SET threads = {int(self.threads)}")
        if had.memory_limit != self.memory_limit:
            statements.append(
                "RESET memory_limit"
                if self.memory_limit is None
                else f"SET memory_limit = '{int(self.memory_limit)}B'"
            )
        temp = (self.temp_directory or "").replace("'", "''")
        statements.append(f"SET temp_directory = '{temp}'")
        connection.execute("; ".join(statements))
        return connection

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A new cursor on the database (connecting on first use), profiling on."""
        with self._lock:
            if self._connection is None:
                self._connection = self._connect()
            cursor = self._connection.cursor()
            if self._pool is not None:
                self._cursors.append(cursor)
        cursor.execute("SET enable_profiling = 'no_output'")
        cursor.execute(f"SET custom_profiling_settings = '{_PROFILE}'")
        return cursor

    @staticmethod
    def profile(cursor: duckdb.DuckDBPyConnection) -> QueryProfile:
        """The peaks of the cursor's last query (zeros if DuckDB kept none)."""
        try:
            info = json.loads(cursor.get_profiling_information(format="json"))
        except (duckdb.Error, ValueError):
            return QueryProfile()
        return QueryProfile(
            int(info.get("system_peak_buffer_memory") or 0),
            int(info.get("system_peak_temp_dir_size") or 0),
        )

    def setting(self, name: str) -> Any:
        """The database's current value of a DuckDB setting (``threads``, ...)."""
        cursor = self.cursor()
        try:
            return cursor.execute("SELECT current_setting(?)", [name]).fetchone()[0]  # type: ignore[index]
        finally:
            cursor.close()

    def close(self, reuse: bool = True, then: Callable[[], None] | None = None) -> None:
        """Close the database (its spill files go with it), or hand it back to the pool
        (``reuse``: its task finished; see the module docstring); idempotent.  ``then``
        runs once the database is closed or handed back: at once, or on the pool's
        thread after the hand-back (what the task's directory must wait for)."""
        with self._lock:
            connection, self._connection = self._connection, None
            cursors, self._cursors = self._cursors, []
        if connection is not None and self._pool is not None and reuse:
            self._pool.give_later(connection, self._settings, cursors, then)
            return
        if connection is not None:
            connection.close()
        if then is not None:
            then()
