"""``first``/``last`` aggregates (``FILTER``, ``ignoreNulls``), offset, ranking and value
window functions, existence joins, nested loop joins of every type and cartesian
products, each in the engine (no ``spark_subtrees``) and against Spark: the same rows and
schema.

``first``/``last`` without an order pick whichever row comes first, in Spark as in the
engine, so the aggregates are asked only where every candidate row agrees (or one row
passes the FILTER); ``lag``/``lead``/``ntile``/``first`` over a window are ordered by a
unique key, so Spark's result is defined."""

from __future__ import annotations

import decimal
import os
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import ray
from pyspark.sql import Window
from pyspark.sql import functions as F

import hybrid_shuffle as hs
from hybrid_shuffle.operators.sql import SqlQuery, input_name
from hybrid_shuffle.shuffle.routing import PartitionerKind

from .oracle import (
    BASE_YAML,
    check,
    check_sql,
    configured,
    exchange_ids,
    parquet_views,
    ran_where,
    rows,
    same_rows,
    spark_conf,
    spark_rows,
)

pytestmark = pytest.mark.spark


def _w_table() -> pa.Table:
    """30 rows: a unique ``id``, and nulls in the keys ``g``/``k`` and in every value."""
    ids = list(range(30))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "g": pa.array([None if i % 7 == 3 else "abc"[i % 3] for i in ids], pa.string()),
            "k": pa.array([None if i % 5 == 0 else i % 4 for i in ids], pa.int32()),
            "v": pa.array([None if i % 4 == 1 else (i * 7 % 11) - 3.5 for i in ids], pa.float64()),
            "s": pa.array([None if i % 6 == 2 else f"s{i % 5}" for i in ids], pa.string()),
            "d": pa.array(
                [None if i % 8 == 0 else decimal.Decimal(i) / 4 for i in ids], pa.decimal128(8, 2)
            ),
        }
    )


def _b_table() -> pa.Table:
    ids = list(range(12))
    return pa.table(
        {
            "bid": pa.array(ids, pa.int64()),
            "k": pa.array([None if i % 5 == 4 else i % 6 for i in ids], pa.int32()),
            "y": pa.array([None if i % 3 == 0 else f"y{i}" for i in ids], pa.string()),
        }
    )


