"""``PIVOT`` (SQL and ``DataFrame.pivot``) in the engine against Spark: its second
aggregate's ``PivotFirst`` runs in the engine for integral, boolean and string pivot
columns (rows, names and schema equal to Spark's, nothing falls back), and falls back,
still equal, where Spark's lookup of a pivot value could differ (floating point, a
string value named ``null``)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import hybrid_shuffle as hs

from .oracle import check, check_sql, exact_value, parquet_views

pytestmark = pytest.mark.spark


def _table() -> pa.Table:
    return pa.table(
        {
            "g": pa.array(["x", "x", "y", "y", "z", "x", "y", "z", None, "x", "z", "y"]),
            "p": pa.array([1, 2, 1, None, 3, 1, 2, 2, 1, None, 3, 3], pa.int32()),
            "c": pa.array(["a", "b", "a", "b", "it's", "a", "c", "b", "a", "c", "c", "a"]),
            "v": pa.array([10, None, 5, 7, 3, 2, None, 8, 1, 4, None, 6], pa.int64()),
            "f": pa.array([1.5, 0.0, -0.0, 1.5, None, 2.0, 0.0, 1.5, 2.0, -0.0, 1.5, 0.0]),
            "t": pa.array([1, 0, None, 1, 1, 0, 1, None, 0, 1, 0, 1], pa.int8()).cast(pa.bool_()),
        }
    )  # fmt: skip


@pytest.fixture(scope="module")
def spark(session: hs.Session, tmp_path_factory: pytest.TempPathFactory) -> Any:
    return parquet_views(session.spark, tmp_path_factory.mktemp("pivot"), {"pv": _table()})


def _sql(session: hs.Session, spark: Any, query: str, in_engine: bool = True) -> None:
    """``query`` equals Spark's (rows, names, schema); with ``in_engine`` nothing fell
    back, else something did."""
    check_sql(session, spark, query, in_engine=in_engine, value=exact_value)


def _frame(session: hs.Session, df: Any, in_engine: bool = True) -> None:
    check(session, session.from_dataframe(df), df, in_engine=in_engine, value=exact_value)


@pytest.mark.parametrize(
    "query",
    [
        # one aggregate; 9 has no rows, null matches the rows of a null p
        "SELECT * FROM (SELECT g, p, v FROM pv) PIVOT (sum(v) FOR p IN (1, 2, 9, null))",
        # two aggregates
        "SELECT * FROM (SELECT g, p, v FROM pv) "
        "PIVOT (sum(v) AS s, count(v) AS n FOR p IN (1, 2, 3))",
        # values null in whole groups, an average (double slots), aliased values
        "SELECT * FROM (SELECT g, p, v FROM pv) "
        "PIVOT (max(v) AS m, avg(v) AS a FOR p IN (2 AS two, 3 AS three))",
        # a string pivot column (a quote in a value), grouped by two columns
        "SELECT * FROM (SELECT g, t, c, v FROM pv) PIVOT (min(v) FOR c IN ('a', 'it''s', 'q'))",
        # a boolean pivot column, no grouping columns left
        "SELECT * FROM (SELECT t, v FROM pv) PIVOT (sum(v) FOR t IN (true, false, null))",
    ],
)
def test_sql_pivot(session: hs.Session, spark: Any, query: str) -> None:
    _sql(session, spark, query)


def test_dataframe_pivot(session: hs.Session, spark: Any) -> None:
    pv = spark.table("pv")
    _frame(session, pv.groupBy("g").pivot("p", [1, 3, 5]).agg({"v": "max"}))
    _frame(session, pv.groupBy("g").pivot("p").sum("v"))  # the values Spark found: null too
    _frame(session, pv.groupBy("g").pivot("c", ["a", "b"]).count())
    _frame(session, pv.groupBy("g", "t").pivot("c").agg({"v": "sum"}))


def test_pivot_falls_back(session: hs.Session, spark: Any) -> None:
    """Where the engine cannot tell Spark's pivot value lookup, the aggregate runs in
    Spark: floating point (-0.0 and 0.0 are different values to Spark's lookup) and a
    string value named null (the name does not tell it from a null)."""
    _sql(
        session,
        spark,
        "SELECT * FROM (SELECT g, f, v FROM pv) PIVOT (sum(v) FOR f IN (0.0D, -0.0D, 1.5D))",
        in_engine=False,
    )
    _sql(
        session,
        spark,
        "SELECT * FROM (SELECT g, c, v FROM pv) PIVOT (sum(v) FOR c IN ('a', 'null'))",
        in_engine=False,
    )
