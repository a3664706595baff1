"""A task's DuckDB (``TaskDatabase``): exactly ``operators.threads`` threads, three
quarters of the task's memory as its limit (the rest headroom), and a private temp
directory that goes with the task.

DuckDB's default is one thread per core and 80% of the RAM in every database: a task
that got it would run as many threads as the machine has cores beside every other
task of its executor.  The last test runs a real task (``run_task``) with no
exchange: a source split into a DuckDB aggregate and an operator that reads the
settings its task's database has.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from hybrid_shuffle.operators import HashAggregate, SortPartition
from hybrid_shuffle.operators.base import Operator
from hybrid_shuffle.operators.context import OperatorContext
from hybrid_shuffle.operators.duck.aggregate import DuckAggregate
from hybrid_shuffle.operators.duck.database import DatabasePool, TaskDatabase, duckdb_memory_limit
from hybrid_shuffle.runtime.task import TaskDeployment, TaskReport, TaskState, run_task

MiB = 1 << 20


def mode(path: Path | str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("threads", [1, 2])
def test_the_database_runs_the_threads_memory_and_temp_directory_it_was_given(
    threads: int, tmp_path: Path
) -> None:
    temp = tmp_path / "task" / "duckdb"
    database = TaskDatabase(threads, 200 * MiB, str(temp))
    try:
        assert database.setting("threads") == threads
        assert database.setting("memory_limit") == "150.0 MiB"
        assert database.setting("temp_directory") == str(temp)
        # what an operator's own cursor sees is the database's
        cursor = database.cursor()
        assert cursor.execute("SELECT current_setting('threads')").fetchone() == (threads,)
        cursor.close()
        assert mode(temp) == 0o700 and mode(temp.parent) == 0o700
    finally:
        database.close()


def test_duckdb_gets_three_quarters_of_the_budget_and_no_spill_directory_without_one() -> None:
    """The quarter left is headroom for what DuckDB holds past its limit, so a task
    stays within 1.5x its budget (``duck/database.py``, "The headroom")."""
    database = TaskDatabase(1, 128 * MiB, None)
    try:
        assert database.memory_limit == duckdb_memory_limit(128 * MiB) == 96 * MiB
        assert database.setting("memory_limit") == "96.0 MiB"
        assert database.setting("temp_directory") == ""  # nowhere to spill: no spilling
    finally:
        database.close()


def test_the_database_connects_on_first_use_only_and_closes_idempotently(
    tmp_path: Path,
) -> None:
    temp = tmp_path / "duckdb"
    database = TaskDatabase(1, 64 * MiB, str(temp))
    assert not temp.exists()  # a task whose operators all run on Arrow opens none
    assert database.setting("threads") == 1
    assert temp.is_dir()
    database.close()
    database.close()


class SettingsProbe(Operator):
    """Swallows its input; its ``finish`` emits one row of the settings its task's
    database has (read in ``open``, as an operator of the task sees them)."""

    uses_memory = True  # so the task gives it a context, with the task's database
    name = "probe"

    def open(self, context: OperatorContext | None = None) -> None:
        assert context is not None
        self.context = context
        database = context.database
        self.database = database
        self.seen: dict[str, Any] = {
            name: database.setting(name) for name in ("threads", "memory_limit", "temp_directory")
        }
        self.seen["mode"] = mode(self.seen["temp_directory"])

    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        return ()

    def finish(self) -> Iterable[pa.Table]:
        return [pa.table({k: [v] for k, v in self.seen.items()})]


class NoExchanges:
    """The shuffle environment of a task with no input gate and no output partition."""

    def create_result_partition_writers(
        self, partitions: Sequence[Any], cancelled: threading.Event
    ) -> list[Any]:
        return []

    def create_input_gates(self, inputs: Sequence[Any]) -> list[Any]:
        return []


@pytest.mark.parametrize("threads", [1, 2])
def test_a_tasks_operators_share_its_database_and_its_directory_goes_with_it(
    threads: int, tmp_path: Path
) -> None:
    rng = np.random.default_rng(4)
    # string keys: never grouped by the dense reduction, so the aggregate opens DuckDB
    keys = pa.array(rng.integers(0, 1000, 10_000)).cast(pa.string())
    data = pa.table({"k": keys, "v": rng.random(10_000)})
    probe = SettingsProbe()
    deployment = TaskDeployment(
        "job",
        "grouped",
        0,
        0,
        [HashAggregate(["k"], {"v": "sum"}, "grouped"), probe],
        [],
        [],
        source_refs=[data],
        operator_memory=128 * MiB,
        threads=threads,
    )
    spill = tmp_path / "spill"
    report = run_task(deployment, NoExchanges(), threading.Event(), 0, lambda r, t: r, str(spill))  # type: ignore[arg-type]
    assert report.state == TaskState.FINISHED, report.failure
    assert isinstance(deployment.operators[0], DuckAggregate)  # it ran on DuckDB
    assert report.rows_out == 1
    temp = probe.seen["temp_directory"]
    assert probe.seen["threads"] == threads
    assert probe.seen["memory_limit"] == "96.0 MiB"  # three quarters of the task's budget
    assert temp.startswith(str(spill / "operators")) and probe.seen["mode"] == 0o700
    assert not os.path.exists(temp)  # removed with the task's directory
    assert os.listdir(spill / "operators") == []
    assert probe.database._connection is None  # the task closed its database
    # the aggregate's query thread did the grouping: its CPU is in the operator's metrics
    # and in the task's (which counts the task's own thread besides)
    query_cpu = report.operators[0].query_cpu_seconds
    assert query_cpu > 0
    assert report.cpu_seconds >= query_cpu


# -- the executor's pool of databases ------------------------------------------------------


def test_a_finished_tasks_database_is_reused_with_the_next_tasks_settings(
    tmp_path: Path,
) -> None:
    pool = DatabasePool()
    first = TaskDatabase(2, 100 * MiB, str(tmp_path / "a" / "duckdb"), pool)
    cursor = first.cursor()
    cursor.register("input", pa.table({"x": [1, 2, 3]}))
    cursor.execute("CREATE TEMP TABLE kept AS SELECT * FROM input")
    opened = first._connection
    first.close()  # the cursor is closed with it, its view and TEMP table gone
    second = TaskDatabase(1, 140 * MiB, str(tmp_path / "b" / "duckdb"), pool)
    try:
        assert second.setting("threads") == 1
        assert second.setting("memory_limit") == "105.0 MiB"
        assert second.setting("temp_directory") == str(tmp_path / "b" / "duckdb")
        assert second._connection is opened  # the same database, not a new one
        fresh = second.cursor()
        with pytest.raises(duckdb.CatalogException):
            fresh.execute("SELECT * FROM kept")
        with pytest.raises(duckdb.CatalogException):
            fresh.execute("SELECT * FROM input")
    finally:
        second.close()
        pool.close()


def test_a_reused_database_keeps_each_tasks_limit_whether_it_changed_or_not(
    tmp_path: Path,
) -> None:
    """Only the settings that differ from the database's last task are set again; the
    figures in force are always the task's own."""
    pool = DatabasePool()
    limits = [100 * MiB, 100 * MiB, None, None, 140 * MiB]
    opened = set()
    try:
        for i, memory in enumerate(limits):
            database = TaskDatabase(1, memory, str(tmp_path / str(i) / "duckdb"), pool)
            fresh = TaskDatabase(1, memory, None)  # a database of its own: the figure wanted
            try:
                assert database.setting("memory_limit") == fresh.setting("memory_limit")
                assert database.setting("threads") == 1
                opened.add(id(database._connection))
            finally:
                database.close()
                fresh.close()
    finally:
        pool.close()
    assert len(opened) == 1  # one database, taken from the pool by every later task


