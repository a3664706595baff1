"""Spark -> engine -> Spark keeps every type; shapes that trip bridges work."""

from __future__ import annotations

import dataclasses
import math
import warnings
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import ray

import hybrid_shuffle as hs

pytestmark = pytest.mark.spark

MATRIX = """
select * from values
 (cast(1 as tinyint), cast(2 as smallint), 3, cast(4 as bigint), cast(1.5 as float), 2.5d,
  cast(12.34 as decimal(10,2)), cast('123456789.0123456789' as decimal(38,10)), 'héllo', true,
  date'2024-02-29', timestamp'2024-01-01 12:34:56.789', timestamp_ntz'2024-01-01 01:02:03',
  X'DEADBEEF', array(1, 2, null), named_struct('a', 1, 'b', 'x'),
  array(named_struct('k', 'x', 'v', 1.0d))),
 (null, null, null, null, null, null, null, null, null, null, null, null, null, null, null,
  null, null),
 (cast(-128 as tinyint), cast(-3 as smallint), -7, cast(9007199254740993 as bigint),
  cast('NaN' as float), -0.0d, cast(-0.01 as decimal(10,2)),
  cast('-1.0000000001' as decimal(38,10)), '', false, date'1970-01-01',
  timestamp'1969-12-31 23:59:59', timestamp_ntz'2100-01-01 00:00:00', X'', array(),
  named_struct('a', null, 'b', null), array())
 as t(b, s, i, l, f, d, dec, dec38, str, bool, dt, ts, tsntz, bin, arr, st, arr_st)
"""


def round_trip(session: hs.Session, df: Any, name: str) -> Any:
    job = session.job(name)
    return job.from_spark(df, name="in").rebalance(edge="through", mode="blocking").to_spark()


def _nan_safe(value: Any) -> Any:
    """NaN != NaN in Python; compare it as a marker."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, dict):
        return {k: _nan_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nan_safe(v) for v in value]
    return value


def owners(refs: list[Any]) -> set[str]:
    """The Ray workers owning the objects of ``refs`` (hex worker ids)."""
    from ray.core.generated.common_pb2 import Address

    core = ray._private.worker.global_worker.core_worker
    return {Address.FromString(core.get_owner_address(r)).worker_id.hex() for r in refs}


def holder_worker(session: hs.Session) -> str:
    """The worker of the session's Spark holder (the executors' hand-over path was taken)."""
    holder = session.bridge._holder
    assert holder is not None
    worker: str = ray.get(holder.worker_id.remote(), timeout=60)
    assert worker != ray.get_runtime_context().get_worker_id()  # not the driver
    return worker


def rows(df: Any) -> list[Any]:
    return sorted((_nan_safe(r.asDict(recursive=True)) for r in df.collect()), key=repr)


def test_every_type_round_trips_with_nulls(session: hs.Session) -> None:
    df = session.spark.sql(MATRIX).repartition(2)
    back = round_trip(session, df, "types")
    assert back.schema.simpleString() == df.schema.simpleString()
    assert rows(back) == rows(df)


def test_a_type_arrow_cannot_carry_is_rejected_naming_the_column(session: hs.Session) -> None:
    df = session.spark.sql("select 1 as id, interval '1-2' year to month as attrs")
    with pytest.raises(hs.PlanError) as err:
        session.job("interval").from_spark(df, name="in")
    assert "column 'attrs' has type interval year to month" in str(err.value)
    # a map crosses as Arrow's map (issue 33)
    maps = session.job("map").from_spark(session.spark.sql("select 1 as id, map('k', 1) as m"))
    assert maps.to_arrow().column("m").to_pylist() == [[("k", 1)]]


def test_a_dataframe_with_a_name_twice_is_rejected_naming_the_column(
    session: hs.Session,
) -> None:
    """A join that keeps both sides' ``id`` hands over two columns of one name, which no
    Arrow table in Ray's object store may have: one sentence names it, at build time."""
    a = session.spark.sql("select 1 as id, 2 as k")
    b = session.spark.sql("select 2 as id, 'x' as v")
    with pytest.raises(hs.PlanError) as err:
        session.job("twice").from_spark(a.join(b, a.k == b.id), name="in")
    assert "from_spark 'in': the DataFrame has two columns named 'id'" in str(err.value)
    renamed = a.join(b, a.k == b.id).toDF("a_id", "k", "b_id", "v")
    assert session.job("renamed").from_spark(renamed).to_arrow().to_pylist() == [
        {"a_id": 1, "k": 2, "b_id": 2, "v": "x"}
    ]


