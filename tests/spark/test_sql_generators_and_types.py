"""Generators (``explode``, ``posexplode`` and their outer forms, ``LATERAL VIEW``),
void (``NullType``) columns and structs, against Spark's own results: rows,
``df.columns`` and the schema ``to_spark()`` gives back; and that each of these runs in
the engine (``spark_subtrees`` empty).  One session and tiny Parquet views for the
module."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import hybrid_shuffle as hs

from .oracle import check_sql, parquet_views, rows, same_rows, spark_rows

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark(session: hs.Session, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A Parquet view ``g``: arrays with a null array, an empty one and a null element."""
    table = pa.table(
        {
            "id": pa.array([1, 2, 3, 4, 5], pa.int32()),
            "xs": pa.array([[1, 2, 3], [], None, [5, None], [7]], pa.list_(pa.int32())),
            "ws": pa.array([["x", "y"], ["z"], [], None, ["w", "w"]], pa.list_(pa.string())),
            "s": pa.array(["a", "b", None, "d", "e"], pa.string()),
        }
    )
    return parquet_views(session.spark, tmp_path_factory.mktemp("generators"), {"g": table})


GENERATORS = [
    "SELECT id, x FROM g LATERAL VIEW explode(xs) AS x",
    "SELECT id, x FROM g LATERAL VIEW OUTER explode(xs) AS x",
    "SELECT id, s, w FROM g LATERAL VIEW explode(ws) t AS w",
    "SELECT id, p, w FROM g LATERAL VIEW posexplode(ws) t AS p, w",
    "SELECT id, p, w FROM g LATERAL VIEW OUTER posexplode(ws) t AS p, w",
    "SELECT id, explode(xs) FROM g",
    "SELECT id, explode_outer(xs) AS v FROM g",
    "SELECT id, posexplode(xs) FROM g",
    "SELECT s, posexplode_outer(ws) FROM g",
    "SELECT x, count(*) AS n FROM g LATERAL VIEW explode(xs) AS x GROUP BY x",
    "SELECT id, x, w FROM g LATERAL VIEW explode(xs) AS x LATERAL VIEW explode(ws) AS w",
    "SELECT explode(xs) FROM g WHERE id > 1",
]


@pytest.mark.parametrize("query", GENERATORS)
def test_generators(session: hs.Session, spark: Any, query: str) -> None:
    check_sql(session, spark, query, in_engine=True)


VOID = [
    "SELECT NULL",
    "SELECT NULL AS a, 1 AS b",
    "SELECT assert_true(0 < 1)",
    "SELECT id, NULL AS n FROM g WHERE id > 1",
    "SELECT count(n), max(n) FROM (SELECT NULL AS n, id FROM g)",
    "SELECT n, count(*) FROM (SELECT NULL AS n, id FROM g) GROUP BY n",
]


@pytest.mark.parametrize("query", VOID)
def test_void_columns(session: hs.Session, spark: Any, query: str) -> None:
    check_sql(session, spark, query, in_engine=True)


def test_assert_true_over_a_column_is_void(session: hs.Session, spark: Any) -> None:
    """Its ``RaiseError`` branch runs in Spark; the void result keeps Spark's type."""
    check_sql(session, spark, "SELECT id, assert_true(id > 0) AS r FROM g")


def test_void_through_to_spark(session: hs.Session, spark: Any) -> None:
    query = "SELECT NULL AS a, id FROM g"
    back = session.sql(query).to_spark()
    assert back.columns == ["a", "id"]
    assert back.schema.simpleString() == spark.sql(query).schema.simpleString()


def test_generators_that_fall_back_still_answer(session: hs.Session, spark: Any) -> None:
    """``inline`` and ``stack`` are not translated: Spark answers them, with a reason."""
    query = "SELECT stack(2, id, s, id + 10, s) FROM g"
    stream = session.sql(query)
    got = stream.to_arrow()
    same_rows(rows(got), spark_rows(spark.sql(query)))
    reasons = [t["reason"] for t in stream.explain_data()["spark_subtrees"]]
    assert any("Stack" in r for r in reasons)


