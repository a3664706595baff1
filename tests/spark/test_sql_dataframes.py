"""``Session.sql`` / ``from_dataframe`` on DataFrame-API and SQL constructs beyond TPC-H,
each against Spark itself: the same rows (in order where the DataFrame is ordered) and
the same schema."""

from __future__ import annotations

import datetime
import decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import Window
from pyspark.sql import functions as F

import hybrid_shuffle as hs

from .oracle import (
    BASE_YAML,
    check,
    check_sql,
    configured,
    exact_value,
    exchange_ids,
    formatted_plan,
    key,
    parquet_views,
    rows,
    same_rows,
    spark_conf,
    spark_rows,
    spark_table,
    subtrees,
)

pytestmark = pytest.mark.spark

ROWS = 200


def _t_table() -> pa.Table:
    ids = list(range(ROWS))
    start = datetime.date(2020, 1, 1)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "k": pa.array([None if i % 7 == 0 else i % 10 for i in ids], pa.int32()),
            "g": pa.array([None if i % 11 == 0 else f"g{i % 4}" for i in ids], pa.string()),
            "v": pa.array([None if i % 5 == 0 else i * 0.5 - 20 for i in ids], pa.float64()),
            "d": pa.array(
                [None if i % 9 == 0 else decimal.Decimal(i) * decimal.Decimal("1.25") for i in ids],
                pa.decimal128(10, 2),
            ),
            "e": pa.array(
                [decimal.Decimal(i % 13) * decimal.Decimal("0.125") + 1 for i in ids],
                pa.decimal128(7, 3),
            ),
            "day": pa.array(
                [None if i % 17 == 0 else start + datetime.timedelta(days=5 * i) for i in ids],
                pa.date32(),
            ),
        }
    )


def _u_table() -> pa.Table:
    ids = list(range(60))
    return pa.table(
        {
            "uid": pa.array(ids, pa.int64()),
            "k": pa.array([None if i % 6 == 0 else i % 15 for i in ids], pa.int32()),
            "w": pa.array([f"w{i % 5}" for i in ids], pa.string()),
        }
    )


