"""``Stream.sql`` on a real local Ray: every kind of query in all four exchange modes,
equal to DuckDB on the whole input; a bad query fails at plan time, a query failing on
the data fails the job once, without retries."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest

import hybrid_shuffle as hs

from .conftest import assert_closed_cleanly, assert_no_leaks

MODES = ["pipelined", "blocking", "hybrid-selective", "hybrid-full"]
ROWS = 6_000

PROJECTION = "SELECT id, k, v * 2 AS w, upper(k) AS u FROM input"
FILTER = "SELECT * FROM input WHERE v % 3 = 0 AND k IS NOT NULL"
GROUP_BY = "SELECT k, sum(v) AS s, count(*) AS n, max(x) AS m FROM input GROUP BY k"
WINDOW = "SELECT k, v, id, row_number() OVER (PARTITION BY k ORDER BY v, id) AS r FROM input"


@pytest.fixture(scope="module")
def session(local_ray: None) -> Iterator[hs.Session]:
    config = {
        "parallelism": 2,
        "shuffle": {"buffer_size": "64 KiB", "wait_timeout": 30},
        "failover": {"max_attempts": 3, "backoff": "50 ms"},
    }
    with hs.Session(config, slots=4) as s:
        yield s
    assert_closed_cleanly(s)


@pytest.fixture(scope="module")
def data() -> pa.Table:
    rng = np.random.default_rng(7)
    keys = np.array([f"k{i}" for i in range(50)])[rng.integers(0, 50, ROWS)]
    return pa.table(
        {
            "id": np.arange(ROWS, dtype=np.int64),
            "k": pa.array(keys, mask=rng.random(ROWS) < 0.02),
            "v": pa.array(rng.integers(0, 1_000, ROWS), mask=rng.random(ROWS) < 0.02),
            "x": rng.random(ROWS),
        }
    )


def pieces(data: pa.Table) -> list[pa.Table]:
    """Several batches per source subtask, so per-batch queries see more than one."""
    return [data.slice(i, 1_000) for i in range(0, data.num_rows, 1_000)]


def whole(query: str, data: pa.Table) -> pa.Table:
    """The oracle: DuckDB on the whole input."""
    connection = duckdb.connect(config={"threads": 1})
    try:
        connection.register("input", data)
        return connection.execute(query).to_arrow_table()
    finally:
        connection.close()


def assert_same_rows(got: pa.Table, expected: pa.Table) -> None:
    assert got.schema == expected.schema
    order = [(n, "ascending") for n in expected.column_names]
    assert got.sort_by(order).equals(expected.sort_by(order))


def run(session: hs.Session, data: pa.Table, mode: str, query: str, keyed: bool) -> hs.JobResult:
    job = session.job(f"sql-{mode}")
    stream = job.from_arrow(pieces(data), name="rows", parallelism=2)
    if keyed:
        result = stream.key_by("k", edge="in", mode=mode).sql(query, name="q")
    else:
        result = stream.rebalance(edge="in", mode=mode).sql(query, name="q")
    return result.collect()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "query, keyed",
    [(PROJECTION, False), (FILTER, False), (GROUP_BY, True), (WINDOW, True)],
    ids=["projection", "filter", "group-by", "window"],
)
def test_sql_in_every_mode_equals_duckdb_on_the_whole_input(
    session: hs.Session, data: pa.Table, mode: str, query: str, keyed: bool
) -> None:
    result = run(session, data, mode, query, keyed)
    assert_same_rows(result.table, whole(query, data))
    assert result.edges["in"].mode == mode
    assert_no_leaks(session)


def test_explain_says_how_each_query_runs_and_the_rule_makes_a_blocking_ones_input_batch(
    session: hs.Session, data: pa.Table
) -> None:
    job = session.job("sql-explain")
    rows = job.from_arrow(data, name="rows")
    per_row = rows.sql(FILTER, name="clean")
    text = per_row.key_by("k", edge="by_k").sql(GROUP_BY, name="totals").explain()
    assert "clean (sql, per batch)" in text
    assert "totals (sql, at end of input)" in text
    assert "mode blocking (output-on-eof)" in text


def test_a_grouping_query_reports_duckdbs_peak_memory(session: hs.Session, data: pa.Table) -> None:
    result = run(session, data, "blocking", GROUP_BY, keyed=True)
    assert result.vertices["q"].peak_memory_bytes > 0


def count_calls(marker: Path) -> Callable[[pa.Table], pa.Table]:
    """A ``map_batches`` function that appends a line to ``marker`` per batch it sees."""
    path = str(marker)

    def fn(table: pa.Table) -> pa.Table:
        with open(path, "a") as f:
            f.write("batch\n")
        return table

    return fn


def test_a_bad_query_names_the_vertex_at_plan_time(session: hs.Session, data: pa.Table) -> None:
    job = session.job("sql-bad")
    stream = job.from_arrow(data, name="rows")
    bad = stream.key_by("k").sql("SELECT k, sum(nope) AS s FROM input GROUP BY k", name="bad")
    with pytest.raises(hs.PlanError) as err:
        bad.explain()
    assert str(err.value).startswith(
        "sql 'bad': DuckDB cannot run the query: Binder Error: Referenced column \"nope\""
    )
    with pytest.raises(hs.PlanError, match="sql 'bad'"):
        bad.collect()
    assert_no_leaks(session)


def test_a_query_after_an_opaque_function_is_bound_on_its_first_batch(
    session: hs.Session, data: pa.Table
) -> None:
    """``map_batches`` hides the schema from the planner: the query is bound as it runs,
    and planned conservatively (its input edge batch) meanwhile."""
    job = session.job("sql-late")
    stream = job.from_arrow(pieces(data), name="rows", parallelism=2).map_batches(lambda t: t)
    result = stream.key_by("k", edge="in").sql(GROUP_BY, name="q").collect()
    assert_same_rows(result.table, whole(GROUP_BY, data))
    assert result.edges["in"].mode_origin == "output-on-eof"


def test_a_query_failing_on_the_data_fails_the_job_once_without_retries(
    session: hs.Session, tmp_path: Path
) -> None:
    marker = tmp_path / "calls"
    job = session.job("sql-cast")
    table = pa.table({"k": ["1", "2", "three", "4"]})
    stream = job.from_arrow(table, name="rows", parallelism=1)
    counted = stream.map_batches(count_calls(marker), name="seen")
    casts = counted.sql("SELECT CAST(k AS INTEGER) AS i FROM input", name="casts")
    with pytest.raises(hs.JobFailedError) as err:
        casts.collect()
    assert isinstance(err.value, hs.QueryFailedError)
    assert err.value.attempts == 1  # deterministic: not retried (failover.max_attempts)
    message = str(err.value)
    assert "sql 'casts': DuckDB failed on the data: Conversion Error" in message
    assert "three" in message
    # its task (rows->seen->casts) ran once: a retry would have called ``seen`` again
    assert marker.read_text().splitlines() == ["batch"]
    assert_no_leaks(session)