def test_empty_dataframe_round_trips_with_its_schema(session: hs.Session) -> None:
    df = session.spark.sql(MATRIX).limit(0)
    back = round_trip(session, df, "empty")
    assert back.schema.simpleString() == df.schema.simpleString()
    assert back.count() == 0


def test_one_partition_and_more_partitions_than_slots(session: hs.Session) -> None:
    for partitions in (1, 7):
        df = session.spark.range(0, 10_000, numPartitions=partitions).selectExpr(
            "id", "id % 13 as k"
        )
        job = session.job(f"parts-{partitions}")
        stream = job.from_spark(df, name="in")
        assert job.plan(stream).graph.vertices[0].parallelism == partitions
        counts = stream.key_by("k", edge="by_k").aggregate({"id": "count"}).to_spark()
        got = {r["k"]: r["id_count"] for r in counts.collect()}
        want = {r["k"]: r["count"] for r in df.groupBy("k").count().collect()}
        assert got == want


def main_job(session: hs.Session, scale: float) -> tuple[Any, hs.Stream]:
    """The main job as ``examples/main_job.py`` runs it: its DataFrame over the orders
    Parquet it caches under ``.data/`` (a file scan the executors read) and the customers
    Spark generates (handed over from Spark), through ``from_dataframe``."""
    from main_job import generate, spark_pipeline

    orders, customers = generate(session.spark, scale=scale)
    df = spark_pipeline(orders, customers)
    return df, session.from_dataframe(df, "tpch-revenue")


def spark_answer(session: hs.Session, scale: float) -> list[tuple[Any, ...]]:
    """Spark's rows of the main job at ``scale``, with its customers broadcast to the
    orders scan.  The answer does not depend on the join Spark picks, and at scale 5 on
    the tests' one executor core Spark's broadcast join gives it in about half the CPU of
    the sort-merge join it plans by itself (8.4 against 15.4 CPU-seconds)."""
    from main_job import generate, spark_pipeline

    key = "spark.sql.autoBroadcastJoinThreshold"
    before = session.spark.conf.get(key)
    session.spark.conf.set(key, "1g")
    try:  # a new DataFrame: one already planned keeps its plan
        return [tuple(r) for r in spark_pipeline(*generate(session.spark, scale)).collect()]
    finally:
        session.spark.conf.set(key, before)


def with_main_yaml(session: hs.Session, monkeypatch: pytest.MonkeyPatch) -> hs.Config:
    """The session's config with ``configs/main.yaml``'s edge rules and adaptive settings
    (its Ray and Spark stay the module's); returns main.yaml's config."""
    from main_job import default_config

    main = hs.load_config(default_config())
    rules = session.config.with_overrides(edge_rules=main.edge_rules, adaptive=main.adaptive)
    monkeypatch.setattr(session, "config", rules)
    return main


#: (scale, what Spark plans for the join there, its edges' rules in the plan's order)
SCALES = [
    (0.1, "BroadcastHashJoin", ["edge_rules[0]", "edge_rules[2]", "edge_rules[3]"]),
    (1, "BroadcastHashJoin", ["edge_rules[0]", "edge_rules[2]", "edge_rules[3]"]),
    (
        5,
        "SortMergeJoin",
        ["edge_rules[1]", "edge_rules[1]", "edge_rules[2]", "edge_rules[3]"],
    ),
]