@pytest.fixture(scope="module")
def spark(session: hs.Session, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Spark with the Parquet views ``w`` (30 rows) and ``b`` (12; nulls in ``b.k``)."""
    root = tmp_path_factory.mktemp("windows_and_joins")
    return parquet_views(session.spark, root, {"w": _w_table(), "b": _b_table()})


# -- comparing with Spark ---------------------------------------------------------------


def in_engine(session: hs.Session, df: Any) -> hs.Stream:
    """``df`` run in the engine, all of it, with Spark's rows and schema."""
    stream = session.from_dataframe(df)
    check(session, stream, df, in_engine=True)
    return stream


def in_engine_sql(session: hs.Session, spark: Any, query: str) -> hs.Stream:
    return in_engine(session, spark.sql(query))


def in_modes(session: hs.Session, spark: Any, tmp_path: Path, query: str, mode: str) -> None:
    """``query`` in the engine with every exchange edge in ``mode`` (set in YAML by the
    ids of ``explain(mode="formatted")``, kept against the output-on-EOF rule)."""
    ids = exchange_ids(spark, lambda: spark.sql(query))
    assert ids
    entries = "".join(f"  exchange_{i}: {{mode: {mode}, keep: true}}\n" for i in ids)
    with configured(session, tmp_path, BASE_YAML % "" + "edges:\n" + entries):
        stream = in_engine_sql(session, spark, query)
        modes = {e["name"]: e["mode"] for e in stream.explain_data()["edges"]}
    assert [modes[f"exchange_{i}"] for i in ids] == [mode] * len(ids)


def _plan(spark: Any, query: str) -> list[Any]:
    """The operators of the plan the engine translates for ``query``, in pre-order."""
    from hybrid_shuffle.sparkplan.physical import physical_plan

    return list(physical_plan(spark.sql(query)).root.walk())


def plan_classes(spark: Any, query: str) -> list[str]:
    return [n.cls for n in _plan(spark, query)]


def join_operators(spark: Any, query: str) -> list[tuple[str, str, str]]:
    """The (class, build side, join type) of each join Spark plans for ``query``."""
    from hybrid_shuffle.sparkplan.operators.join import join_type

    return [
        (n.cls, n.object("buildSide"), join_type(n))
        for n in _plan(spark, query)
        if n.cls.endswith("JoinExec") or n.cls == "CartesianProductExec"
    ]


# -- 1. first / last aggregates ------------------------------------------------------------


def test_first_and_last_with_filter_and_ignore_nulls(session: hs.Session, spark: Any) -> None:
    in_engine_sql(
        session,
        spark,
        """SELECT k, first(k * 2) AS f, last(k * 2) AS l,
             first(CASE WHEN id % 3 = 0 THEN NULL ELSE k END, true) AS fi,
             last(CASE WHEN id % 3 = 0 THEN NULL ELSE k END) IGNORE NULLS AS li,
             first(s) FILTER (WHERE s = 's1') AS ff,
             last(v, true) FILTER (WHERE v = 2.5) AS lf,
             first(v) FILTER (WHERE v IS NULL AND k = 1) AS fn,
             first_value(k) AS fv, any_value(k + 1) AS av,
             count(*) FILTER (WHERE v > 0) AS n, sum(d) FILTER (WHERE s IS NOT NULL) AS sd
           FROM w GROUP BY k""",
    )


def test_first_and_last_of_the_one_row_a_filter_keeps(session: hs.Session, spark: Any) -> None:
    # ids 0..4 and 25..29 give each group id % 5 exactly one row, nulls included
    in_engine_sql(
        session,
        spark,
        """SELECT id % 5 AS m, first(v) FILTER (WHERE id < 5) AS f,
             last(s) FILTER (WHERE id >= 25) AS l, first(d, true) FILTER (WHERE id > 99) AS none
           FROM w GROUP BY id % 5""",
    )
    in_engine_sql(
        session,
        spark,
        """SELECT first(v) FILTER (WHERE id = 1) AS a, last(s) FILTER (WHERE id = 7) AS b,
             first(v, true) FILTER (WHERE id > 100) AS c, last(d) FILTER (WHERE id = 9) AS e
           FROM w""",
    )


def test_distinct_aggregates_with_filters(session: hs.Session, spark: Any) -> None:
    # several distinct aggregates: Expand, then first(.., true) FILTER (WHERE gid = n)
    in_engine_sql(
        session,
        spark,
        """SELECT g, count(DISTINCT k) FILTER (WHERE v > 0) AS dk, count(DISTINCT s) AS ds,
             sum(v) FILTER (WHERE k = 1) AS sv, avg(d) AS ad, count(*) AS n
           FROM w GROUP BY g""",
    )


def test_sums_wrap_and_decimal_sums_overflow_to_null(session: hs.Session, spark: Any) -> None:
    # Spark's non-ANSI sum: a bigint wraps around, a decimal past its 38 digits is null
    spark.sql(
        "SELECT * FROM VALUES (9223372036854775807L, 1), (1L, 1), (5L, 2), "
        "(-9223372036854775807L, 2), (-9L, 2) AS t(x, g)"
    ).createOrReplaceTempView("longs")
    spark.sql(
        """SELECT CAST(a AS DECIMAL(38, 18)) AS a, CAST(c AS DECIMAL(5, 0)) AS c, i
           FROM VALUES ('1.123456789123456789', '3', 7), ('-0.000000000000000001', '-99999', -3),
             ('99999999999999999999.999999999999999999', '1', 0), (NULL, NULL, 2) AS t(a, c, i)"""
    ).createOrReplaceTempView("decimals")
    for query in (
        "SELECT sum(x) AS s, avg(x) AS a FROM longs",
        "SELECT g, sum(x) AS s, avg(x) AS a, sum(DISTINCT x) AS d FROM longs GROUP BY g",
        "SELECT x, sum(x) OVER (ORDER BY x) AS running FROM longs",
        "SELECT sum(a) AS sa, avg(a) AS aa, sum(c) AS sc FROM decimals",
        "SELECT i % 2 AS m, sum(a) AS sa, avg(a) AS aa, avg(c) AS ac FROM decimals GROUP BY i % 2",
        "SELECT i, sum(a) OVER (ORDER BY i) AS sa FROM decimals",
    ):
        in_engine_sql(session, spark, query)
    # try_sum's buffers are not sum's: its final aggregate stays with its partial, in Spark
    query = "SELECT g, try_sum(x) AS s FROM longs GROUP BY g"
    stream = session.sql(query)
    assert [s["operator"].split(" ")[0] for s in stream.explain_data()["spark_subtrees"]] == [
        "HashAggregate"
    ]
    check(session, stream, spark.sql(query))


def test_a_final_aggregate_over_its_partial_in_one_stage_runs_as_one_aggregate(
    session: hs.Session, spark: Any
) -> None:
    # grouped on the key of a sort-merge join, Spark puts the final aggregate straight
    # over the partial one (the rows are partitioned on the key already); the engine
    # runs them as one GROUP BY. Nulls in the values, decimals, FILTER, first().
    query = """SELECT w.k, sum(v) AS sv, avg(d) AS ad, sum(d) AS sd, count(*) AS n,
                 count(y) AS cy, min(s) AS mi, max(d) AS ma, avg(v) FILTER (WHERE id > 9) AS af,
                 sum(id) AS si, first(w.k) AS fk
               FROM w JOIN b ON w.k = b.k GROUP BY w.k"""
    with spark_conf(spark, autoBroadcastJoinThreshold="-1"):
        stream = in_engine_sql(session, spark, query)
        queries = [
            op.query
            for v in stream.job.plan(stream).graph.vertices.values()
            for op in v.operators
            if isinstance(op, SqlQuery)
        ]
    assert sum(q.count("GROUP BY") for q in queries) == 1, queries
    # try_sum keeps a buffer more than sum: not fused, its final aggregate in Spark
    with spark_conf(spark, autoBroadcastJoinThreshold="-1"):
        query = "SELECT w.k, try_sum(id) AS t, sum(v) AS sv FROM w JOIN b ON w.k = b.k GROUP BY w.k"
        stream = session.sql(query)
        assert [s["operator"].split(" ")[0] for s in stream.explain_data()["spark_subtrees"]] == [
            "HashAggregate"
        ]
        check(session, stream, spark.sql(query))


# -- 2. windows --------------------------------------------------------------------------


def test_window_functions_of_the_dataframe_api(session: hs.Session, spark: Any) -> None:
    w = spark.table("w")
    by_g = Window.partitionBy("g").orderBy("id")
    whole = by_g.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    df = w.select(
        "id",
        "g",
        F.lag("v", 2, -1.0).over(by_g).alias("lag2"),
        F.lead("s", 1, "none").over(by_g).alias("lead1"),
        F.lag("d", 1).over(Window.orderBy(F.desc("id"))).alias("lagd"),
        F.lead("k", 3, 0).over(Window.partitionBy("k").orderBy("id")).alias("leadk"),
        F.ntile(4).over(by_g).alias("nt"),
        F.nth_value("v", 3, ignoreNulls=True).over(by_g).alias("nv"),
        F.nth_value("s", 2).over(by_g.rowsBetween(-1, 1)).alias("ns"),
        F.percent_rank().over(Window.partitionBy("g").orderBy("k")).alias("pr"),
        F.cume_dist().over(Window.partitionBy("k").orderBy(F.desc("v"))).alias("cd"),
        F.first("v", ignorenulls=True).over(by_g).alias("fv"),
        F.last("s", ignorenulls=True).over(whole).alias("ls"),
        F.first("d").over(by_g.rowsBetween(1, 2)).alias("fd"),
        F.last("v").over(by_g.rangeBetween(-5, 0)).alias("lv"),
    )
    in_engine(session, df)


def test_window_functions_in_sql(session: hs.Session, spark: Any) -> None:
    in_engine_sql(
        session,
        spark,
        """SELECT id,
             lag(v, 1, NULL) IGNORE NULLS OVER (ORDER BY id) AS a,
             lead(v, 2, 99.0) IGNORE NULLS OVER (PARTITION BY g ORDER BY id) AS b,
             lag(s, 30, 'far') OVER (ORDER BY id) AS c,
             lag(v, -1) OVER (ORDER BY id) AS back,
             lag(k, 2, id) OVER (PARTITION BY g ORDER BY id) AS dflt,
             lead(d, 1, 7) OVER (ORDER BY id) AS dec,
             ntile(7) OVER (PARTITION BY g ORDER BY id) AS n7,
             ntile(100) OVER (PARTITION BY k ORDER BY id) AS n100,
             nth_value(v, 40) OVER (ORDER BY id) AS far,
             nth_value(v, 2) IGNORE NULLS OVER (PARTITION BY g ORDER BY id) AS nv,
             first_value(v) IGNORE NULLS OVER (PARTITION BY k ORDER BY id
               ROWS BETWEEN 2 FOLLOWING AND 3 FOLLOWING) AS ahead,
             last_value(s) OVER (PARTITION BY k ORDER BY id
               ROWS BETWEEN 2 PRECEDING AND 1 PRECEDING) AS behind,
             v - lag(v) OVER (PARTITION BY g ORDER BY id) AS delta
           FROM w""",
    )


def test_percent_rank_cume_dist_decimal_ranges(session: hs.Session, spark: Any) -> None:
    in_engine_sql(
        session,
        spark,
        """SELECT id, k, percent_rank() OVER (PARTITION BY g ORDER BY k) AS a,
             cume_dist() OVER (PARTITION BY g ORDER BY k) AS b,
             percent_rank() OVER (ORDER BY v DESC) AS c,
             cume_dist() OVER (ORDER BY k NULLS LAST) AS e,
             count(*) OVER (ORDER BY d RANGE BETWEEN 2.5 PRECEDING AND CURRENT ROW) AS near,
             sum(v) OVER (PARTITION BY g ORDER BY d DESC
               RANGE BETWEEN 1.25 PRECEDING AND 0.5 FOLLOWING) AS around
           FROM w""",
    )


def test_top_n_per_group(session: hs.Session, spark: Any) -> None:
    # Spark 3.5 plans WindowGroupLimit (partial and final) under the ranking filter
    for query in (
        "SELECT * FROM (SELECT id, g, row_number() OVER (PARTITION BY g ORDER BY id) AS rn "
        "FROM w) WHERE rn <= 2",
        "SELECT * FROM (SELECT id, g, k, rank() OVER (PARTITION BY g ORDER BY k DESC) AS r, "
        "dense_rank() OVER (PARTITION BY g ORDER BY k DESC) AS dr FROM w) WHERE r < 3",
    ):
        assert "WindowGroupLimitExec" in plan_classes(spark, query)
        in_engine_sql(session, spark, query)


WINDOW_OVER_K = """SELECT id, lag(v) OVER (PARTITION BY k ORDER BY id) AS p,
     nth_value(s, 2) OVER (PARTITION BY k ORDER BY id) AS n,
     first(v, true) OVER (PARTITION BY k ORDER BY id) AS f
   FROM w"""


@pytest.mark.parametrize("mode", ["hybrid-selective", "hybrid-full"])
def test_window_over_an_exchange_in_two_modes(
    session: hs.Session, spark: Any, tmp_path: Path, mode: str
) -> None:
    in_modes(session, spark, tmp_path, WINDOW_OVER_K, mode)


# -- 3. existence joins ------------------------------------------------------------------

EXISTENCE = [
    # IN under OR: b.k has nulls; NOT IN's null semantics are in Spark's join condition
    "SELECT id FROM w WHERE k > 2 OR k IN (SELECT k FROM b)",
    "SELECT id FROM w WHERE k > 2 OR k NOT IN (SELECT k FROM b)",
    "SELECT id FROM w WHERE k > 2 OR k NOT IN (SELECT k FROM b WHERE k IS NOT NULL)",
    "SELECT id FROM w WHERE id > 25 OR k NOT IN (SELECT k FROM b WHERE bid < 0)",
    "SELECT id FROM w WHERE id > 25 OR NOT EXISTS "
    "(SELECT 1 FROM b WHERE b.k = w.k AND b.bid > w.id)",
    "SELECT id FROM w WHERE id > 25 OR EXISTS (SELECT 1 FROM b WHERE b.k > w.k + 3)",
    "SELECT id, k IN (SELECT k FROM b) AS x, k IN (SELECT k FROM b WHERE k IS NOT NULL) AS y "
    "FROM w",
    "SELECT g, count(*) FILTER (WHERE k IN (SELECT k FROM b WHERE bid > 3)) AS n, "
    "sum(v) FILTER (WHERE EXISTS (SELECT 1 FROM b WHERE b.k = w.k)) AS s FROM w GROUP BY g",
]


@pytest.mark.parametrize("query", EXISTENCE)
def test_existence_joins_broadcast(session: hs.Session, spark: Any, query: str) -> None:
    joins = join_operators(spark, query)
    assert any(kind == "ExistenceJoin" for _, _, kind in joins)
    in_engine_sql(session, spark, query)


@pytest.mark.parametrize(
    ("query", "operator"),
    [
        ("SELECT id FROM w WHERE k > 2 OR k IN (SELECT k FROM b)", "SortMergeJoinExec"),
        (
            "SELECT id FROM w WHERE k > 2 OR k IN (SELECT /*+ SHUFFLE_HASH(b) */ k FROM b)",
            "ShuffledHashJoinExec",
        ),
    ],
)
def test_existence_joins_shuffled(
    session: hs.Session, spark: Any, query: str, operator: str
) -> None:
    with spark_conf(spark, autoBroadcastJoinThreshold="-1"):
        assert [(c, k) for c, _, k in join_operators(spark, query)] == [(operator, "ExistenceJoin")]
        in_engine_sql(session, spark, query)


@pytest.mark.parametrize("mode", ["hybrid-selective", "hybrid-full"])
def test_existence_join_in_two_modes(
    session: hs.Session, spark: Any, tmp_path: Path, mode: str
) -> None:
    query = "SELECT id, k IN (SELECT k FROM b WHERE bid > 2) AS x FROM w"
    with spark_conf(spark, autoBroadcastJoinThreshold="-1"):
        in_modes(session, spark, tmp_path, query, mode)


# -- 4. nested loop joins and cartesian products -----------------------------------------

NESTED_LOOP = [
    ("SELECT id, bid FROM w JOIN b ON w.k < b.k", "BuildRight", "Inner"),
    ("SELECT id, bid, y FROM w CROSS JOIN b", "BuildLeft", "Cross"),
    ("SELECT id, bid FROM w LEFT JOIN b ON w.k < b.k", "BuildRight", "LeftOuter"),
    ("SELECT id, bid FROM w RIGHT JOIN b ON w.k < b.k", "BuildLeft", "RightOuter"),
    ("SELECT id, bid FROM w FULL JOIN b ON w.k < b.k AND w.id < 10", "BuildRight", "FullOuter"),
    ("SELECT id FROM w LEFT SEMI JOIN b ON w.k < b.k - 3", "BuildRight", "LeftSemi"),
    ("SELECT id FROM w LEFT ANTI JOIN b ON w.k < b.k - 3", "BuildRight", "LeftAnti"),
    # the broadcast side's rows are kept: the join runs in one task
    (
        "SELECT /*+ BROADCAST(w) */ id, bid FROM w LEFT JOIN b ON w.k < b.k",
        "BuildLeft",
        "LeftOuter",
    ),
    ("SELECT /*+ BROADCAST(w) */ id FROM w LEFT SEMI JOIN b ON w.k < b.k", "BuildLeft", "LeftSemi"),
    ("SELECT /*+ BROADCAST(w) */ id FROM w LEFT ANTI JOIN b ON w.k < b.k", "BuildLeft", "LeftAnti"),
    (
        "SELECT /*+ BROADCAST(b) */ id, bid FROM w RIGHT JOIN b ON w.k < b.k",
        "BuildRight",
        "RightOuter",
    ),
    ("SELECT /*+ BROADCAST(w) */ id, y FROM w FULL JOIN b ON w.k < b.k", "BuildLeft", "FullOuter"),
]


@pytest.mark.parametrize(("query", "build", "kind"), NESTED_LOOP)
def test_broadcast_nested_loop_joins(
    session: hs.Session, spark: Any, query: str, build: str, kind: str
) -> None:
    assert join_operators(spark, query) == [("BroadcastNestedLoopJoinExec", build, kind)]
    stream = in_engine_sql(session, spark, query)
    keeps_build = kind == "FullOuter" or (build, kind) in (
        ("BuildLeft", "LeftOuter"),
        ("BuildLeft", "LeftSemi"),
        ("BuildLeft", "LeftAnti"),
        ("BuildRight", "RightOuter"),
    )
    edges = {e["name"]: e for e in stream.explain_data()["edges"]}
    gathers = [e for name, e in edges.items() if name.startswith("gather_")]
    assert [e["partitions"] for e in gathers] == ([1] if keeps_build else [])


@pytest.mark.parametrize(
    "query",
    [
        "SELECT id, bid FROM w CROSS JOIN b",
        "SELECT id, g, bid, y FROM w JOIN b ON w.k < b.k AND b.y IS NOT NULL",
        "SELECT g, count(*) AS n FROM w CROSS JOIN b WHERE w.id + b.bid < 10 GROUP BY g",
    ],
)
def test_cartesian_products(session: hs.Session, spark: Any, query: str) -> None:
    with spark_conf(spark, autoBroadcastJoinThreshold="-1"):
        assert [c for c, _, _ in join_operators(spark, query)] == ["CartesianProductExec"]
        stream = in_engine_sql(session, spark, query)
    assert any(e.startswith("broadcast_") for e in stream.explain_data()["spark_exchanges"])


# -- 4b. broadcast inner joins below semi and anti joins -------------------------------------

#: (query, whether a broadcast inner join runs below its semi or anti joins): Spark plans
#: each semi or anti join on ``w`` below the inner join with ``b``, which moves below them
#: only where a filter cuts ``b`` (``bid > 2``; ``IS NOT NULL`` alone cuts nothing)
FILTERED_BELOW = [
    (
        "SELECT w.g, count(*) AS n FROM w JOIN b ON w.k = b.k WHERE b.bid > 2 "
        "AND EXISTS (SELECT 1 FROM w AS w2 WHERE w2.k = w.k AND w2.id <> w.id) "
        "AND NOT EXISTS (SELECT 1 FROM w AS w3 WHERE w3.g = w.g AND w3.id > w.id + 20) "
        "GROUP BY w.g",
        True,
    ),
    (
        "SELECT w.g, count(*) AS n FROM w JOIN b ON w.k = b.k WHERE b.y IS NOT NULL "
        "AND EXISTS (SELECT 1 FROM w AS w2 WHERE w2.k = w.k AND w2.id <> w.id) "
        "AND NOT EXISTS (SELECT 1 FROM w AS w3 WHERE w3.g = w.g AND w3.id > w.id + 20) "
        "GROUP BY w.g",
        False,
    ),
    # a projection between the semi join and the inner join drops the column it tests
    (
        "SELECT w.id, w.v, w.s, w.d, b.y FROM w JOIN b ON w.k = b.k WHERE b.bid < 9 "
        "AND EXISTS (SELECT 1 FROM w AS w2 WHERE w2.g = w.g AND w2.id > w.id + 3)",
        True,
    ),
    (
        "SELECT w.id, b.y FROM w JOIN b ON w.k = b.k WHERE w.id IN "
        "(SELECT bid * 2 FROM b WHERE y IS NOT NULL)",
        True,
    ),
    # NOT IN's null-aware anti join, and a left outer join above a semi join, stay as
    # Spark planned them
    ("SELECT w.id, b.y FROM w JOIN b ON w.k = b.k WHERE w.id NOT IN (SELECT bid FROM b)", False),
    (
        "SELECT w.id, b.y FROM w LEFT JOIN b ON w.k = b.k "
        "WHERE EXISTS (SELECT 1 FROM b AS b2 WHERE b2.bid = w.id)",
        False,
    ),
]


def _joins_above_filters(sql: str) -> int:
    """How many joins of ``sql`` other than semi and anti joins have a semi or anti join
    inside them (DuckDB's own parse tree)."""
    import json

    import duckdb

    parsed = duckdb.sql("SELECT json_serialize_sql(?)", params=[sql]).fetchone()
    assert parsed is not None

    def walk(node: Any) -> tuple[int, bool]:  # (joins above filters, holds a filter)
        children = node.values() if isinstance(node, dict) else node
        found, filtered = 0, False
        if isinstance(node, (dict, list)):
            for child in children:
                n, f = walk(child)
                found, filtered = found + n, filtered or f
        if isinstance(node, dict) and node.get("type") == "JOIN":
            if node.get("join_type") in ("SEMI", "ANTI"):
                return found, True
            if filtered:
                found += 1
        return found, filtered

    return walk(json.loads(parsed[0]))[0]


@pytest.mark.parametrize(("query", "below"), FILTERED_BELOW)
def test_broadcast_inner_joins_run_below_semi_and_anti_joins(
    session: hs.Session, spark: Any, query: str, below: bool
) -> None:
    """Spark puts a ``EXISTS``/``IN`` semi join (or a ``NOT EXISTS`` anti join) on the
    table it filters, below the inner joins with the other tables.  DuckDB cannot move an
    inner join across a semi join, so where a filter cuts the broadcast side the query
    runs that inner join first and the filters on its rows (TPC-H Q21: the one nation's
    suppliers cut the rows the anti join's hash table is probed with); the rows are
    Spark's either way."""
    kinds = {k for _, _, k in join_operators(spark, query)}
    assert kinds & {"LeftSemi", "LeftAnti"}
    stream = in_engine_sql(session, spark, query)
    graph = stream.job.plan(stream).graph
    queries = [
        op.query
        for v in graph.vertices.values()
        for op in v.operators
        if isinstance(op, SqlQuery) and (" SEMI JOIN " in op.query or " ANTI JOIN " in op.query)
    ]
    assert (bool(queries) and not any(_joins_above_filters(q) for q in queries)) is below


#: (query, whether its broadcast join runs on one side of the shuffled join below it): with
#: broadcasts off but for the hint, Spark joins ``w`` and ``w2`` by sort-merge and ``b``
#: above, by broadcast; ``b``'s join moves onto the side whose columns it reads, where a
#: filter cuts ``b`` (``bid > 2``, not ``IS NOT NULL`` alone) and it reads one side only
INTO_SIDE = [
    (
        "SELECT /*+ BROADCAST(b) */ w.g, count(*) AS n, sum(w2.v) AS s FROM w "
        "JOIN w AS w2 ON w.id = w2.id + 1 JOIN b ON w.k = b.k WHERE b.bid > 2 GROUP BY w.g",
        True,
    ),
    (
        "SELECT /*+ BROADCAST(b) */ w.id, w2.s, b.y FROM w "
        "JOIN w AS w2 ON w.g = w2.g JOIN b ON w2.k = b.k WHERE b.bid > 2",
        True,
    ),
    (
        "SELECT /*+ BROADCAST(b) */ w.g, count(*) AS n FROM w "
        "JOIN w AS w2 ON w.id = w2.id + 1 JOIN b ON w.k = b.k WHERE b.y IS NOT NULL GROUP BY w.g",
        False,
    ),
    (
        "SELECT /*+ BROADCAST(b) */ w.id, w2.id AS id2, b.bid FROM w "
        "JOIN w AS w2 ON w.id = w2.id + 1 JOIN b ON w.k = b.k AND b.bid > w2.v WHERE b.bid > 2",
        False,
    ),
]


def _joins_around(sql: str, table: str) -> int:
    """How many joins of ``sql`` (DuckDB's own parse tree) hold the reads of ``table``."""
    import json

    import duckdb

    parsed = duckdb.sql("SELECT json_serialize_sql(?)", params=[sql]).fetchone()
    assert parsed is not None

    def walk(node: Any, joins: int) -> int:
        if isinstance(node, dict):
            if node.get("type") == "BASE_TABLE" and node.get("table_name") == table:
                return joins
            joins += node.get("type") == "JOIN"
            return max((walk(v, joins) for v in node.values()), default=0)
        if isinstance(node, list):
            return max((walk(v, joins) for v in node), default=0)
        return 0

    return walk(json.loads(parsed[0]), 0)


@pytest.mark.parametrize(("query", "into"), INTO_SIDE)
def test_a_selective_broadcast_join_runs_on_one_side_of_the_shuffled_join_below_it(
    session: hs.Session, spark: Any, query: str, into: bool
) -> None:
    """Spark joins a dimension where the query text does, above a shuffled join (TPC-H
    Q21 at SF10: the one nation above the shuffled ``orders`` join).  Where a filter cuts
    the dimension and its join reads one side of the shuffled join only, it runs on that
    side first, and the shuffled join joins fewer rows; the rows are Spark's either way."""
    with spark_conf(spark, autoBroadcastJoinThreshold="-1"):
        assert [(c, k) for c, _, k in join_operators(spark, query)] == [
            ("BroadcastHashJoinExec", "Inner"),
            ("SortMergeJoinExec", "Inner"),
        ]
        stream = in_engine_sql(session, spark, query)
    graph = stream.job.plan(stream).graph
    (stage,) = [v for v in graph.vertices.values() if len(v.inputs) == 3]
    (broadcast,) = [e for e in stage.inputs if e.partitioner.kind is PartitionerKind.BROADCAST]
    (operator,) = stage.operators
    assert isinstance(operator, SqlQuery)
    assert _joins_around(operator.query, input_name(broadcast.target_input)) == (2 if into else 1)


def test_a_broadcast_join_run_on_one_side_goes_with_the_split_join(
    session: hs.Session, spark: Any
) -> None:
    """A final aggregate on the shuffled join's key keeps the stage from moving whole; the
    shuffled join, now with the broadcast join on its side, is what splits off into the
    probe side's tasks (``Translator.rewritten``)."""
    query = (
        "SELECT /*+ BROADCAST(b) */ w.k, count(*) AS n, sum(w2.v) AS s FROM w "
        "JOIN w AS w2 ON w.k = w2.k JOIN b ON w.id = b.bid WHERE b.y > 'y3' GROUP BY w.k"
    )
    with spark_conf(spark, autoBroadcastJoinThreshold="-1"):
        result = _run_checked(session, spark, query)
    (change,) = result.adaptive
    assert change.switched and change.split


# -- 4c. a selective broadcast join's keys pushed below the exchanges under it -----------

#: (query, the scan its keys go onto: the alias whose rows are cut, or None): each with a
#: broadcast ``b`` joined above a sort-merge join of ``w`` with itself
PUSHED_KEYS = [
    # through the sort-merge join's exchange onto w2's scan (TPC-H Q7's nations)
    (
        "SELECT /*+ BROADCAST(b) */ w.id, w2.s, b.y FROM w "
        "JOIN w AS w2 ON w.g = w2.g JOIN b ON w2.k = b.k WHERE b.bid > 6",
        "w2",
    ),
    # the kept side of a left outer join passes the key on
    (
        "SELECT /*+ BROADCAST(b) */ w.id, w2.id AS id2, b.bid FROM w "
        "LEFT JOIN w AS w2 ON w.g = w2.g JOIN b ON w.k = b.k WHERE b.y > 'y3'",
        "w",
    ),
    # a built side no filter cuts: every key would match, nothing is pushed
    (
        "SELECT /*+ BROADCAST(b) */ w.id, b.y FROM w JOIN w AS w2 ON w.g = w2.g "
        "JOIN b ON w2.k = b.k",
        None,
    ),
    # the key is an aggregate's group: it stops there, above its exchange
    (
        "SELECT /*+ BROADCAST(b) */ t.k, t.n, b.y FROM (SELECT k, count(*) AS n FROM w "
        "GROUP BY k) AS t JOIN b ON t.k = b.k WHERE b.bid > 2",
        None,
    ),
]


def _keys_edges(stream: hs.Stream) -> dict[str, str]:
    """The edges carrying pushed keys: name -> the SQL of the stage they go into."""
    graph = stream.job.plan(stream).graph
    found = {}
    for vertex in graph.vertices.values():
        for edge in vertex.inputs:
            if edge.name.endswith("_keys"):
                (operator,) = vertex.operators
                assert isinstance(operator, SqlQuery)
                found[edge.name] = operator.query
    return found


@pytest.mark.parametrize(("query", "onto"), PUSHED_KEYS)
def test_a_selective_broadcast_joins_keys_cut_the_rows_before_the_exchanges_below_it(
    session: hs.Session, spark: Any, query: str, onto: str | None
) -> None:
    """Spark joins a filtered dimension above the shuffled join below it (TPC-H Q7's
    nations): its keys go down to the scan whose rows carry the key, over an edge
    ``exchange_<id>_keys`` of the broadcast's own, and the rows that cannot join are
    dropped before they cross the exchange.  The rows are Spark's either way."""
    with spark_conf(spark, autoBroadcastJoinThreshold="-1"):
        stream = in_engine_sql(session, spark, query)
        explained = stream.explain_data()
    edges = _keys_edges(stream)
    if onto is None:
        assert edges == {}
        return
    ((name, sql),) = edges.items()
    assert "SEMI JOIN" in sql
    assert "the keys of BroadcastExchange" in explained["spark_exchanges"][name]
    (broadcast,) = [e for e in explained["edges"] if e["name"] == name.removesuffix("_keys")]
    assert broadcast["partitioner"].startswith("broadcast")


def test_pushed_keys_cut_the_exchange_the_rows_cross(
    session: hs.Session, spark: Any, tmp_path: Path
) -> None:
    """The exchange below the join carries only the rows whose key the filtered
    dimension holds (the shuffled join kept shuffled: ``adaptive.broadcast_bytes`` off)."""
    query = PUSHED_KEYS[0][0]
    yaml = BASE_YAML % "" + "adaptive: {broadcast_bytes: 0, broadcast_max_bytes: 0}\n"
    with configured(session, tmp_path, yaml), spark_conf(spark, autoBroadcastJoinThreshold="-1"):
        result = _run_checked(session, spark, query)
        ids = exchange_ids(spark, lambda: spark.sql(query))
    assert not result.adaptive
    crossing = {e.name: e.rows for e in result.profile().edges}

    def count(where: str) -> int:
        return int(spark.sql(f"SELECT count(*) FROM w WHERE g IS NOT NULL{where}").first()[0])

    cut = count(" AND k IN (SELECT k FROM b WHERE bid > 6)")
    # of the two exchanges into the sort-merge join, w2's carries its rows cut to the keys
    assert sorted(crossing[f"exchange_{i}"] for i in ids) == sorted([cut, count("")])
    assert cut < count(" AND k IS NOT NULL"), "the keys cut some rows"


# -- 4b. a shuffled semi join's HAVING side computed first (adaptive.semi_join_filters) ----

#: (query, whether its sort-merge semi join's right side is computed first): ``IN`` over
#: what a ``HAVING`` keeps of an aggregate (TPC-H Q18's shape), with nulls among the keys
COMPUTED_FIRST = [
    # keys 0, 2 and 3 of 0-3 (every v of k = 1 is null)
    ("SELECT id, g FROM w WHERE k IN (SELECT k FROM w GROUP BY k HAVING max(v) > 5)", True),
    # two keys, and a HAVING on a sum
    (
        "SELECT id, v FROM w WHERE (g, k) IN (SELECT g, k FROM w GROUP BY g, k HAVING sum(v) > 0)",
        True,
    ),
    # the key followed down through a join's kept side, onto b's scan
    (
        "SELECT w.id, b.y FROM b JOIN w ON b.bid = w.id "
        "WHERE b.k IN (SELECT k FROM w GROUP BY k HAVING max(v) > 5)",
        True,
    ),
    # a grouping no filter cuts: every key would match, nothing is computed first
    ("SELECT bid FROM b WHERE k IN (SELECT k FROM w GROUP BY k)", False),
]


def _computed_first(stream: hs.Stream) -> list[str]:
    """The edges a semi join's right side computed first is read over."""
    return sorted(
        e["name"] for e in stream.explain_data()["edges"] if e["name"].startswith("build_")
    )


@pytest.mark.parametrize(("query", "first"), COMPUTED_FIRST)
def test_a_semi_joins_having_side_is_computed_first_and_its_keys_cut_the_other_side(
    session: hs.Session, spark: Any, query: str, first: bool
) -> None:
    """The right side runs in a stage of its own; the join's stage reads it over
    ``build_<id>``, the stage making the other side's rows reads its keys over
    ``build_<id>_keys`` and semi-joins them there.  The rows are Spark's."""
    with spark_conf(spark, autoBroadcastJoinThreshold="-1"):
        stream = in_engine_sql(session, spark, query)
    edges = _computed_first(stream)
    if not first:
        assert edges == []
        return
    assert len(edges) == 2 and edges[1] == f"{edges[0]}_keys", edges
    assert "SEMI JOIN" in _keys_edges(stream)[edges[1]]


#: a query whose keys cut another side's rows, by where the keys come from
def _left_sides(stream: hs.Stream) -> list[str]:
    """The edges carrying a semi or anti join's left side to the stage of its right."""
    exchanges = stream.explain_data()["spark_exchanges"]
    return sorted(name for name, text in exchanges.items() if "the left side of" in text)


EVERY_MODE = {
    "pushed": PUSHED_KEYS[0][0],
    "computed-first": COMPUTED_FIRST[0][0],
    # a filtered left side's keys cut its semi and anti joins' right sides (TPC-H Q21)
    "left-side": (
        "SELECT id, v FROM w WHERE k < 2 "
        "AND EXISTS (SELECT 1 FROM b WHERE b.k = w.k AND b.bid <> w.id) "
        "AND NOT EXISTS (SELECT 1 FROM b WHERE b.k = w.k AND b.bid > 8)"
    ),
}


@pytest.mark.parametrize("mode", ["pipelined", "blocking", "hybrid-full", "hybrid-selective"])
@pytest.mark.parametrize("kind", sorted(EVERY_MODE))
def test_keys_edges_in_every_mode(
    session: hs.Session, spark: Any, tmp_path: Path, mode: str, kind: str
) -> None:
    """The keys' edges (pushed from a broadcast side, from a semi join's side computed
    first, or from a semi or anti join's left side) and the exchanges they cut, in each
    mode: Spark's rows."""
    yaml = BASE_YAML % f", default_mode: {mode}"
    if kind == "left-side":  # the runtime join switch off: it would broadcast ``b``
        yaml += "adaptive: {broadcast_bytes: 0}\n"
    with configured(session, tmp_path, yaml):
        with spark_conf(spark, autoBroadcastJoinThreshold="-1"):
            stream = in_engine_sql(session, spark, EVERY_MODE[kind])
        found = {"pushed": _keys_edges, "computed-first": _computed_first}.get(kind, _left_sides)
        assert list(found(stream))
        edges = stream.explain_data()["edges"]
    modes = {e["name"]: e["mode"] for e in edges}
    if kind == "left-side":  # every stage of this plan ends its output at end of input
        assert all(e["mode"] == mode or e["mode_origin"] == "output-on-eof" for e in edges)
    else:
        assert mode in modes.values()


def _with_adaptive(
    session: hs.Session, spark: Any, tmp_path: Path, query: str, adaptive: str
) -> tuple[hs.Stream, hs.JobResult]:
    """``query`` run with the YAML section ``adaptive:`` set to ``adaptive`` and Spark's
    broadcasts off (sort-merge joins); its rows checked against Spark's."""
    yaml = BASE_YAML % "" + f"adaptive: {adaptive}\n"
    with configured(session, tmp_path, yaml), spark_conf(spark, autoBroadcastJoinThreshold="-1"):
        stream = session.sql(query)
        result = stream.collect()
        same_rows(rows(result.table), spark_rows(spark.sql(query)))
    return stream, result


def test_a_task_given_more_keys_than_the_cap_lets_every_row_pass(
    session: hs.Session, spark: Any, tmp_path: Path
) -> None:
    """Past ``adaptive.semi_join_filter_max_keys`` the keys' stage still runs first,
    but the exchanges carry every row they carry without the filter; under the cap,
    fewer.  The rows are Spark's each time."""
    query = COMPUTED_FIRST[0][0]
    having = "SELECT k FROM w GROUP BY k HAVING max(v) > 5"
    assert spark.sql(having).count() > 1, "more keys than a cap of 1"
    no_switch = "broadcast_bytes: 0, broadcast_max_bytes: 0"
    adaptive = {
        "off": f"{{semi_join_filters: false, {no_switch}}}",
        "capped": f"{{semi_join_filter_max_keys: 1, {no_switch}}}",
        "cut": f"{{{no_switch}}}",
    }
    crossed: dict[str, int] = {}
    for how, section in adaptive.items():
        stream, result = _with_adaptive(session, spark, tmp_path, query, section)
        assert bool(_computed_first(stream)) == (how != "off")
        # the semi join's left side and the aggregate's partial rows, from the scans
        crossed[how] = sum(e.rows for e in result.profile().edges if e.name.startswith("exchange_"))
    assert crossed["capped"] == crossed["off"] > crossed["cut"], crossed


def test_semi_join_filters_off_leaves_the_semi_join_as_spark_planned_it(
    session: hs.Session, spark: Any, tmp_path: Path
) -> None:
    yaml = BASE_YAML % "" + "adaptive: {semi_join_filters: false}\n"
    with configured(session, tmp_path, yaml), spark_conf(spark, autoBroadcastJoinThreshold="-1"):
        stream = in_engine_sql(session, spark, COMPUTED_FIRST[0][0])
    assert _computed_first(stream) == []


# -- 4c. a shuffled semi or anti join's filtered left side cuts its right side ----------

#: (query, how many right sides its filtered left side's keys cut): sort-merge semi and
#: anti joins (``autoBroadcastJoinThreshold`` off), nulls among both sides' keys
LEFT_SIDES = [
    ("SELECT id, g FROM w WHERE k < 2 AND k IN (SELECT k FROM b)", 1),
    ("SELECT id FROM w WHERE k < 2 AND NOT EXISTS (SELECT 1 FROM b WHERE b.k = w.k)", 1),
    # TPC-H Q21's shape: an EXISTS with a condition besides the key, then a NOT EXISTS
    (
        "SELECT id, v FROM w WHERE k < 2 "
        "AND EXISTS (SELECT 1 FROM b WHERE b.k = w.k AND b.bid <> w.id) "
        "AND NOT EXISTS (SELECT 1 FROM b WHERE b.k = w.k AND b.bid > 8)",
        2,
    ),
    # TPC-H Q17's shape: an inner join with an aggregate's groups, cut in its input
    (
        "SELECT w.id, a.m FROM w JOIN (SELECT k, max(bid) AS m FROM b GROUP BY k) a "
        "ON w.k = a.k WHERE w.k < 2",
        1,
    ),
    # an inner join of plain rows: the runtime join switch's, not cut
    ("SELECT w.id, b.y FROM w JOIN b ON w.k = b.k WHERE w.k < 2", 0),
    # no filter cuts the left side: its keys would cut nothing
    ("SELECT id FROM w WHERE k IN (SELECT k FROM b)", 0),
]


@pytest.mark.parametrize(("query", "cut"), LEFT_SIDES)
def test_a_semi_or_anti_joins_filtered_left_side_cuts_its_right_side(
    session: hs.Session, spark: Any, tmp_path: Path, query: str, cut: int
) -> None:
    """The left side's producer writes its rows to the stage making the right side's
    too, over a broadcast edge ``exchange_<id>_keys``, which semi-joins them there.  The
    join itself runs on what arrives, shuffled: the rows are Spark's.  (``b`` is small
    enough for the runtime join switch, which would broadcast it instead: off here.)"""
    yaml = BASE_YAML % "" + "adaptive: {broadcast_bytes: 0}\n"
    with configured(session, tmp_path, yaml), spark_conf(spark, autoBroadcastJoinThreshold="-1"):
        stream = in_engine_sql(session, spark, query)
    edges = _left_sides(stream)
    assert len(edges) == cut, edges
    partitioners = {e["name"]: e["partitioner"] for e in stream.explain_data()["edges"]}
    assert all(partitioners[e].startswith("broadcast") for e in edges)
    # such a join never becomes a broadcast join: its left side's producer would wait for
    # the right side's, which waits for its keys
    assert not cut or "may become a broadcast join" not in stream.explain()


def test_a_right_side_the_join_switch_may_broadcast_is_not_cut_by_the_left_side(
    session: hs.Session, spark: Any
) -> None:
    """Estimated within ``adaptive.broadcast_bytes``, the right side is the one to go
    first: the join may run as a broadcast join of it, and its left side stays as is."""
    with spark_conf(spark, autoBroadcastJoinThreshold="-1"):
        stream = in_engine_sql(session, spark, LEFT_SIDES[0][0])
    assert _left_sides(stream) == []
    assert "may become a broadcast join" in stream.explain()


def test_a_left_side_cuts_the_rows_crossing_its_right_sides_exchange_unless_capped(
    session: hs.Session, spark: Any, tmp_path: Path
) -> None:
    """The right side's exchange carries only the rows whose key the left side has;
    past ``adaptive.semi_join_filter_max_keys``, every row (the join's switch to a
    broadcast join off: ``broadcast_bytes: 0``).  Spark's rows each time; with
    ``semi_join_filters`` off, no left side goes first."""
    query = LEFT_SIDES[0][0]
    every = int(spark.sql("SELECT count(*) FROM b").first()[0])
    joining = "SELECT count(*) FROM b WHERE k IN (SELECT k FROM w WHERE k < 2)"
    adaptive = {
        "off": "{semi_join_filters: false}",
        "capped": "{semi_join_filter_max_keys: 1, broadcast_bytes: 0}",
        "cut": "{broadcast_bytes: 0}",
    }
    crossed: dict[str, int] = {}
    for how, section in adaptive.items():
        stream, result = _with_adaptive(session, spark, tmp_path, query, section)
        (keys,) = _left_sides(stream) or [None]
        assert (keys is None) == (how == "off")
        if keys is not None:
            edges = stream.explain_data()["edges"]
            right = next(e["target"] for e in edges if e["name"] == keys)
            (exchange,) = [e["name"] for e in edges if e["source"] == right]
            crossed[how] = next(e.rows for e in result.profile().edges if e.name == exchange)
    cut = int(spark.sql(joining).first()[0])
    assert crossed == {"capped": every, "cut": cut} and cut < every, crossed


# -- 5. shuffled joins that become broadcast joins at run time (adaptive.broadcast_bytes) --

#: (query, its join type, whether it may switch): each over a small side that Spark,
#: told not to broadcast, plans as a sort-merge join
SWITCHES = [
    ("SELECT w.id, b.y FROM w JOIN b ON w.k = b.k WHERE b.bid > 2", "Inner", True),
    ("SELECT w.id, b.y FROM w LEFT JOIN b ON w.k = b.k AND b.bid > 2", "LeftOuter", True),
    ("SELECT id, g FROM w LEFT SEMI JOIN b ON w.k = b.k AND b.bid > 2", "LeftSemi", True),
    ("SELECT id, v FROM w LEFT ANTI JOIN b ON w.k = b.k AND b.bid > 2", "LeftAnti", True),
    ("SELECT b.bid, w.id FROM b RIGHT JOIN w ON w.k = b.k", "RightOuter", True),
    # a partial aggregate above the join runs in any task: its final one is after an exchange
    (
        "SELECT b.y, count(*) AS n, sum(w.v) AS s FROM w JOIN b ON w.k = b.k GROUP BY b.y",
        "Inner",
        True,
    ),
    # never: no side of a full outer join may be built
    ("SELECT w.id, b.bid FROM w FULL JOIN b ON w.k = b.k", "FullOuter", False),
]

#: (query, its join type): a stage whose operators above the join rely on its hash
#: partitioning, which may only split (the join moves, its rows cross the probe edge)
SPLITS = [
    # a final aggregate on the join key
    ("SELECT w.k, count(*) AS n, sum(b.y) AS s FROM w JOIN b ON w.k = b.k GROUP BY w.k", "Inner"),
    # a window partitioned by it
    (
        "SELECT w.id, b.bid, rank() OVER (PARTITION BY w.k ORDER BY w.id, b.bid) AS r "
        "FROM w JOIN b ON w.k = b.k WHERE b.bid > 2",
        "Inner",
    ),
    # a final aggregate under a top-n, whose partial part runs in the join's stage
    (
        "SELECT w.k, sum(w.v) AS s, count(b.bid) AS n FROM w LEFT JOIN b "
        "ON w.k = b.k AND b.bid > 2 GROUP BY w.k ORDER BY s DESC, w.k LIMIT 3",
        "LeftOuter",
    ),
]


def _run_checked(session: hs.Session, spark: Any, query: str) -> hs.JobResult:
    """``query`` run in the engine (all of it) and equal to Spark's rows; the run's result."""
    stream = session.sql(query)
    result = stream.collect()
    df = spark.sql(query)
    assert result.table.column_names == df.columns
    same_rows(rows(result.table), spark_rows(df))
    ran_where(stream, True)
    return result


@pytest.mark.parametrize("threshold", ["default", "0"])
@pytest.mark.parametrize(("query", "kind", "switches"), SWITCHES)
def test_shuffled_join_becomes_broadcast_when_its_side_is_small(
    session: hs.Session,
    spark: Any,
    tmp_path: Path,
    query: str,
    kind: str,
    switches: bool,
    threshold: str,
) -> None:
    extra = "" if threshold == "default" else f"adaptive: {{broadcast_bytes: {threshold}}}\n"
    with spark_conf(spark, autoBroadcastJoinThreshold="-1"):
        assert [(c, k) for c, _, k in join_operators(spark, query)] == [("SortMergeJoinExec", kind)]
        with configured(session, tmp_path, BASE_YAML % "" + extra):
            before = session.sql(query).explain()
            result = _run_checked(session, spark, query)
    on = switches and threshold == "default"
    assert ("may become a broadcast join" in before) == on
    assert [c.switched for c in result.adaptive] == ([True] if on else [])
    if on:
        change = result.adaptive[0]
        assert change.spark_join.startswith("SortMergeJoin")
        assert 0 < change.build_bytes <= change.threshold == 10 * 2**20
        assert "became a broadcast join" in result.explain
        assert change.probe_edge not in {e for e in result.edges}  # its exchange left out


@pytest.mark.parametrize("max_bytes", ["default", "0"])
def test_a_build_side_over_broadcast_bytes_is_broadcast_while_the_probe_estimate_is_larger(
    session: hs.Session, spark: Any, tmp_path: Path, max_bytes: str
) -> None:
    """Past ``adaptive.broadcast_bytes`` (here 1 byte), the join still switches while a
    copy of its build side per probe task stays within the estimate of the probe side
    (``w``'s file, larger than the filtered ``b``), unless ``broadcast_max_bytes`` is 0."""
    query = SWITCHES[0][0]
    extra = "adaptive: {broadcast_bytes: 1 B%s}\n" % (
        "" if max_bytes == "default" else f", broadcast_max_bytes: {max_bytes}"
    )
    with (
        spark_conf(spark, autoBroadcastJoinThreshold="-1"),
        configured(session, tmp_path, BASE_YAML % "" + extra),
    ):
        before = session.sql(query).explain()
        result = _run_checked(session, spark, query)
    (change,) = result.adaptive
    assert change.build_bytes > change.threshold == 1
    assert change.probe_estimate is not None and change.probe_estimate > change.build_bytes
    on = max_bytes == "default"
    assert ("adaptive.broadcast_max_bytes" in before) == on
    assert change.switched == on
    assert change.limit == (change.probe_estimate if on else 1)  # one probe task: w's one file
    if on:
        assert "its limit" in result.explain and "became a broadcast join" in result.explain


@pytest.mark.parametrize(("query", "kind"), SPLITS)
def test_a_stage_that_needs_the_joins_partitioning_splits_at_the_join(
    session: hs.Session, spark: Any, query: str, kind: str
) -> None:
    """Only the join runs in the probe side's tasks; the probe edge stays and carries the
    joined rows, on the same keys, to the rest of the stage: Spark's answer still."""
    with spark_conf(spark, autoBroadcastJoinThreshold="-1"):
        assert [(c, k) for c, _, k in join_operators(spark, query)] == [("SortMergeJoinExec", kind)]
        result = _run_checked(session, spark, query)
    (change,) = result.adaptive
    assert change.switched and change.split
    assert change.probe_edge in {e for e in result.edges}  # kept: it carries the join's rows
    assert "carried the joined rows to the rest of the stage" in result.explain


#: a shuffled join of ``b`` with ``w``'s rows that a semi or anti join keeps (Spark puts
#: the ``IN``/``EXISTS`` on ``w`` below the join, and the ``IN`` on ``b`` as well, since
#: the keys are equal; all shuffled)
FILTERED_PROBES = [
    "SELECT b.y, w.id, w.v FROM b JOIN w ON b.bid = w.id "
    "WHERE b.bid > 2 AND w.id IN (SELECT b2.bid * 2 FROM b AS b2 WHERE b2.y IS NOT NULL)",
    "SELECT b.y, sum(w.v) AS s, count(*) AS n FROM b JOIN w ON b.bid = w.id WHERE NOT EXISTS "
    "(SELECT 1 FROM b AS b3 WHERE b3.k = w.id AND b3.bid > 3) GROUP BY b.y",
]


@pytest.mark.parametrize("query", FILTERED_PROBES)
def test_a_shuffled_join_splits_off_below_the_semi_and_anti_joins_of_its_side(
    session: hs.Session, spark: Any, query: str
) -> None:
    """TPC-H Q18 at SF10: the 624 orders of over 300 units are joined with ``lineitem``
    rows that the same ``IN`` keeps, all shuffled.  Once the small side is known, the join
    runs in the tasks producing the filtered side, before its semi or anti join, and only
    the joined rows cross that side's exchange to the rest of the stage, which filters
    them: Spark's answer still."""
    with spark_conf(spark, autoBroadcastJoinThreshold="-1"):
        kinds = [k for c, _, k in join_operators(spark, query) if c == "SortMergeJoinExec"]
        assert kinds[0] == "Inner" and set(kinds[1:]) <= {"LeftSemi", "LeftAnti"}
        stream = session.sql(query)
        explained = stream.explain()
        result = _run_checked(session, spark, query)
    assert "may become a broadcast join" in explained
    (change,) = result.adaptive
    assert change.switched and change.split
    assert change.probe_edge in result.edges  # kept: it carries the joined rows


def test_a_broadcast_join_in_the_stage_goes_with_the_switched_join(
    session: hs.Session, spark: Any
) -> None:
    query = (
        "SELECT /*+ BROADCAST(c) */ w.id, b.y, c.y AS cy FROM w JOIN b ON w.k = b.k "
        "JOIN b AS c ON b.bid = c.bid + 1"
    )
    with spark_conf(spark, autoBroadcastJoinThreshold="-1"):
        assert [c for c, _, _ in join_operators(spark, query)] == [
            "BroadcastHashJoinExec",
            "SortMergeJoinExec",
        ]
        result = _run_checked(session, spark, query)
    assert [c.switched for c in result.adaptive] == [True]


@pytest.mark.parametrize(("mode", "switches"), [("hybrid-full", True), ("hybrid-selective", False)])
def test_shuffled_join_switch_in_hybrid_modes(
    session: hs.Session, spark: Any, tmp_path: Path, mode: str, switches: bool
) -> None:
    """A hybrid-full build side is re-readable, so every probe task may read it whole; a
    hybrid-selective one is read once, so the join stays shuffled (explain says why)."""
    query = SWITCHES[0][0]
    with spark_conf(spark, autoBroadcastJoinThreshold="-1"):
        ids = exchange_ids(spark, lambda: spark.sql(query))
        entries = "".join(f"  exchange_{i}: {{mode: {mode}, keep: true}}\n" for i in ids)
        with configured(session, tmp_path, BASE_YAML % "" + "edges:\n" + entries):
            result = _run_checked(session, spark, query)
    assert [c.switched for c in result.adaptive] == ([True] if switches else [])
    if not switches:
        assert "whose partitions are read once" in result.explain


@pytest.mark.parametrize("query", [SWITCHES[0][0], SPLITS[0][0]], ids=["switched", "split"])
def test_switched_join_recomputes_after_an_executor_is_lost(
    session: hs.Session, spark: Any, tmp_path: Path, query: str
) -> None:
    """After the switch (or the split), a task reading the job's output stops at its
    first batch and its executor is killed: what was lost with it (the join's output,
    the build side's partitions) is computed again, and the answer is still Spark's."""
    marker, release = tmp_path / "reached", tmp_path / "release"
    with spark_conf(spark, autoBroadcastJoinThreshold="-1"):
        stream = session.sql(query).rebalance().map_batches(_gate(marker, release))
        killer = _kill_at(session, marker, release)
        result = stream.collect()
        killer.join(timeout=60)
        df = spark.sql(query)
        same_rows(rows(result.table), spark_rows(df))
    assert [c.switched for c in result.adaptive] == [True]
    assert result.restarts >= 1


def _gate(marker: Path, release: Path) -> Any:
    """A pass-through function that, at its first batch and until the test released it,
    writes its process id to ``marker`` and waits (at most 60 s): the phase gate of
    ``tests/integration/phases.py``."""
    marker_path, release_path = str(marker), str(release)

    def fn(table: pa.Table) -> pa.Table:
        if not os.path.exists(release_path):
            tmp = f"{marker_path}.{os.getpid()}.{threading.get_ident()}"
            with open(tmp, "w") as f:
                f.write(str(os.getpid()))
            os.replace(tmp, marker_path)
            deadline = time.monotonic() + 60
            while not os.path.exists(release_path) and time.monotonic() < deadline:
                time.sleep(0.01)
        return table

    return fn


def _kill_at(session: hs.Session, marker: Path, release: Path) -> threading.Thread:
    """Once ``marker`` names a process, kill the executor running in it, then release
    the gate (``tests/integration/phases.py``'s ``kill_at``)."""

    def kill() -> None:
        try:
            deadline = time.monotonic() + 60
            while not marker.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            pid = int(marker.read_text())
            victims = [i for i, info in enumerate(session.executor_info) if info["pid"] == pid]
            for i in victims:
                ray.kill(session.executors[i])
        finally:
            release.touch()

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread


# -- streaming edges into hash joins (issue 36) ----------------------------------------------

SHUFFLED_HASH = "SELECT /*+ SHUFFLE_HASH(b) */ w.id, w.v, b.bid, b.y FROM w JOIN b ON w.k = b.k"


def _join_edges(stream: hs.Stream) -> dict[str, tuple[str, str]]:
    """The translated exchanges' (mode, mode origin), by name."""
    edges = stream.explain_data()["edges"]
    return {e["name"]: (e["mode"], e["mode_origin"]) for e in edges if "exchange_" in e["name"]}


@pytest.mark.parametrize("mode", ["pipelined", "hybrid-selective"])
def test_a_shuffled_hash_join_streams_its_probe_edge_and_reads_its_build_edge_whole(
    session: hs.Session, spark: Any, tmp_path: Path, mode: str
) -> None:
    """A shuffled hash join emits while its probe side arrives, once its build side
    ended: with a streaming default the probe side's edge runs as set, and only the
    build side's becomes batch (FLIP-331's rule, per input); the rows are Spark's."""
    with configured(session, tmp_path, BASE_YAML % f", default_mode: {mode}"):
        stream = check_sql(session, spark, SHUFFLED_HASH, in_engine=True)
        edges = _join_edges(stream)
        text = stream.explain()
    assert sorted(edges.values()) == sorted([(mode, "default"), ("blocking", "output-on-eof")]), (
        edges
    )
    assert "(sql, streams input 0 once the others ended)" in text


def test_a_broadcast_join_streams_the_shuffled_probe_side_into_it(
    session: hs.Session, spark: Any, tmp_path: Path
) -> None:
    """A broadcast hash join over a shuffled probe side: the hash edge into the join's
    stage runs pipelined (the default set), the broadcast edge is batch; Spark's rows."""
    df = (
        spark.table("w")
        .repartition(3, "k")
        .join(F.broadcast(spark.table("b")), "k")
        .select("id", "v", "bid", "y")
    )
    with configured(session, tmp_path, BASE_YAML % ", default_mode: pipelined"):
        stream = session.from_dataframe(df, "probe")
        check(session, stream, df, in_engine=True)
        modes = sorted(stream.explain_data()["edges"], key=lambda e: e["name"])
    by_kind = {e["partitioner"].split("(")[0]: (e["mode"], e["mode_origin"]) for e in modes}
    assert by_kind["hash"] == ("pipelined", "default"), modes
    assert by_kind["broadcast"] == ("blocking", "output-on-eof"), modes
