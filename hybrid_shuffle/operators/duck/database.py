"""One DuckDB database per task attempt: its threads, its memory, its spill directory.

A Ray executor runs several tasks in one process, and DuckDB's default is one
thread per core and 80% of the machine's memory *per database*: eight tasks
would each start two threads on a 2-core machine and each believe it owns the
RAM.  So every task attempt gets a database of its own, opened on first use
(a task whose operators all run on Arrow never opens one), with

- ``threads`` = ``operators.threads`` (one slot is one core: 1 by default);
- ``memory_limit`` = the task's ``operators.memory`` (the sum of its DuckDB
  operators' shares), but at least ``MIN_MEMORY``: a smaller budget is raised to
  the floor rather than failing (architecture §11 says so; see "The floor" below);
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
40 MiB, and below ~24 MiB it fails.  At the 64 MiB floor the peak is ~1.3x the limit.
So a budget under ``MIN_MEMORY`` is raised to it, and a task's real peak is the floor's
1.3x, not the budget's: ``operators.memory: 16 MiB`` peaks near 83 MiB (5.2x the
budget).  ``OperatorMetrics.memory`` stays the budget the user gave; compare
``peak_memory_bytes`` with ``max(memory, MIN_MEMORY)`` for what DuckDB had.

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
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

import duckdb

from hybrid_shuffle.spill_dirs import make_private_dirs

__all__ = ["MIN_MEMORY", "QueryProfile", "TaskDatabase"]

#: the smallest ``memory_limit`` a task's DuckDB gets (see the module docstring)
MIN_MEMORY = 64 << 20
_PROFILE = json.dumps({"SYSTEM_PEAK_BUFFER_MEMORY": "true", "SYSTEM_PEAK_TEMP_DIR_SIZE": "true"})


@dataclass(frozen=True)
class QueryProfile:
    """What one finished query used at its peak (DuckDB's own figures)."""

    peak_memory_bytes: int = 0
    #: the most bytes its spill files held at once
    spilled_bytes: int = 0


class TaskDatabase:
    """The DuckDB database of one task attempt (see the module docstring).

    ``memory`` is bytes or ``None`` (DuckDB's default: an operator opened outside a
    task, in a unit test or on the driver); ``temp_directory`` ``None`` keeps
    DuckDB from spilling at all.
    """

    def __init__(
        self, threads: int = 1, memory: int | None = None, temp_directory: str | None = None
    ):
        self.threads = threads
        self.memory_limit = None if memory is None else max(memory, MIN_MEMORY)
        self.temp_directory = temp_directory
        self._connection: duckdb.DuckDBPyConnection | None = None
        self._lock = threading.Lock()

    def _connect(self) -> duckdb.DuckDBPyConnection:
        config: dict[str, Any] = {
            "threads": self.threads,
            # output order within one subtask is never promised; keeping it costs memory
            "preserve_insertion_order": False,
        }
        if self.memory_limit is not None:
            config["memory_limit"] = f"{self.memory_limit}B"
        if self.temp_directory is not None:
            make_private_dirs(self.temp_directory)
            config["temp_directory"] = self.temp_directory
        else:
            config["temp_directory"] = ""  # no spilling where nothing would clean up
        return duckdb.connect(":memory:", config=config)

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A new cursor on the database (connecting on first use), profiling on."""
        with self._lock:
            if self._connection is None:
                self._connection = self._connect()
            cursor = self._connection.cursor()
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

    def close(self) -> None:
        """Close the database (its spill files go with it); idempotent."""
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None