@pytest.mark.parametrize(("scale", "join", "rules"), SCALES)
def test_main_yaml_runs_the_main_job_unchanged_at_every_scale(
    session: hs.Session,
    monkeypatch: pytest.MonkeyPatch,
    scale: float,
    join: str,
    rules: list[str],
) -> None:
    """One config for every plan Spark makes of the main job: its ``edge_rules`` match
    the edges by what they are, so the job runs at scale 0.1, 1 and 5 although Spark
    plans a broadcast join at the first two and a sort-merge join at 5, and numbers the
    exchanges differently each time.  Every edge gets its mode from a rule (``EdgeMetrics.
    mode_origin`` names it), the rule a plan has no edge for is a note, and the rows and
    types are Spark's (its answer computed with a broadcast join: ``spark_answer``)."""
    with_main_yaml(session, monkeypatch)
    df, stream = main_job(session, scale)
    data = stream.explain_data()
    # a broadcast join's plan has one broadcast edge; a sort-merge join's two hash edges
    # on the customer key, into the join
    assert sorted(e["mode_origin"] for e in data["edges"]) == rules, join
    assert data["warnings"] == []
    # the orders Parquet is read by the executors, the customers handed over by Spark
    sources = sorted(v["name"].split("->")[0].split("_")[0] for v in data["vertices"])
    assert [s for s in sources if s in ("scan", "spark")] == ["scan", "spark"], sources
    result = stream.collect()
    assert {m.mode_origin for m in result.edges.values()} == set(rules)
    ours = session.bridge.to_dataframe(result.table)
    assert ours.schema.simpleString() == df.schema.simpleString()
    assert [tuple(r) for r in ours.collect()] == spark_answer(session, scale)
    (aggregate,) = [n for n, m in result.edges.items() if m.mode_origin == "edge_rules[2]"]
    assert result.edges[aggregate].partitions == 1  # partitions: auto, a few KiB of groups