def test_a_database_that_spilled_or_kept_a_table_or_failed_is_closed_not_reused(
    tmp_path: Path,
) -> None:
    pool = DatabasePool()
    spilled = TaskDatabase(1, 64 * MiB, str(tmp_path / "s" / "duckdb"), pool)
    cursor = spilled.cursor()  # sorting ~80 MB of rows in 64 MiB writes temp files
    cursor.execute(
        "SELECT count(*) FROM (SELECT i, i * 2 AS j FROM range(5000000) t(i) ORDER BY random())"
    ).fetchall()
    assert TaskDatabase.profile(cursor).spilled_bytes > 0
    spilled.close()
    kept_table = TaskDatabase(1, 64 * MiB, None, pool)
    kept_table.cursor().execute("CREATE TABLE t AS SELECT 1 AS x")
    kept_table.close()
    failed = TaskDatabase(1, 64 * MiB, None, pool)
    failed.cursor()
    failed.close(reuse=False)
    assert pool.take() is None  # none of the three was kept
    pool.close()


def test_a_closed_pool_keeps_nothing() -> None:
    pool = DatabasePool()
    database = TaskDatabase(1, 64 * MiB, None, pool)
    database.cursor()
    pool.close()
    database.close()
    assert pool.take() is None


def _run(
    data: pa.Table, memory: int, spill: Path, pool: DatabasePool, operator: Operator
) -> TaskReport:
    """A task running ``operator`` over ``data`` in ``memory`` with no exchange, its
    database from ``pool``."""
    deployment = TaskDeployment(
        "job",
        operator.name,
        0,
        0,
        [operator],
        [],
        [],
        source_refs=[data],
        operator_memory=memory,
    )
    env: Any = NoExchanges()
    return run_task(deployment, env, threading.Event(), 0, lambda r, t: r, str(spill), pool)


