"""The process's one DuckDB for plan-time work: binding queries on empty inputs
(``operators.sql.bind`` and ``rejection``), reading Parquet footers
(``sources.duck_scan``).

Opening a DuckDB database costs 13-40 ms, and translating one Spark query binds
several stages (the translator's safety net, then the planner's ``output_schema``):
about half of a translation's time went into opening databases.  A cursor of one
database costs microseconds.  What a cursor registers (``input``, ``input1``..) is its
own: another cursor of the same database does not see it, so concurrent binds (the
driver's, or an executor's tasks binding on their first batch) do not meet.  The
database holds no data (inputs are empty tables), hence its small memory limit;
one thread, as nothing it runs is worth more.  It keeps the Parquet footers it read
(``duck.database.PARQUET_METADATA_CACHE``): checking how DuckDB reads a new source's
columns (``sources.duck_scan``) parsed TPC-H's ``lineitem`` footer at SF10 (1 MiB) each
time, 11 ms, against 0.4 ms kept.
"""

from __future__ import annotations

import threading

import duckdb

from hybrid_shuffle.operators.duck.database import PARQUET_METADATA_CACHE

__all__ = ["planning_cursor"]

_DATABASE: duckdb.DuckDBPyConnection | None = None
_LOCK = threading.Lock()


def planning_cursor() -> duckdb.DuckDBPyConnection:
    """A new cursor of the process's planning database (the caller closes it); DuckDB's
    replacement scans off, so a table name never resolves to a Python variable of the
    caller's frame."""
    global _DATABASE
    with _LOCK:
        if _DATABASE is None:
            _DATABASE = duckdb.connect(":memory:", config={"threads": 1, "memory_limit": "256MB"})
            _DATABASE.execute(PARQUET_METADATA_CACHE)
        cursor = _DATABASE.cursor()
    cursor.execute("SET python_enable_replacements = false")
    return cursor