def test_the_main_job_s_config_plans_it_with_no_warning(
    session: hs.Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``./dev main`` prints (on Spark 3.5 and 4 alike): no ``warning:`` line in its
    explain, since every mode ``configs/main.yaml``'s rules set against the output-on-EOF
    rule is marked ``keep: true`` (and each such edge is noted), and no ``ConfigWarning``
    (its ``job:`` is the main job's name).  The shipped configs that need no Spark are
    planned in ``tests/unit/test_shipped_configs.py``, which lists every file in
    ``configs/``."""
    from main_job import default_config

    config = hs.load_config(default_config())
    monkeypatch.setattr(session, "config", config)
    with warnings.catch_warnings():
        warnings.simplefilter("error", hs.ConfigWarning)
        _df, stream = main_job(session, scale=0.01)
        data = stream.explain_data()
        text = stream.explain()
    assert data["warnings"] == [] and "warning:" not in text, data["warnings"]
    assert data["job"] == config.job
    kept = [f"edge_rules[{i}]" for i, rule in enumerate(config.edge_rules) if rule.keep]
    noted = [r for r in kept if any(f"({r}, keep: true)" in n for n in data["notes"])]
    assert len(kept) == 2 and kept == noted  # the broadcast and the sort's exchange
    # the sort-merge join's rule sets no edge of a broadcast join's plan: a note
    unused = "edge_rules[1] (match: {kind: hash, into: join}) matches no edge of job"
    assert any(n.startswith(unused) for n in data["notes"])
    assert [line for line in text.splitlines() if line.startswith("note: ")] == [
        f"note: {n}" for n in data["notes"]
    ]


def test_a_cache_filled_from_spark_lets_later_jobs_skip_the_hand_off(
    session: hs.Session,
) -> None:
    """The Spark -> Arrow conversion runs once, for the fill; a later job that reads the
    cache fetches nothing from Spark (``sources_seconds`` is 0) and sees the same rows."""
    df = session.spark.range(0, 50_000, numPartitions=2).selectExpr("id", "id % 97 as k")
    prep = session.job("spark-prep")
    cached = prep.from_spark(df, name="in").cache("spark-rows")
    filled = cached.fill()
    assert filled.rows == 50_000 and filled.fills == 1

    report = session.job("spark-report")
    counts = report.from_cache(cached).key_by("k").aggregate({"id": "count"}).collect()
    assert counts.caches == {"spark-rows": "read"} and counts.sources_seconds == 0.0
    got = {r["k"]: r["id_count"] for r in counts.table.to_pylist()}
    want = {r["k"]: r["count"] for r in df.groupBy("k").count().collect()}
    assert got == want
    cached.invalidate()
    assert session.partitions_occupying_local_resources() == {0: set(), 1: set()}


def test_a_dataframe_above_collect_limit_goes_from_spark_s_workers_to_the_holder(
    session: hs.Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session's own Spark (RayDP on Spark 3.5, local mode on Spark 4): above
    ``spark.collect_limit`` the rows go from Spark's Python workers into the holder,
    never through the driver."""
    small = dataclasses.replace(session.bridge.config, collect_limit=1024, collect_chunk=20_000)
    monkeypatch.setattr(session.bridge, "config", small)
    df = session.spark.range(0, 100_000, numPartitions=3).selectExpr(
        "id", "cast(id % 7 as int) as k", "cast(id as string) as s"
    )
    refs = session.bridge.to_arrow_refs(df, "big")
    assert owners(refs) == {holder_worker(session)}
    assert sum(t.num_rows for t in ray.get(refs)) == 100_000
    got = session.job("big").from_spark(df).to_arrow()
    assert sorted(got.column("id").to_pylist()) == list(range(100_000))
    assert got.schema == session.bridge.arrow_schema(df, "big")


#: short decimals of every kind Spark makes (a column, a quotient, a literal, a negative,
#: 18 digits, a null), one too long for a long, and decimals nested where Spark's own
#: Arrow writer keeps them
DECIMALS = """
select id, cast(id * 37 % 100000 as decimal(12,2)) as price,
       cast(id * 37 % 100000 as decimal(12,2)) / 7 as quotient,
       case when id % 5 = 0 then null else cast(-id as decimal(10,3)) end as negative,
       cast('999999999999999999' as decimal(18,0)) - id as widest,
       cast(id as decimal(20,2)) as too_long,
       named_struct('d', cast(id as decimal(9,1))) as nested,
       cast(1.5 as decimal(2,1)) as literal
from range(0, 3000, 1, 3)
"""


@pytest.mark.parametrize("path", ["driver", "holder"])
def test_short_decimals_cross_as_their_longs_and_arrive_as_spark_exports_them(
    session: hs.Session, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """Decimals of up to 18 digits leave Spark as their unscaled longs (cheaper for
    Spark's Arrow writer) and arrive as Spark's own Arrow export of the DataFrame has
    them, on both paths in."""
    from hybrid_shuffle.spark import bridge
    from hybrid_shuffle.spark.unscaled_decimals import unscaled

    monkeypatch.setattr(bridge, "UNSCALED_FROM_BYTES", 0)  # these few rows cross so too
    if path == "holder":
        small = dataclasses.replace(session.bridge.config, collect_limit=1024)
        monkeypatch.setattr(session.bridge, "config", small)
    df = session.spark.sql(DECIMALS)
    exported = unscaled(df).schema.simpleString()
    assert exported.startswith("struct<id:bigint,price:bigint,quotient:bigint,negative:bigint")
    assert "too_long:decimal(20,2),nested:struct<d:decimal(9,1)>,literal:bigint" in exported
    refs = session.bridge.to_arrow_refs(df, "decimals")
    if path == "holder":
        assert owners(refs) == {holder_worker(session)}
    got = pa.concat_tables(ray.get(refs))
    want = pa.Table.from_batches(df._collect_as_arrow())
    assert got.schema == session.bridge.arrow_schema(df, "decimals")
    assert got.sort_by("id").to_pylist() == want.sort_by("id").to_pylist()


def test_columns_named_alike_leave_spark_as_they_are(session: hs.Session) -> None:
    """Spark resolves a name to every column it matches, case aside: a DataFrame with two
    such columns is exported unchanged, never with one's values in both."""
    from hybrid_shuffle.spark.unscaled_decimals import unscaled

    df = session.spark.sql("select cast(1.5 as decimal(4,1)) as d, cast(2.25 as decimal(5,2)) as D")
    assert unscaled(df) is df
    assert unscaled(df.toDF("d", "e")).schema.simpleString() == "struct<d:bigint,e:bigint>"


def _daemon_of_worker(batches: Any) -> Any:
    """In a Spark Python worker: the command line of the process it was forked from."""
    import os

    with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
        parent = f.read().replace(b"\0", b" ").decode()
    for _ in batches:
        pass
    yield pa.RecordBatch.from_pydict({"parent": [parent]})


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc")
def test_spark_s_python_workers_fork_from_the_daemon_that_imported_ray(
    session: hs.Session,
) -> None:
    """Spark's executors start their Python workers from the engine's daemon, which
    imported Ray and the hand-over's code before forking: a worker Spark starts anew
    hands over without importing them."""
    from hybrid_shuffle.spark.options import DAEMON_MODULE

    df = session.spark.range(0, 4, numPartitions=2)
    parents = {r["parent"] for r in df.mapInArrow(_daemon_of_worker, "parent string").collect()}
    assert parents and all(DAEMON_MODULE in p for p in parents), parents
