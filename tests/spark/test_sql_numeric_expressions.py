"""Float grouping and join keys (``NormalizeNaNAndZero``), bitwise operators and array
functions in the engine against Spark: the same rows and schema, and no fallback."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import hybrid_shuffle as hs

from . import oracle
from .oracle import exact_value, parquet_views, rows, same_rows, spark_rows

pytestmark = pytest.mark.spark

_NAN = float("nan")


def _tables() -> dict[str, pa.Table]:
    floats = [_NAN, -0.0, 0.0, None, 1.5, -_NAN, 0.0, -0.0, 1.5, None, 2.0, _NAN]
    ints = [0, -1, 7, None, 2147483647, -2147483648, 12, -12, 5, 1, 3, None]
    longs = [0, -1, 9223372036854775807, -9223372036854775808, None, 1, 40, -40, 3, 8, 5, 2]
    arrays: list[list[int | None] | None] = [
        [1, 2, 3], [], None, [None, 2], [5], [2, None, 7], [4, 4], [0], None, [1, 2], [9], [3],
    ]  # fmt: skip
    n = len(floats)
    return {
        "nums": pa.table(
            {
                "id": pa.array(range(n), pa.int32()),
                "f": pa.array(floats, pa.float64()),
                "r": pa.array([None if v is None else v for v in floats], pa.float32()),
                "b": pa.array([None if v is None else (v % 256) - 128 for v in ints], pa.int8()),
                "s": pa.array(
                    [None if v is None else (v % 65536) - 32768 for v in ints], pa.int16()
                ),
                "i": pa.array(ints, pa.int32()),
                "j": pa.array([3, 1, -2, 5, None, 31, 32, 33, -1, 0, 64, 7], pa.int32()),
                "l": pa.array(longs, pa.int64()),
                "arr": pa.array(arrays, pa.list_(pa.int32())),
                "g": pa.array(["x", "y", "x", "y", "z", "x", "y", "z", "x", "y", "z", "x"]),
            }
        ),
        "keys": pa.table(
            {
                "k": pa.array([0.0, -0.0, _NAN, None, 1.5, 3.0], pa.float64()),
                "w": pa.array(["zero", "negzero", "nan", "null", "one-half", "three"]),
            }
        ),
    }


@pytest.fixture(scope="module")
def spark(session: hs.Session, tmp_path_factory: pytest.TempPathFactory) -> Any:
    return parquet_views(session.spark, tmp_path_factory.mktemp("numeric_expressions"), _tables())


def check_sql(session: hs.Session, spark: Any, query: str) -> None:
    """``query`` in the engine equals Spark (rows, floats exactly; names; schema), and
    nothing fell back."""
    oracle.check_sql(session, spark, query, in_engine=True, value=exact_value)


# -- NormalizeNaNAndZero ----------------------------------------------------------------


def test_group_by_float_keys_merges_zeros_and_nans(session: hs.Session, spark: Any) -> None:
    check_sql(session, spark, "SELECT f, count(*) AS n, sum(id) AS ids FROM nums GROUP BY f")
    check_sql(session, spark, "SELECT r, count(*) AS n FROM nums GROUP BY r")
    check_sql(session, spark, "SELECT count(DISTINCT f) AS d FROM nums")


def test_join_on_float_keys(session: hs.Session, spark: Any) -> None:
    check_sql(session, spark, "SELECT id, f, w FROM nums JOIN keys ON f = k")
    check_sql(session, spark, "SELECT id, w FROM nums LEFT JOIN keys ON f = k AND id > 0")


# -- bitwise ----------------------------------------------------------------------------


def test_bitwise_operators(session: hs.Session, spark: Any) -> None:
    check_sql(
        session,
        spark,
        """SELECT id, i & j AS a, i | j AS o, i ^ j AS x, ~i AS n, ~b AS nb, b & 15 AS b15,
             s | 256 AS s256, l & 255 AS l255, l ^ -1 AS lx, ~l AS nl,
             shiftleft(i, j) AS sl, shiftright(i, j) AS sr, shiftrightunsigned(i, j) AS sru,
             shiftleft(l, j) AS lsl, shiftright(l, 3) AS lsr, shiftrightunsigned(l, j) AS lsru,
             shiftleft(b, 3) AS bsl, bit_count(i) AS bc, bit_count(b) AS bbc,
             bit_count(l) AS lbc, bit_get(i, 3) AS g3, getbit(l, 63) AS g63
           FROM nums""",
    )


def test_grouping_bits(session: hs.Session, spark: Any) -> None:
    """``grouping()`` is ``(spark_grouping_id >> n) & 1``."""
    check_sql(
        session,
        spark,
        """SELECT g, i % 2 AS p, grouping(g) AS gg, grouping(i % 2) AS gp, grouping_id() AS gid,
             count(*) AS n FROM nums GROUP BY CUBE(g, i % 2)""",
    )


# -- arrays -----------------------------------------------------------------------------


def test_array_functions(session: hs.Session, spark: Any) -> None:
    check_sql(
        session,
        spark,
        """SELECT id, arr[0] AS first, arr[1] AS second, arr[5] AS far, arr[-1] AS neg,
             element_at(arr, 1) AS e1, element_at(arr, -1) AS last, element_at(arr, 9) AS e9,
             size(arr) AS n, cardinality(arr) AS c, array_contains(arr, 2) AS has2,
             array(i, j)[1] AS ij1, size(array(i, j, 3)) AS three,
             element_at(array(b, 1Y), 2) AS b2, array_contains(array(i, j), 7) AS has7
           FROM nums""",
    )


def test_array_filter(session: hs.Session, spark: Any) -> None:
    check_sql(session, spark, "SELECT id FROM nums WHERE size(arr) > 1 AND arr[0] < 5")


def test_pivot_sql_and_dataframe(session: hs.Session, spark: Any) -> None:
    """PIVOT reads its pivoted values with ``GetArrayItem``; equal to Spark, all in the
    engine (its aggregate's ``PivotFirst`` too)."""
    check_sql(
        session,
        spark,
        "SELECT * FROM (SELECT g, i % 3 AS m, l FROM nums) "
        "PIVOT (sum(l) AS s, count(l) AS c FOR m IN (0, 1, 2))",
    )
    df = spark.table("nums").groupBy("g").pivot("j", [1, 3, 5]).agg({"i": "max"})
    stream = session.from_dataframe(df)
    got = stream.to_arrow()
    assert got.column_names == df.columns
    same_rows(rows(got, exact_value), spark_rows(df, exact_value))
    assert stream.explain_data()["spark_subtrees"] == []
