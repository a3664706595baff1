"""Zero-column relations, ``OFFSET``, one-sentence errors and the plan-time fallback net,
each against Spark itself (issue 33).

- A step that outputs rows but no column (a ``SELECT`` without ``FROM``, a count over a
  pruned scan, a join side read for its rows only, ``WHERE false``) carries a placeholder
  column of nulls inside the engine and gives Spark's rows.
- ``OFFSET`` with and without ``LIMIT``: where Spark's order is defined (an ``ORDER BY``)
  the rows are compared in order; without one Spark skips the first rows of its own
  partitions, which no other engine reproduces, so only the number of rows is compared
  and every row must be one of the input's.
- Errors reaching the user are the engine's classes, one sentence; a fallback's reason
  is one sentence; a stage DuckDB rejects at plan time runs in Spark.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

import hybrid_shuffle as hs
from hybrid_shuffle.sparkplan.operators import OPERATORS
from hybrid_shuffle.sparkplan.relation import Rel

from .oracle import check_sql, parquet_views, rows, spark_rows, subtrees

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark(session: hs.Session, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Spark with Parquet views ``t`` (40 rows) and ``u`` (12 rows), nulls in the keys."""
    root = tmp_path_factory.mktemp("zero_columns")
    ids = list(range(40))
    t = pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "k": pa.array([None if i % 7 == 0 else i % 5 for i in ids], pa.int32()),
            "s": pa.array([f"s{i % 3}" for i in ids], pa.string()),
        }
    )
    u = pa.table(
        {
            "uid": pa.array(range(12), pa.int64()),
            "k": pa.array([None if i % 4 == 0 else i % 6 for i in range(12)], pa.int32()),
        }
    )
    return parquet_views(session.spark, root, {"t": t, "u": u})


# -- zero columns ---------------------------------------------------------------------------

CONSTANTS = [
    "SELECT 1",
    "SELECT 1 AS a, 'x' AS b, CAST(NULL AS int) AS c",
    "SELECT date '2020-01-01' + 1",
    "SELECT date_add(date '2020-02-28', 2), datediff(date '2020-03-01', date '2020-02-01')",
    "SELECT CAST('1.5' AS decimal(3,1)) * 2",
    "SELECT CAST(1 AS decimal(10,2)) / 3",
    "SELECT count(DISTINCT 3, 2)",
    "SELECT count(*)",
    "SELECT 1 WHERE false",
    "SELECT * FROM VALUES (1, 'a'), (2, 'b') AS v(x, y) WHERE false",
    "SELECT count(*) FROM VALUES (1, 'a'), (2, 'b') AS v(x, y)",
]


@pytest.mark.parametrize("query", CONSTANTS)
def test_constant_select_runs_in_the_engine(session: hs.Session, spark: Any, query: str) -> None:
    stream = check_sql(session, spark, query)
    assert subtrees(stream) == []


COUNTS = [
    "SELECT COUNT(1) FROM t WHERE false",
    "SELECT count(*) FROM t",
    "SELECT count(*), count(1) AS n FROM t WHERE id > 10",
    "SELECT count(*) FROM t CROSS JOIN u",
    "SELECT count(*) FROM t JOIN u ON t.k = u.k",
    "SELECT t.id FROM t CROSS JOIN u WHERE t.id < 3",
    "WITH a AS (SELECT 1 AS x), b AS (SELECT 2 AS y) SELECT * FROM a CROSS JOIN b",
    "WITH a AS (SELECT id FROM t), b AS (SELECT uid FROM u) SELECT count(*) FROM a, b",
    "SELECT k, count(*) FROM t GROUP BY k",
    "SELECT count(*) FROM (SELECT id FROM t UNION ALL SELECT uid FROM u)",
    "SELECT 1 FROM t LIMIT 3",
    "SELECT count(*) OVER () AS n FROM u",
    "SELECT (SELECT count(*) FROM u) AS n",
]


@pytest.mark.parametrize("query", COUNTS)
def test_rows_without_columns(session: hs.Session, spark: Any, query: str) -> None:
    stream = check_sql(session, spark, query)
    assert subtrees(stream) == []


# -- OFFSET -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "SELECT * FROM t ORDER BY id OFFSET 35",
        "SELECT * FROM t ORDER BY id LIMIT 4 OFFSET 3",
        "SELECT id, s FROM t ORDER BY s DESC, id LIMIT 5 OFFSET 30",
        "SELECT * FROM t ORDER BY id OFFSET 100",
    ],
)
def test_ordered_offset(session: hs.Session, spark: Any, query: str) -> None:
    stream = check_sql(session, spark, query, ordered=True)
    assert subtrees(stream) == []


