"""Inputs staged in DuckDB temp tables (``StagedInputs``): batches are held and written
in few statements, and a query over the tables sees every row staged, whatever the
bound on what is held and however the batches' schemas vary.

Plain DuckDB and Arrow, no Ray: the helper is what the ``sql`` operator and the join
stage their inputs with.
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pyarrow as pa
import pytest

from hybrid_shuffle.errors import QueryFailedError
from hybrid_shuffle.operators.duck.staging import StagedInputs, hold_bytes

MiB = 1 << 20


class CountingCursor:
    """A DuckDB connection that counts the statements run on it."""

    def __init__(self) -> None:
        self.connection = duckdb.connect()
        self.statements: list[str] = []

    def __call__(self) -> CountingCursor:
        return self

    def execute(self, sql: str) -> duckdb.DuckDBPyConnection:
        self.statements.append(sql)
        return self.connection.execute(sql)

    def register(self, name: str, table: pa.Table) -> None:
        self.connection.register(name, table)

    def unregister(self, name: str) -> None:
        self.connection.unregister(name)


@pytest.fixture
def cursor() -> Iterator[CountingCursor]:
    c = CountingCursor()
    yield c
    c.connection.close()


def batches(n: int, rows: int = 1000) -> list[pa.Table]:
    return [
        pa.table({"k": pa.array(range(i * rows, (i + 1) * rows), pa.int64())}) for i in range(n)
    ]


def test_held_batches_are_written_in_one_statement_when_the_query_runs(cursor):
    staged = StagedInputs(cursor, ["a", "b"], "stage_1", hold_bytes=MiB)
    for table in batches(20):
        staged.stage(table, 0)
    staged.stage(batches(1)[0], 1)
    assert cursor.statements == []  # nothing written while held
    rows = staged.execute("SELECT count(*), sum(k) FROM a").fetchone()
    assert rows == (20_000, sum(range(20_000)))
    writes = [s for s in cursor.statements if s.startswith(("CREATE", "INSERT"))]
    assert len(writes) == 2  # one per input


def test_passing_the_bound_writes_what_is_held_and_every_row_is_kept(cursor):
    table = batches(1)[0]
    staged = StagedInputs(cursor, ["a"], "stage_1", hold_bytes=3 * table.nbytes)
    for t in batches(10):
        staged.stage(t, 0)
    assert len(cursor.statements) == 2  # after the 4th and the 8th batch
    assert staged.execute("SELECT count(*), count(DISTINCT k) FROM a").fetchone() == (
        10_000,
        10_000,
    )


def test_a_query_run_beside_the_helper_sees_every_row_after_flush(cursor):
    staged = StagedInputs(cursor, ["a"], "stage_1", hold_bytes=MiB)
    for t in batches(5):
        staged.stage(t, 0)
    staged.flush()
    assert cursor.connection.execute("SELECT count(*) FROM a").fetchone() == (5000,)


def test_batches_whose_schemas_differ_are_written_in_runs(cursor):
    staged = StagedInputs(cursor, ["a"], "stage_1", hold_bytes=MiB)
    staged.stage(pa.table({"k": pa.array([1, 2], pa.int64())}), 0)
    staged.stage(pa.table({"k": pa.array([3], pa.int32())}), 0)
    staged.stage(pa.table({"k": pa.array([4], pa.int32())}), 0)
    assert staged.execute("SELECT list(k ORDER BY k) FROM a").fetchone() == ([1, 2, 3, 4],)
    assert sum(s.startswith(("CREATE", "INSERT")) for s in cursor.statements) == 2


def test_an_input_with_no_batch_is_an_empty_table_of_its_columns(cursor):
    staged = StagedInputs(cursor, ["a", "b"], "stage_1", hold_bytes=MiB)
    staged.stage(batches(1)[0], 0)
    staged.stage_empty(pa.schema([("v", pa.string())]), 1)
    staged.stage_empty(pa.schema([("other", pa.string())]), 0)  # a is staged: no change
    assert 1 in staged and staged
    counts = staged.execute("SELECT (SELECT count(*) FROM a), (SELECT count(*) FROM b)")
    assert counts.fetchone() == (1000, 0)
    assert [d[0] for d in cursor.connection.execute("SELECT * FROM a").description] == ["k"]


def test_a_dropped_input_loses_its_table_and_its_held_batches(cursor):
    staged = StagedInputs(cursor, ["a", "b"], "stage_1", hold_bytes=MiB)
    staged.stage(batches(1)[0], 0)
    staged.flush()
    staged.stage(batches(1)[0], 0)
    staged.stage(batches(1)[0], 1)
    staged.drop(0)
    staged.drop(1)
    assert 0 not in staged and not staged
    staged.flush()  # nothing held is written after the drop
    tables = cursor.connection.execute("SELECT count(*) FROM duckdb_tables()").fetchone()
    assert tables == (0,)


def test_a_statement_duckdb_rejects_is_a_query_failed_error(cursor):
    staged = StagedInputs(cursor, ["a"], "stage_1", hold_bytes=MiB)
    staged.stage(batches(1)[0], 0)
    with pytest.raises(QueryFailedError, match="stage_1"):
        staged.execute("SELECT no_such_column FROM a")


def test_the_held_bound_is_a_sixteenth_of_the_memory_at_most_32_mib():
    assert hold_bytes(64 * MiB) == 4 * MiB
    assert hold_bytes(512 * MiB) == 32 * MiB
    assert hold_bytes(1 << 40) == 32 * MiB
