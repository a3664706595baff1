"""One DuckDB database per task attempt: its threads, its memory, its spill directory.

A Ray executor runs several tasks in one process, and DuckDB's default is one
thread per core and 80% of the machine's memory *per database*: eight tasks
would each start two threads on a 2-core machine and each believe it owns the
RAM.  So every task attempt gets a database of its own, opened on first use
(a task whose operators all run on Arrow never opens one), with

- ``threads`` = ``operators.threads`` (one slot is one core: 1 by default);
- ``memory_limit`` = the task's ``operators.memory`` (the sum of its DuckDB
  operators' shares), but at least ``MIN_MEMORY``: below about 48 MiB DuckDB's
  hash aggregate cannot even start on many keys ("failed to allocate 8 MiB"), so
  a smaller budget is raised to the floor rather than failing (architecture
  §11 says so);
- ``temp_directory`` = a directory private to the attempt (0700), created on
  connect and removed by the task however it ends, after ``close``.

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
