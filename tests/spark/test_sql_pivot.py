"""``PIVOT`` (SQL and ``DataFrame.pivot``) in the engine against Spark: its second
aggregate's ``PivotFirst`` runs in the engine for integral, boolean and string pivot
columns (rows, names and schema equal to Spark's, nothing falls back), and falls back,
still equal, where Spark's lookup of a pivot value could differ (floating point, a
string value named ``null``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import hybrid_shuffle as hs

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
    path = Path(tmp_path_factory.mktemp("pivot")) / "pv.parquet"
    pq.write_table(_table(), path)
    spark = session.spark
    spark.read.parquet(str(path)).createOrReplaceTempView("pv")
    return spark


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    rows = [tuple(r.values()) for r in table.to_pylist()]
    return sorted(rows, key=lambda row: tuple((v is None, str(v)) for v in row))


def _check(session: hs.Session, stream: hs.Stream, df: Any, in_engine: bool) -> None:
    """``stream`` equals Spark's ``df`` (rows, names, schema); with ``in_engine`` nothing
    fell back, else something did."""
    got = stream.to_arrow()
    want = pa.Table.from_batches(df._collect_as_arrow())
    assert got.column_names == df.columns
    assert _rows(got) == _rows(want)
    back = session.bridge.to_dataframe(got)
    assert back.schema.simpleString() == df.schema.simpleString()
    fell_back = list(stream.explain_data()["spark_subtrees"])
    assert (fell_back == []) == in_engine, fell_back


def _sql(session: hs.Session, spark: Any, query: str, in_engine: bool = True) -> None:
    _check(session, session.sql(query), spark.sql(query), in_engine)


def _frame(session: hs.Session, df: Any, in_engine: bool = True) -> None:
    _check(session, session.from_dataframe(df), df, in_engine)


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