@pytest.fixture(scope="module")
def binary_view(session: hs.Session, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A Parquet view ``bv``: a binary column with an empty value, a null and UTF-8 bytes."""
    table = pa.table(
        {
            "id": pa.array([1, 2, 3, 4], pa.int64()),
            "b": pa.array([b"\x1f\x00", b"", None, "é".encode()], pa.binary()),
            "s": pa.array(["Spark", None, "", "é\\x41"], pa.string()),
            # base64 of more than 57 bytes is chunked into 76-character lines by Spark 3.5
            "l": pa.array([bytes(range(120)), b"a" * 57, b"a" * 58, None], pa.binary()),
        }
    )
    return parquet_views(spark, tmp_path_factory.mktemp("binary"), {"bv": table})


BINARY = [
    "SELECT id, b FROM bv",
    "SELECT b, count(*) FROM bv GROUP BY b",
    "SELECT id FROM bv WHERE b IS NULL",
    "SELECT id, hex(b), hex(s), hex(id), hex(-id) FROM bv",
    "SELECT hex(17), hex(-1), hex('Spark SQL')",
    "SELECT id, CAST(s AS BINARY) AS c, hex(CAST(s AS BINARY)) AS h FROM bv",
    "SELECT id, base64(b), base64(s) FROM bv",
    "SELECT id, base64(l) FROM bv",
]


@pytest.mark.parametrize("query", BINARY)
def test_binary(session: hs.Session, binary_view: Any, query: str) -> None:
    check_sql(session, binary_view, query, in_engine=True)


@pytest.fixture(scope="module")
def struct_view(session: hs.Session, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A Parquet view ``sv``: a struct column ``p`` with a nested struct, a null struct, a
    null nested struct and null fields."""
    inner = pa.struct([("r", pa.int64()), ("t", pa.string())])
    kind = pa.struct([("a", pa.int32()), ("b", pa.string()), ("q", inner)])
    table = pa.table(
        {
            "id": pa.array([1, 2, 3, 4, 5], pa.int64()),
            "p": pa.array(
                [
                    {"a": 1, "b": "x", "q": {"r": 10, "t": "u"}},
                    {"a": 2, "b": None, "q": None},
                    None,
                    {"a": None, "b": "y", "q": {"r": None, "t": "v"}},
                    {"a": 5, "b": "x", "q": {"r": 50, "t": None}},
                ],
                kind,
            ),
        }
    )
    return parquet_views(spark, tmp_path_factory.mktemp("structs"), {"sv": table})


STRUCTS = [
    # Spark prunes ``p`` to the fields read (``struct<b>``): the field's position is its
    # position in the pruned struct, not in the file's
    "SELECT id, p.b FROM sv",
    "SELECT id, p.q.t, p.a FROM sv",
    "SELECT id FROM sv WHERE p.a > 1",
    "SELECT p.b, count(*) AS n FROM sv GROUP BY p.b",
    "SELECT id, p FROM sv WHERE p IS NOT NULL",
    "SELECT id, p AS renamed, p.q IS NULL AS no_q FROM sv",
    "SELECT id, named_struct('x', id, 'y', p.b, 'xs', array(id, id + 1)) AS st FROM sv",
    "SELECT id, named_struct('a', p.a, 'inner', p.q) AS st FROM sv ORDER BY id DESC",
]


@pytest.mark.parametrize("query", STRUCTS)
def test_structs(session: hs.Session, struct_view: Any, query: str) -> None:
    check_sql(session, struct_view, query, ordered="ORDER BY" in query, in_engine=True)


def test_scalar_subqueries_spark_merges_into_one_struct_run_in_the_engine(
    session: hs.Session, struct_view: Any
) -> None:
    """Spark merges scalar subqueries over one relation into one returning a struct
    (``MergeScalarSubqueries``; TPC-DS q9), which each use reads a field of."""
    query = """
        SELECT CASE WHEN (SELECT count(*) FROM sv WHERE p.a > 1) > 1
                    THEN (SELECT max(id) FROM sv WHERE p.a > 1)
                    ELSE (SELECT min(id) FROM sv WHERE p.a > 1) END AS first,
               (SELECT sum(id) FROM sv WHERE p.a > 1) AS total
        FROM sv WHERE id = 1"""
    assert "named_struct" in struct_view.sql(query)._jdf.queryExecution().executedPlan().toString()
    stream = check_sql(session, struct_view, query, in_engine=True)
    # one subquery, read over one edge, by the one stage using its fields
    subqueries = [e for e in stream.explain_data()["spark_exchanges"] if e.startswith("subquery_")]
    assert subqueries == ["subquery_1"]


def test_a_struct_with_two_fields_named_alike_is_spark_s(
    session: hs.Session, struct_view: Any
) -> None:
    """A DuckDB struct cannot hold two fields whose names differ only in case; Spark's
    can, so Spark builds it, and says why."""
    query = "SELECT id, named_struct('a', id, 'A', p.b) AS st FROM sv"
    stream = check_sql(session, struct_view, query, in_engine=False)
    reasons = [t["reason"] for t in stream.explain_data()["spark_subtrees"]]
    assert any("two fields named 'A'" in r for r in reasons), reasons