@pytest.mark.parametrize(
    "query",
    [
        "SELECT * FROM t WHERE k > 1 OFFSET 2",
        "SELECT * FROM t LIMIT 10 OFFSET 3",
        "SELECT id FROM t OFFSET 38",
    ],
)
def test_unordered_offset_keeps_spark_count(session: hs.Session, spark: Any, query: str) -> None:
    """Without ``ORDER BY``, Spark skips the first rows of its own partition order: the
    number of rows is Spark's, and each row is one of the input's."""
    stream = session.sql(query)
    got = rows(stream.to_arrow())
    want = spark_rows(spark.sql(query))
    assert len(got) == len(want)
    every = spark_rows(spark.sql(query.split(" OFFSET")[0].split(" LIMIT")[0]))
    assert all(row in every for row in got)
    assert subtrees(stream) == []


# -- errors are one sentence ----------------------------------------------------------------


def test_spark_rejection_without_its_analysed_plan(session: hs.Session, spark: Any) -> None:
    with pytest.raises(hs.PlanError) as info:
        session.sql("SELECT nope FROM t")
    message = str(info.value)
    assert message.startswith("Spark rejects the query: [UNRESOLVED_COLUMN")
    assert "\n" not in message and "Project" not in message and "SubqueryAlias" not in message
    with pytest.raises(hs.PlanError) as parse:
        session.sql("SELEC 1")
    assert "PARSE_SYNTAX_ERROR" in str(parse.value) and "== SQL ==" not in str(parse.value)


def test_fallback_reasons_are_sentences(session: hs.Session, spark: Any) -> None:
    stream = check_sql(
        session,
        spark,
        "SELECT id, explode(array(id, k)) AS x FROM t WHERE id IN (SELECT uid FROM u) OR id > 30",
    )
    for item in subtrees(stream):
        reason = item["reason"]
        assert "{" not in reason and "\n" not in reason and len(reason) < 300


@pytest.fixture
def broken_filter() -> Iterator[None]:
    """A translation of ``FilterExec`` whose SQL DuckDB rejects (an unknown column)."""
    original = OPERATORS["FilterExec"]

    def broken(tr: Any, node: Any, stage: Any) -> Rel:
        rel = original(tr, node, stage)
        return Rel(rel.sql + " AND no_such_column > 1", rel.columns)

    OPERATORS["FilterExec"] = broken
    try:
        yield
    finally:
        OPERATORS["FilterExec"] = original


def test_stage_duckdb_rejects_runs_in_spark(
    session: hs.Session, spark: Any, broken_filter: None
) -> None:
    query = "SELECT k, count(*) AS n, max(s) AS m FROM t WHERE id > 5 GROUP BY k"
    stream = check_sql(session, spark, query)
    (only,) = subtrees(stream)
    assert only["operator"].startswith("Filter (")
    assert only["reason"].startswith("DuckDB could not plan the stage: Binder Error:")
    with pytest.raises(hs.UnsupportedPlanError, match="DuckDB could not plan the stage"):
        session.sql(query, fallback="error")


def test_dates_and_decimals_of_constants(session: hs.Session, spark: Any) -> None:
    stream = check_sql(
        session,
        spark,
        "SELECT date '2020-01-31' + 30 AS d, CAST('12.345' AS decimal(5,3)) + 1 AS x, "
        "CAST(NULL AS date) AS n",
    )
    assert stream.to_arrow().column("d").to_pylist() == [datetime.date(2020, 3, 1)]


@pytest.fixture
def failing_project() -> Iterator[None]:
    """A translation of ``ProjectExec`` that fails with an exception of its own."""
    original = OPERATORS["ProjectExec"]

    def failing(tr: Any, node: Any, stage: Any) -> Rel:
        raise KeyError("Column c1 does not exist in schema")

    OPERATORS["ProjectExec"] = failing
    try:
        yield
    finally:
        OPERATORS["ProjectExec"] = original


def test_translation_failure_runs_in_spark(
    session: hs.Session, spark: Any, failing_project: None
) -> None:
    stream = check_sql(session, spark, "SELECT id + 1 AS x, s FROM t WHERE k = 2")
    (only,) = subtrees(stream)
    assert only["operator"].startswith("Project (")
    assert only["reason"].startswith("its translation failed (KeyError:")