@pytest.fixture(scope="module")
def spark(session: hs.Session, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Spark with two Parquet views, ``t`` (200 rows) and ``u`` (60), nulls in every key."""
    root = tmp_path_factory.mktemp("sql_dataframes")
    return parquet_views(session.spark, root, {"t": _t_table(), "u": _u_table()})


# -- 1. windows --------------------------------------------------------------------------


def test_ranking_functions_partitioned(session: hs.Session, spark: Any) -> None:
    stream = check_sql(
        session,
        spark,
        """SELECT id, k,
             rank() OVER (PARTITION BY k ORDER BY g) AS r,
             dense_rank() OVER (PARTITION BY k ORDER BY g DESC) AS dr,
             row_number() OVER (PARTITION BY k ORDER BY v DESC NULLS LAST, id) AS rn
           FROM t""",
    )
    assert subtrees(stream) == []


def test_window_aggregates_over_frames(session: hs.Session, spark: Any) -> None:
    t = spark.table("t")
    by_k = Window.partitionBy("k").orderBy("id")
    df = t.select(
        "id",
        "k",
        F.sum("v").over(by_k.rowsBetween(-2, 0)).alias("sum_rows"),
        F.avg("v").over(by_k.rangeBetween(Window.unboundedPreceding, 20)).alias("avg_range"),
        F.min("v").over(by_k.rowsBetween(Window.currentRow, Window.unboundedFollowing)).alias("mn"),
        F.max("d").over(Window.partitionBy("k")).alias("mx"),
        F.count("v").over(Window.partitionBy("k")).alias("cnt"),
        F.sum("d").over(by_k).alias("running"),
        F.count(F.lit(1)).over(Window.partitionBy("g").orderBy("k")).alias("peers"),
    )
    stream = session.from_dataframe(df)
    check(session, stream, df)
    assert subtrees(stream) == []


def test_window_decimal_average_and_range_over_nulls(session: hs.Session, spark: Any) -> None:
    stream = check_sql(
        session,
        spark,
        """SELECT id,
             avg(d) OVER (PARTITION BY g ORDER BY id ROWS BETWEEN 3 PRECEDING AND 1 FOLLOWING)
               AS avg_d,
             avg(e) OVER (PARTITION BY k) AS avg_e,
             sum(v) OVER (PARTITION BY g ORDER BY k RANGE BETWEEN 1 PRECEDING AND CURRENT ROW)
               AS near,
             count(k) OVER (ORDER BY k DESC RANGE BETWEEN CURRENT ROW AND 2 FOLLOWING) AS ahead
           FROM t""",
    )
    assert subtrees(stream) == []


def test_window_without_partition_gathers_to_one_subtask(session: hs.Session, spark: Any) -> None:
    def build() -> Any:
        # 3 partitions: from one (local mode with one thread) Spark plans no exchange at all
        df = spark.range(0, 50, numPartitions=3).selectExpr(
            "id", "CASE WHEN id % 7 = 0 THEN NULL ELSE id % 9 END AS x"
        )
        return df.select(
            "id",
            F.row_number().over(Window.orderBy(F.desc("id"))).alias("rn"),
            F.sum("x").over(Window.orderBy("id")).alias("running"),
            F.avg("x").over(Window.orderBy("id").rowsBetween(-3, 3)).alias("moving"),
        )

    df = build()
    stream = session.from_dataframe(df)
    check(session, stream, df)
    edges = {e["name"]: e for e in stream.explain_data()["edges"]}
    (single,) = [e for e in exchange_ids(spark, build) if f"exchange_{e}" in edges]
    assert edges[f"exchange_{single}"]["partitions"] == 1


# -- 2. set operations, semi/anti and outer joins ----------------------------------------


def test_union_and_union_by_name(session: hs.Session, spark: Any) -> None:
    t, u = spark.table("t"), spark.table("u")
    df = t.select("k", "g").union(u.select("k", "w"))
    check(session, session.from_dataframe(df), df)
    by_name = t.select("k", F.col("id").alias("n")).unionByName(
        u.select(F.col("uid").alias("n"), "k")
    )
    check(session, session.from_dataframe(by_name), by_name)


def test_distinct_and_drop_duplicates(session: hs.Session, spark: Any) -> None:
    t = spark.table("t")
    df = t.select("k", "g").distinct()
    check(session, session.from_dataframe(df), df)
    dedup = t.select("k", "g", "id").dropDuplicates(["k", "g"]).select("k", "g")
    check(session, session.from_dataframe(dedup), dedup)


@pytest.mark.parametrize("how", ["left_semi", "left_anti"])
def test_semi_and_anti_joins_with_null_keys(session: hs.Session, spark: Any, how: str) -> None:
    t, u = spark.table("t"), spark.table("u")
    df = t.join(u, on="k", how=how).select("id", "k", "g")
    check(session, session.from_dataframe(df), df)


def test_in_and_not_in_subqueries(session: hs.Session, spark: Any) -> None:
    # u.k has nulls: NOT IN keeps nothing; without them, rows whose k is not in u
    for query in (
        "SELECT id, k FROM t WHERE k IN (SELECT k FROM u WHERE uid > 20)",
        "SELECT id, k FROM t WHERE k NOT IN (SELECT k FROM u)",
        "SELECT id, k FROM t WHERE k NOT IN (SELECT k FROM u WHERE k IS NOT NULL AND k < 6)",
        "SELECT id, k FROM t WHERE k NOT IN (SELECT k FROM u WHERE uid < 0)",
    ):
        check_sql(session, spark, query)


def test_exists_and_not_exists(session: hs.Session, spark: Any) -> None:
    for query in (
        "SELECT id FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.k = t.k AND u.uid > t.id)",
        "SELECT id FROM t WHERE NOT EXISTS (SELECT 1 FROM u WHERE u.k = t.k)",
        "SELECT id, k FROM t WHERE k > 3 OR EXISTS (SELECT 1 FROM u WHERE u.k = t.k)",
    ):
        check_sql(session, spark, query)


@pytest.mark.parametrize("how", ["left", "right", "full"])
def test_outer_joins_with_null_keys_and_a_condition(
    session: hs.Session, spark: Any, how: str
) -> None:
    t, u = spark.table("t"), spark.table("u")
    df = t.join(u, (t.k == u.k) & (t.id % 3 != u.uid % 3), how).select(
        "id", t.k.alias("tk"), "uid", u.k.alias("uk"), "w"
    )
    check(session, session.from_dataframe(df), df)


def test_cross_join_of_small_sides(session: hs.Session, spark: Any) -> None:
    t, u = spark.table("t"), spark.table("u")
    df = t.where("id < 12").select("id", "g").crossJoin(u.where("uid < 5").select("uid", "w"))
    check(session, session.from_dataframe(df), df)


# -- 3. decimals, dates, aggregates ------------------------------------------------------


def test_decimal_arithmetic_and_average(session: hs.Session, spark: Any) -> None:
    check_sql(
        session,
        spark,
        """SELECT id, d + e AS a, d - e AS b, d * e AS c, d / e AS q, e / 3 AS third,
             d * 1.5 AS scaled, CAST(v AS DECIMAL(12,4)) / d AS mixed, d % 7 AS m
           FROM t""",
    )
    check_sql(
        session,
        spark,
        "SELECT k, avg(d) AS ad, avg(e) AS ae, sum(d * e) AS s, min(d) AS lo FROM t GROUP BY k",
    )


def test_dates(session: hs.Session, spark: Any) -> None:
    check_sql(
        session,
        spark,
        """SELECT id, date_add(day, 10) AS later, date_sub(day, 3) AS earlier,
             datediff(day, DATE'2021-01-01') AS since, year(day) AS y, month(day) AS m,
             day > DATE'2021-06-01' AS after
           FROM t WHERE day IS NULL OR day BETWEEN DATE'2020-03-01' AND DATE'2022-03-01'""",
    )
    check_sql(
        session,
        spark,
        "SELECT year(day) AS y, count(*) AS n, max(day) AS last FROM t GROUP BY year(day)",
    )


def test_several_distinct_aggregates(session: hs.Session, spark: Any) -> None:
    # Spark plans Expand (whose projections its JSON omits: basic._jvm_projections) and
    # aggregates with FILTER (WHERE gid = n), the final one's first(.., true) among them
    stream = check_sql(
        session,
        spark,
        """SELECT k, count(DISTINCT g) AS gs, count(DISTINCT day) AS days, sum(v) AS s,
             count(*) AS n
           FROM t GROUP BY k""",
    )
    assert subtrees(stream) == []


def test_rollup_and_cube(session: hs.Session, spark: Any) -> None:
    check_sql(
        session,
        spark,
        "SELECT k, g, sum(v) AS s, count(*) AS n, grouping_id() AS gid "
        "FROM t WHERE k < 4 GROUP BY ROLLUP(k, g)",
    )
    t = spark.table("t").where("k < 3")
    cube = t.cube("k", "g").agg(F.count("*").alias("n"), F.max("id").alias("top"))
    check(session, session.from_dataframe(cube), cube)


def test_first_and_stddev(session: hs.Session, spark: Any) -> None:
    # first() of a value the group decides, so Spark's pick is deterministic
    check_sql(
        session,
        spark,
        """SELECT k, first(k * 2) AS f,
             first(CASE WHEN id % 2 = 0 THEN NULL ELSE k + 1 END, true) AS fk,
             stddev(v) AS sd, stddev_pop(v) AS sp, var_samp(d) AS vs
           FROM t GROUP BY k""",
    )


# -- 4. ordering and limits --------------------------------------------------------------


def test_order_by_with_limit(session: hs.Session, spark: Any) -> None:
    t = spark.table("t")
    df = t.orderBy(F.col("v").desc_nulls_last(), "id").limit(15).select("id", "v", "g")
    stream = session.from_dataframe(df)
    check(session, stream, df, ordered=True)
    assert any(e.startswith("gather_") for e in stream.explain_data()["spark_exchanges"])


def test_order_by_with_limit_and_offset(session: hs.Session, spark: Any) -> None:
    check_sql(
        session, spark, "SELECT id, k FROM t ORDER BY k DESC NULLS FIRST, id LIMIT 9 OFFSET 4", True
    )


def test_limit_without_order_returns_n_input_rows(session: hs.Session, spark: Any) -> None:
    t = spark.table("t")
    everything = set(spark_rows(t))
    for stream in (session.from_dataframe(t.limit(7)), session.sql("SELECT * FROM t LIMIT 7")):
        got = rows(stream.to_arrow())
        assert len(got) == 7
        assert set(got) <= everything


@pytest.mark.parametrize("order", [0, 1])
def test_global_sort_with_null_order(session: hs.Session, spark: Any, order: int) -> None:
    keys = [
        [F.col("k").asc_nulls_last(), F.col("v").desc(), "id"],
        [F.col("g").desc_nulls_first(), F.col("day").asc(), F.col("id").desc()],
    ][order]
    df = spark.table("t").orderBy(*keys).select("id", "k", "g", "v", "day")
    check(session, session.from_dataframe(df), df, ordered=True)


def _o_table() -> pa.Table:
    """2,000 rows of many ties: doubles with nulls, NaN, -0.0 and 0.0, infinities;
    strings with nulls, '' and a proper prefix; floats, decimals, dates, booleans."""
    ids = list(range(2000))
    doubles = [None, float("nan"), -0.0, 0.0, float("inf"), float("-inf"), 1.5, -2.5, 1e300]
    words = [None, "", "a", "ab", "é", "Z", "b\x00", "b"]
    start = datetime.date(1969, 12, 25)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "f": pa.array([doubles[i * 7 % 9] if i % 3 else i % 41 - 20.5 for i in ids]),
            "s": pa.array([words[i * 5 % 8] for i in ids], pa.string()),
            "r": pa.array(
                [None if i % 13 == 0 else [float("nan"), -0.0, 0.5][i % 3] for i in ids],
                pa.float32(),
            ),
            "d": pa.array(
                [None if i % 11 == 0 else decimal.Decimal(i % 37 - 18) / 8 for i in ids],
                pa.decimal128(9, 3),
            ),
            "day": pa.array(
                [None if i % 17 == 0 else start + datetime.timedelta(days=i % 23) for i in ids],
                pa.date32(),
            ),
            "b": pa.array([None if i % 19 == 0 else i % 2 == 0 for i in ids], pa.bool_()),
        }
    )


def _tie_free(v: Any) -> Any:
    """A value to sort rows by: NaN as a string, -0.0 as 0.0 (a sort may return either)."""
    v = exact_value(v)
    return v + 0.0 if isinstance(v, float) else v


def same_sorted_rows(got: pa.Table, want: pa.Table, keys: int) -> None:
    """Rows of an ``ORDER BY`` whose first ``keys`` columns are its keys: the keys in
    exactly Spark's sequence (tied rows may come in any order), the rows the same."""
    assert got.column_names == want.column_names
    mine, spark = rows(got, exact_value), rows(want, exact_value)
    assert [r[:keys] for r in mine] == [r[:keys] for r in spark]  # -0.0 == 0.0, NaN as text
    assert same_multiset(mine, spark)


def same_multiset(mine: list[tuple[Any, ...]], spark: list[tuple[Any, ...]]) -> bool:
    def normal(r: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(_tie_free(v) for v in r)

    return sorted(map(normal, mine), key=key) == sorted(map(normal, spark), key=key)


#: ``ORDER BY`` queries over ``o`` and how many leading columns are their keys
SORTS = [
    ("SELECT f, s, id FROM o ORDER BY f, s", 2),
    ("SELECT f, s, id FROM o ORDER BY f DESC NULLS LAST, s DESC", 2),
    ("SELECT s, f, id FROM o ORDER BY s NULLS LAST, f DESC NULLS FIRST", 2),
    ("SELECT b, d, day, r, id FROM o ORDER BY b DESC, d, day DESC NULLS LAST, r NULLS LAST", 4),
    ("SELECT f * 2 AS g, id FROM o ORDER BY f * 2 DESC, id", 2),
    ("SELECT id FROM o ORDER BY s, f DESC, id", 1),  # the keys projected away
]


@pytest.mark.parametrize("parallelism", [2, 4])
def test_a_global_sort_is_a_range_edge_in_spark_s_order(
    session: hs.Session, spark: Any, tmp_path: Path, parallelism: int
) -> None:
    """``rangepartitioning`` becomes a range edge with ``parallelism`` consumer subtasks
    (binary sort keys in Spark's order, boundaries sampled, buffers of 16 KiB, many of
    them straddling the boundaries), and the collected result is Spark's ``ORDER BY``."""
    parquet_views(spark, tmp_path, {"o": _o_table()})
    yaml = (BASE_YAML % "").replace("parallelism: 2", f"parallelism: {parallelism}")
    with configured(session, tmp_path, yaml.replace("buffer_size: 1 MiB", "buffer_size: 16 KiB")):
        for query, keys in SORTS:
            stream = session.sql(query)
            ranges = [e for e in stream.explain_data()["edges"] if "range(" in e["partitioner"]]
            assert [e["partitions"] for e in ranges] == [parallelism], query
            result = stream.collect()
            assert result.vertices["result"].subtasks == parallelism
            same_sorted_rows(result.table, spark_table(spark.sql(query)), keys)
            assert subtrees(stream) == []


def test_a_range_sorted_result_keeps_its_order_past_a_limit_and_back_in_spark(
    session: hs.Session, spark: Any, tmp_path: Path
) -> None:
    """Rows after the sort are gathered one subtask after the other for a limit Spark
    plans without a top-n (over a generator); ``to_spark()`` keeps the order; a window
    after the sort (which Spark partitions again) still runs."""
    parquet_views(spark, tmp_path, {"o": _o_table()})
    yaml = (BASE_YAML % "").replace("parallelism: 2", "parallelism: 3")
    with configured(session, tmp_path, yaml.replace("buffer_size: 1 MiB", "buffer_size: 16 KiB")):
        limited = (
            "SELECT explode(array(id, -id)) AS e, f FROM "
            "(SELECT id, f FROM o ORDER BY f DESC, id) LIMIT 3000"
        )
        stream = check_sql(session, spark, limited, ordered=True, value=exact_value)
        (gather,) = [e for e in stream.explain_data()["edges"] if e["name"].startswith("gather_")]
        assert gather["partitioner"] == "round-robin (in producer order)"
        query = "SELECT s, id FROM o ORDER BY s DESC NULLS FIRST, id"
        back = session.sql(query).to_spark()
        assert [tuple(r) for r in back.collect()] == [tuple(r) for r in spark.sql(query).collect()]
        check_sql(
            session,
            spark,
            "SELECT id, row_number() OVER (PARTITION BY s ORDER BY id) AS n "
            "FROM (SELECT * FROM o ORDER BY f)",
        )


def test_partitions_auto_on_a_range_edge_keeps_the_buckets_in_order(
    session: hs.Session, spark: Any, tmp_path: Path
) -> None:
    """A blocking range edge with ``partitions: auto`` gets the count its bytes ask for
    (4, within the session's 2 slots), each consumer the next key interval of as many:
    the result is still Spark's order."""
    parquet_views(spark, tmp_path, {"o": _o_table()})
    query = "SELECT s, f, id FROM o ORDER BY s DESC, f"
    (exchange,) = exchange_ids(spark, lambda: spark.sql(query))
    yaml = (
        (BASE_YAML % "").replace("buffer_size: 1 MiB", "buffer_size: 8 KiB")
        + "adaptive: {target_bytes: 16 KiB, max_partitions: 8}\n"
        + f"edges:\n  exchange_{exchange}: {{mode: blocking, partitions: auto}}\n"
    )
    with configured(session, tmp_path, yaml):
        stream = session.sql(query)
        (edge,) = [e for e in stream.explain_data()["edges"] if e["name"] == f"exchange_{exchange}"]
        assert edge["partitions"] == "auto"
        result = stream.collect()
    assert result.vertices["result"].subtasks == 2
    same_sorted_rows(result.table, spark_table(spark.sql(query)), 2)


# -- 5. fallback ---------------------------------------------------------------------------

EXPLODE = "SELECT id, x FROM t LATERAL VIEW explode(sequence(0, k % 3)) s AS x WHERE k < 5"


def test_generate_falls_back_to_spark(session: hs.Session, spark: Any) -> None:
    stream = check_sql(session, spark, EXPLODE)
    (found,) = [s for s in subtrees(stream) if s["operator"].startswith("Generate")]
    assert found["reason"]
    assert found["operator"] in stream.explain()
    with pytest.raises(hs.UnsupportedPlanError, match="Generate"):
        session.sql(EXPLODE, fallback="error")


# -- 6. YAML modes on exchange_<id> --------------------------------------------------------


AGGREGATE = "SELECT k, count(*) AS n, sum(v) AS s FROM t GROUP BY k"


def test_yaml_mode_on_an_exchange_edge(session: hs.Session, spark: Any, tmp_path: Path) -> None:
    (exchange,) = exchange_ids(spark, lambda: spark.sql(AGGREGATE))
    edge = f"exchange_{exchange}"
    yaml = BASE_YAML % "" + f"edges:\n  {edge}: {{mode: blocking}}\n"
    with configured(session, tmp_path, yaml):
        stream = check_sql(session, spark, AGGREGATE)
        (found,) = [e for e in stream.explain_data()["edges"] if e["name"] == edge]
    assert (found["mode"], found["mode_origin"]) == ("blocking", "yaml")


def test_the_engine_plans_its_copy_without_touching_the_users_session(
    session: hs.Session, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine plans the query again with adaptive execution off, in a clone of the
    user's session: the user's session (another of the user's threads may run a query
    in it meanwhile) keeps adaptive execution on throughout, and the edges still carry
    the ids the user's own ``explain(mode="formatted")`` prints, adaptive."""
    from hybrid_shuffle.sparkplan.shim import Shim

    seen: list[str] = []
    plan = Shim.dataset_of_rows

    def planning(self: Shim, jvm: Any, clone: Any, logical: Any) -> Any:
        seen.append(str(spark.conf.get("spark.sql.adaptive.enabled")))
        return plan(self, jvm, clone, logical)

    monkeypatch.setattr(Shim, "dataset_of_rows", planning)
    (exchange,) = exchange_ids(spark, lambda: spark.sql(AGGREGATE))
    stream = check_sql(session, spark, AGGREGATE)
    assert seen and set(seen) == {"true"}
    assert f"exchange_{exchange}" in [e["name"] for e in stream.explain_data()["edges"]]


def test_default_mode_auto_on_a_translated_plan(
    session: hs.Session, spark: Any, tmp_path: Path
) -> None:
    with configured(session, tmp_path, BASE_YAML % ", default_mode: auto"):
        stream = check_sql(
            session,
            spark,
            "SELECT t.k, count(*) AS n FROM t JOIN u ON t.k = u.k GROUP BY t.k",
        )
        edges = stream.explain_data()["edges"]
    exchanges = [e for e in edges if e["name"].startswith("exchange_")]
    assert exchanges and all(e["mode_origin"] in ("auto", "output-on-eof") for e in exchanges)


# -- 7. errors -----------------------------------------------------------------------------


def test_spark_rejects_the_query_in_one_sentence(session: hs.Session, spark: Any) -> None:
    with pytest.raises(hs.PlanError) as raised:
        session.sql("SELECT nope FROM t")
    message = str(raised.value)
    assert "UNRESOLVED_COLUMN" in message
    assert "JVM stacktrace" not in message and "at org.apache" not in message


def test_bad_arguments_are_plan_errors(session: hs.Session, spark: Any) -> None:
    with pytest.raises(hs.PlanError, match="DataFrame"):
        session.from_dataframe("not a df")
    with pytest.raises(hs.PlanError, match="bogus"):
        session.sql("SELECT 1 AS one FROM t", fallback="bogus")


# -- 7. what the plan's JSON leaves out, and subtrees Spark computes ---------------------


def test_like_with_an_escape_character_other_than_backslash(
    session: hs.Session, spark: Any
) -> None:
    """The JSON writes a ``Like``'s escape character as null; the engine reads it from the
    JVM, on a literal pattern and on a column pattern (``a LIKE b ESCAPE '/'``).  A
    literal pattern without the escape character is matched without ``ESCAPE`` (DuckDB's
    faster path): ``w`` and ``t`` take it (in ``t`` a backslash that is not the escape
    character is a plain character), ``v`` and ``u`` do not (a backslash that is)."""
    stream = check_sql(
        session,
        spark,
        "SELECT a LIKE b ESCAPE '/' AS x, a ILIKE b ESCAPE '/' AS y, a LIKE 'x/%%' ESCAPE '/' "
        "AS z, a LIKE '%/%' AS w, a LIKE 'g_\\\\%%' AS v, a LIKE '%\\\\\\\\%' AS u, "
        "a LIKE '%\\\\%' ESCAPE '/' AS t FROM (SELECT concat(g, CASE WHEN k % 3 = 0 "
        "THEN '\\\\' ELSE '%/' END, CAST(k AS STRING)) AS a, 'g_/%//%' AS b FROM t) AS s",
    )
    assert subtrees(stream) == []


def test_a_join_over_a_subtree_spark_computes_keeps_its_partitioning(
    session: hs.Session, spark: Any
) -> None:
    """Spark plans no exchange above an aggregate already hash-partitioned by the join's
    key; when that aggregate runs in Spark (approx_count_distinct has no translation), its
    rows are partitioned again by the engine on the same key (an edge handover_<id>), so
    the join meets every key's rows (before: no row joined)."""
    query = (
        "SELECT x.k, x.a, y.n FROM (SELECT k, approx_count_distinct(g) AS a FROM t "
        "GROUP BY k) x JOIN (SELECT k, count(*) AS n FROM u GROUP BY k) y ON x.k = y.k"
    )
    with spark_conf(spark, autoBroadcastJoinThreshold="-1"):
        stream = check_sql(session, spark, query)
    assert subtrees(stream), "the test needs the aggregate to run in Spark"
    assert any(e.startswith("handover_") for e in stream.explain_data()["spark_exchanges"])


def test_an_aggregate_spark_plans_in_one_step_over_a_join_on_its_keys_runs_here(
    session: hs.Session, spark: Any
) -> None:
    """Over a sort-merge join already partitioned on the grouping key, Spark 4 plans one
    aggregate in ``Complete`` mode (Spark 3.5 a partial and a final one, which the engine
    fuses): it reads rows, not buffers, and runs in the engine (TPC-H Q3, Q13 and Q18 at
    SF1 fell back to Spark on Spark 4)."""
    query = (
        "SELECT t.k, sum(t.d) AS s, avg(t.v) AS a, count(*) AS n, max(u.w) AS w "
        "FROM t JOIN u ON t.k = u.k GROUP BY t.k"
    )
    with spark_conf(spark, autoBroadcastJoinThreshold="-1"):
        stream = check_sql(session, spark, query)
    assert subtrees(stream) == []


def test_in_lists_spark_turns_into_an_inset_run_in_the_engine(
    session: hs.Session, spark: Any
) -> None:
    """An IN list of more than ten values is an ``InSet``, whose values the JSON writes as
    null: they are read from the JVM (numbers, strings, decimals, a null among them)."""
    stream = check_sql(
        session,
        spark,
        "SELECT id, k, g FROM t WHERE k IN (0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, NULL) "
        "OR g IN ('g1', 'x1', 'x2', 'x3', 'x4', 'x5', 'x6', 'x7', 'x8', 'x9', 'x10', 'x11') "
        "OR d IN (1.25, 2.50, 3.75, 5.00, 6.25, 7.50, 8.75, 10.00, 11.25, 12.50, 13.75)",
    )
    assert subtrees(stream) == []


def test_a_scalar_subquery_reused_in_two_stages(session: hs.Session, spark: Any) -> None:
    """Spark reuses one scalar subquery below and above an aggregate's exchange (TPC-DS
    q44): each stage reads its value over an edge of its own."""
    stream = check_sql(
        session,
        spark,
        "SELECT k, avg(v) AS a FROM t WHERE v > (SELECT avg(v) FROM t) GROUP BY k "
        "HAVING avg(v) > 0.5 * (SELECT avg(v) FROM t)",
    )
    edges = [e for e in stream.explain_data()["spark_exchanges"] if e.startswith("subquery_")]
    assert len(edges) == len(set(edges))


def test_a_subquery_edge_keeps_its_name_from_one_run_to_the_next(
    session: hs.Session, spark: Any, tmp_path: Path
) -> None:
    """Spark gives a scalar subquery a new expression id each time it analyses the query;
    its edge is named by the number of its section in the formatted plan
    (``Subquery:1``), so a config naming the edge holds the next time the query runs."""
    query = "SELECT k, count(*) AS n FROM t WHERE v > (SELECT avg(v) FROM t) GROUP BY k"
    assert "Subquery:1 Hosting operator id" in formatted_plan(spark.sql(query))
    names = [
        sorted(e for e in session.sql(query).explain_data()["spark_exchanges"] if "subquery" in e)
        for _ in range(2)
    ]
    assert names[0] == names[1] == ["subquery_1"]
    yaml = BASE_YAML % "" + "edges:\n  subquery_1: {mode: blocking}\n"
    with configured(session, tmp_path, yaml):
        for _ in range(2):
            stream = check_sql(session, spark, query)
            (found,) = [e for e in stream.explain_data()["edges"] if e["name"] == "subquery_1"]
            assert (found["mode"], found["mode_origin"]) == ("blocking", "yaml")


def test_array_literals_spark_folds_run_in_the_engine(session: hs.Session, spark: Any) -> None:
    """``array(...)`` of constants is folded into an array literal, which the JSON writes
    as text (``[a, b,c, d]`` does not say where a string ends): its elements are read
    from the JVM."""
    stream = check_sql(
        session,
        spark,
        "SELECT id, element_at(array(10, 20, NULL), CAST(1 + id % 3 AS INT)) AS e, "
        "array('a', 'b, c', 'd''') AS s, size(array(1.50, 2.25)) AS n, "
        "array_contains(array(CAST(1 AS BIGINT), 7), id % 9) AS c FROM t",
    )
    assert subtrees(stream) == []
    exploded = check_sql(session, spark, "SELECT explode(array(1, 2, 3)) AS x")
    assert subtrees(exploded) == []


def test_try_arithmetic_is_null_where_integers_would_wrap(session: hs.Session, spark: Any) -> None:
    """``try_add`` is ``Add`` in TRY mode, which the JSON writes as null: read from the JVM,
    it gives null on overflow where ``+`` wraps."""
    stream = check_sql(
        session,
        spark,
        "SELECT id, try_add(k, 2147483640) AS a, try_subtract(-2147483640, k) AS b, "
        "try_multiply(id, 92233720368547758) AS c, try_add(id, 1) AS d FROM t",
    )
    assert subtrees(stream) == []


def test_profile_of_a_dataframe_counts_spark_s_planning(session: hs.Session, spark: Any) -> None:
    """``JobResult.profile()`` of a translated DataFrame: Spark's planning and the
    translation come first, and the total is theirs plus the run's."""
    df = spark.table("t").groupBy("k").agg(F.count("*").alias("n"))
    stream = session.from_dataframe(df)
    result = stream.collect()
    same_rows(rows(result.table), spark_rows(df))
    p = result.profile()
    assert [ph.name for ph in p.phases][:3] == ["spark", "translate", "plan"]
    assert p.phase("spark") > 0 and p.phase("translate") > 0
    spent = stream.job.spark_total_seconds
    assert spent is not None and abs(p.total_seconds - (spent + result.wall_seconds)) < 1e-9
    assert abs(sum(ph.seconds for ph in p.phases) - p.total_seconds) < 1e-6
    assert p.critical_path[-1] == p.vertices[-1].name