def _held_hand_backs(pool: DatabasePool) -> threading.Event:
    """Give the pool an idle database (the task takes it at once), then queue a hand-back
    that waits for the returned event, so the pool's later hand-backs happen only once
    it is set (a phase gate, no timer)."""
    settings = TaskDatabase(1)._settings
    pool.give(duckdb.connect(), settings)
    go = threading.Event()
    pool.give_later(duckdb.connect(), settings, [], lambda: go.wait(30))
    return go


def test_a_finished_task_reports_before_its_database_goes_back_and_its_directory_then(
    tmp_path: Path,
) -> None:
    """Handing the database back (closing its cursors, checking it) is off the report's
    path; the next task that takes a database waits for it and gets this one."""
    pool = DatabasePool()
    go = _held_hand_backs(pool)
    data = pa.table({"k": pa.array(np.arange(10_000)[::-1]).cast(pa.string())})  # on DuckDB
    spill = tmp_path / "spill"
    try:
        report = _run(data, 128 * MiB, spill, pool, HashAggregate(["k"], {"k": "count"}, "g"))
        assert report.state == TaskState.FINISHED, report.failure
        assert len(os.listdir(spill / "operators")) == 1  # not yet: its hand-back waits
        go.set()
        assert pool.settle(30)
        assert os.listdir(spill / "operators") == []
        # kept for the next tasks: the task's database and the one that held the thread
        assert pool.take() is not None and pool.take() is not None
    finally:
        go.set()
        pool.close()


def test_a_task_that_spilled_closes_its_database_and_removes_its_files_before_it_reports(
    tmp_path: Path,
) -> None:
    pool = DatabasePool()
    go = _held_hand_backs(pool)
    rng = np.random.default_rng(5)
    data = pa.table({"k": rng.random(5_000_000), "v": np.arange(5_000_000)})
    spill = tmp_path / "spill"
    try:
        # sorting 80 MB of rows in 64 MiB: past half of it the sort runs on DuckDB, which spills
        report = _run(data, 64 * MiB, spill, pool, SortPartition(["k"], False, "sorted"))
        assert report.state == TaskState.FINISHED, report.failure
        assert report.operators[0].spilled_bytes > 0
        assert os.listdir(spill / "operators") == []  # while the pool's thread is held
    finally:
        go.set()
        pool.close()
    assert pool.take() is None
