"""Spark's names, the engine's columns (issue 33): results whose names repeat, attributes
output twice inside a plan (``INTERSECT ALL``/``EXCEPT ALL``'s replicated rows, a grouping
by the value counted distinctly), each against Spark itself: the same rows, and the same
``df.columns`` through ``to_arrow``, ``to_pandas`` and ``to_spark``."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import hybrid_shuffle as hs
from hybrid_shuffle.errors import PlanError

from .oracle import parquet_views, rows, same_rows, spark_rows, subtrees

pytestmark = pytest.mark.spark


def _tables() -> dict[str, pa.Table]:
    return {
        "a": pa.table({"k": pa.array([1, 2, None, 2], pa.int32()), "v": ["x", "y", "z", None]}),
        "b": pa.table({"k": pa.array([1, 3, None], pa.int32()), "w": pa.array([10, 30, 50])}),
        # duplicates and nulls for the set operations
        "s1": pa.table(
            {
                "x": pa.array([1, 1, 1, 2, None, None, 3], pa.int32()),
                "y": ["p", "p", "p", None, "q", "q", "r"],
            }
        ),
        "s2": pa.table(
            {
                "x": pa.array([1, 1, None, 2, 4], pa.int32()),
                "y": ["p", "p", "q", None, "s"],
            }
        ),
        "t1": pa.table(
            {
                "t1a": ["val1a", "val1b", "val1a", "val1c", None, "val1d"],
                "t1b": pa.array([6, 8, 16, 8, 10, None], pa.int16()),
                "t1c": pa.array([8, 16, 12, 16, None, 16], pa.int32()),
                "t1d": pa.array([10, 19, 21, 19, 25, 22], pa.int64()),
            }
        ),
        "t2": pa.table(
            {
                "t2a": ["val2a", "val1b", "val1c", "val1a", None],
                "t2b": pa.array([6, 10, 12, 16, 8], pa.int16()),
                "t2c": pa.array([12, 12, 16, 12, None], pa.int32()),
                "t2d": pa.array([14, 19, 19, 21, 25], pa.int64()),
            }
        ),
        "t3": pa.table(
            {
                "t3a": ["val3a", "val1b", "val3b", None],
                "t3b": pa.array([6, 10, 8, 8], pa.int16()),
                "t3c": pa.array([12, 12, None, 16], pa.int32()),
                "t3d": pa.array([110, 19, 719, 19], pa.int64()),
            }
        ),
    }


@pytest.fixture(scope="module")
def spark(session: hs.Session, tmp_path_factory: pytest.TempPathFactory) -> Any:
    return parquet_views(session.spark, tmp_path_factory.mktemp("sql_names"), _tables())


# -- comparing with Spark ---------------------------------------------------------------


def check(
    session: hs.Session, stream: hs.Stream, df: Any, ordered: bool = False, spark_too: bool = False
) -> pa.Table:
    """``stream``'s rows and column names are Spark's for ``df`` (through ``to_spark`` too,
    schema included, when ``spark_too``)."""
    got = stream.to_arrow()
    assert got.column_names == df.columns
    want = spark_rows(df)
    same_rows(rows(got), want, ordered)
    if spark_too:
        back = stream.to_spark()
        assert back.columns == df.columns
        assert back.schema.simpleString() == df.schema.simpleString()
        same_rows(spark_rows(back), want)
    return got


def check_sql(
    session: hs.Session, spark: Any, query: str, ordered: bool = False, spark_too: bool = False
) -> hs.Stream:
    stream = session.sql(query)
    check(session, stream, spark.sql(query), ordered, spark_too)
    return stream


# -- 1. two output columns with one name --------------------------------------------------


def test_cross_join_of_same_named_columns(session: hs.Session, spark: Any) -> None:
    stream = check_sql(session, spark, "SELECT * FROM a CROSS JOIN b", spark_too=True)
    assert list(stream.to_pandas().columns) == ["k", "v", "k", "w"]
    assert "result" in stream.explain()


@pytest.mark.parametrize(
    "query",
    [
        "SELECT a.*, b.* FROM a LEFT JOIN b USING (k)",
        "SELECT count(*), count(1) FROM a",
        "SELECT k, k, v AS K, upper(v) AS k FROM a",
        "SELECT a.k, b.k, a.k FROM a JOIN b ON a.k = b.k",
    ],
)
def test_repeated_names(session: hs.Session, spark: Any, query: str) -> None:
    check_sql(session, spark, query)


def test_dataframe_join_of_two_id_columns(session: hs.Session, spark: Any) -> None:
    left = spark.table("a").selectExpr("k AS id", "k + 1 AS k")
    right = spark.table("b").selectExpr("k AS id", "w")
    df = left.join(right, left.k == right.id)
    assert df.columns == ["id", "k", "id", "w"]
    stream = session.from_dataframe(df)
    check(session, stream, df, spark_too=True)
    assert subtrees(stream) == []


def test_write_parquet_of_repeated_names_is_refused_before_running(
    session: hs.Session, spark: Any, tmp_path: Any
) -> None:
    stream = session.sql("SELECT * FROM a CROSS JOIN b")
    with pytest.raises(PlanError, match=r"two columns named 'k'.*another name"):
        stream.write_parquet(tmp_path / "out")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    unique = session.sql("SELECT a.k AS ak, b.k AS bk FROM a CROSS JOIN b")
    unique.write_parquet(tmp_path / "ok")
    assert sorted(pq.read_table(tmp_path / "ok").column_names) == ["ak", "bk"]


def test_a_result_of_no_column(session: hs.Session, spark: Any) -> None:
    df = spark.table("a").select()
    stream = session.from_dataframe(df)
    got = stream.to_arrow()
    assert (got.column_names, got.num_rows) == ([], 4)
    back = stream.to_spark()
    assert (back.columns, back.count()) == ([], 4)


# -- 2. one attribute twice in an operator's output ---------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "SELECT * FROM s1 EXCEPT ALL SELECT * FROM s2",
        "SELECT * FROM s1 INTERSECT ALL SELECT * FROM s2",
        "SELECT x FROM s1 INTERSECT ALL SELECT x FROM s2",
        "SELECT y, x FROM s2 EXCEPT ALL SELECT y, x FROM s1",
    ],
)
def test_intersect_and_except_all_run_in_the_engine(
    session: hs.Session, spark: Any, query: str
) -> None:
    stream = check_sql(session, spark, query)
    assert subtrees(stream) == []


def test_cube_ordered_by_grouping(session: hs.Session, spark: Any) -> None:
    check_sql(
        session,
        spark,
        """SELECT x, y, count(*) AS n, grouping_id() AS g FROM s1 GROUP BY CUBE(x, y)
           ORDER BY GROUPING(x), GROUPING(y), x, y, g""",
        ordered=True,
    )


def test_grouping_by_the_value_counted_distinctly(session: hs.Session, spark: Any) -> None:
    check_sql(
        session,
        spark,
        "SELECT x, count(DISTINCT x) AS n, count(DISTINCT y) AS m FROM s1 GROUP BY x",
    )


# -- 3. natural join with a correlated IN subquery -----------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "SELECT * FROM t1 NATURAL LEFT JOIN t3 WHERE t1a IN (SELECT t2a FROM t2 WHERE t1d = t2d)",
        """SELECT count(DISTINCT t1a), t1b, t3a, t3b, t3c FROM t1 NATURAL LEFT JOIN t3
           WHERE t1a IN (SELECT t2a FROM t2 WHERE t1d = t2d) AND t1b > t3b
           GROUP BY t1a, t1b, t3a, t3b, t3c""",
        """SELECT t1a, t1b FROM t1 NATURAL JOIN t3
           WHERE t1a IN (SELECT t2a FROM t2 WHERE t1d = t2d) AND t1b = t3b""",
    ],
)
def test_natural_join_with_in_subquery(session: hs.Session, spark: Any, query: str) -> None:
    check_sql(session, spark, query)


# -- 4. map and interval results -------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "SELECT map(1, 2), 'str' UNION ALL SELECT map(1, 2), 'str'",
        "SELECT k, map(k, v) AS m FROM a WHERE k IS NOT NULL",
        "SELECT interval 1 day",
        "SELECT date'2020-01-01' - date'2019-01-01'",
        "SELECT k, interval 3 hours 2 seconds * k AS h, -interval '1 2:03:04.5' day to second AS s "
        "FROM a",
        "SELECT a.k, interval 1 day AS d, b.w FROM a JOIN b ON a.k = b.k",
    ],
)
def test_map_and_day_time_interval_results(session: hs.Session, spark: Any, query: str) -> None:
    stream = session.sql(query)
    got = check(session, stream, spark.sql(query))
    want = pa.Table.from_batches(spark.sql(query)._collect_as_arrow())
    # duration[us], map<..> as Spark's own (a map's value nullability aside)
    assert [str(t) for t in got.schema.types] == [str(t) for t in want.schema.types]


def test_day_time_interval_back_to_spark(session: hs.Session, spark: Any) -> None:
    check_sql(session, spark, "SELECT k, interval 1 day * k AS d FROM a", spark_too=True)


def test_year_month_interval_as_months(session: hs.Session, spark: Any) -> None:
    """PySpark 3.5 collects a year-month interval as its number of months."""
    query = "SELECT interval '1-2' year to month AS ym, interval '-3' month AS m"
    got = session.sql(query).to_arrow()
    assert got.column_names == ["ym", "m"]
    assert rows(got) == [tuple(r) for r in spark.sql(query).collect()] == [(14, -3)]


def test_calendar_interval_as_spark_prints_it(session: hs.Session, spark: Any) -> None:
    """PySpark cannot collect a calendar interval at all: the engine gives Spark's string."""
    got = session.sql("SELECT make_interval(1, 2, 3, 4, 5, 6, 7.5) AS i, 1 AS n").to_arrow()
    want = spark.sql("SELECT CAST(make_interval(1, 2, 3, 4, 5, 6, 7.5) AS STRING) AS i, 1 AS n")
    assert got.column_names == ["i", "n"]
    assert rows(got) == spark_rows(want)
