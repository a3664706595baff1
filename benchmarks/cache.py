"""Issue 13: cache an intermediate result across jobs (FLIP-205).  Five queries over one
prepared aggregation, with and without the cache, against Spark's ``df.cache()`` and
Ray Data's ``materialize()`` on the same data and the same 2 cores.

**Data** (seeded): the **facts**, ``rows`` rows (``--scale`` million, default 10M):
``k`` int64 uniform over ``rows / 10`` keys (1M at 10M rows), ``v`` float64 in
[0, 1), ``q`` int64 in [0, 1,000,000), dealt as ``PARALLELISM`` = 8 contiguous
blocks; the **dimension**: one row per key, ``k`` = 0..keys-1 and ``segment``
int64 in [0, 50).  The **prepared** result is the aggregation of the facts by
``k``: ``k, v_sum, v_count, q_max`` (~1M rows at 10M facts: ~10 facts a key),
hash-partitioned on ``k`` into 8 (the engine's ``key_by("k").aggregate``,
Spark's ``groupBy("k")`` with 8 shuffle partitions, Ray Data's
``groupby("k", num_partitions=8)``).

**The five queries**, each over the prepared result, each returning a small result
to the driver:

1. ``filter``: ``v_sum > 6``, then its rows, sum of ``k`` and of ``v_sum`` (the
   engine: a chained ``map_batches`` that turns each batch into one summary row;
   Spark: a global ``agg``; Ray Data: the same summary in ``map_batches``);
2. ``top-k``: the 100 keys of largest ``v_sum`` (the engine and Ray Data: a
   ``map_batches`` keeping each batch's top 100 by ``pc.select_k_unstable``, then
   the top 100 of those in the driver, timed; Spark: ``orderBy(desc).limit(100)``,
   whose ``TakeOrderedAndProject`` does the same);
3. ``join``: inner join with the dimension on ``k`` (the engine's hash join: the
   cache read is already partitioned on ``k``, so only the dimension is exchanged;
   Spark: its own choice, named in the note; Ray Data:
   ``join("inner", 8, on=("k",))``, which needs polars), then per ``segment`` the
   sum and count of ``v_sum`` and the sum of ``v_count`` (50 rows back);
4. ``regroup``: a coarser key ``g = k % 1000`` (the engine and Ray Data in
   ``map_batches``, Spark ``withColumn``), then per ``g`` the sums of ``v_sum``
   and ``v_count`` and the max of ``q_max`` (1,000 rows back);
5. ``sort``: global sort by ``v_sum`` (the engine: ``sort("v_sum")`` and a
   chained ``map_batches`` that turns each sorted batch into one summary row:
   rows, first and last ``v_sum``, sorted or not, sums of ``k`` and ``v_sum``;
   Ray Data: ``sort("v_sum")`` and the same summary; Spark: ``orderBy("v_sum")``
   to the ``noop`` sink, as in ``benchmarks/batch_operators.py``).

**Uncached**: every query recomputes the prepared result from the facts (the
engine: a new job ``from_arrow(facts).key_by("k").aggregate(...)`` then the
query; Spark: the query on the un-cached ``groupBy`` DataFrame; Ray Data: the
query on a new ``groupby(...).aggregate(...)``).  **Cached**: the prepared result
is filled once, then every query reads it (the engine: ``prepared.cache()``,
``fill()``, then each query in a job of its own from ``job.from_cache(cached)``;
Spark: ``prepared.cache(); prepared.count()`` then the queries on ``prepared``;
Ray Data: ``prepared.materialize()`` then the queries on it).  **Fill** is timed
on its own: the engine ``invalidate()`` then ``fill()`` of the one cached stream
(a refill of its lineage), Spark ``unpersist(blocking=True)``, ``cache()`` and
``count()``, Ray Data a new ``materialize()`` (the previous one dropped); the
last fill is the one the cached queries read.  Spark's uncached queries run
before its ``cache()``: once cached, Spark would read the cache for any query of
the same plan.

**Set-up**: its own embedded Ray (``num_cpus=2``, a 3 GiB object store, 300 MiB under
scale 1) started by a
session with ample operator memory (1 GiB a task), ``SLOTS`` = 10 slots,
``parallelism: 8``, 2 GiB of shuffle memory (the cache lives there); Spark in that
session on one executor with both cores (``SPARK``), AQE off,
``spark.sql.shuffle.partitions`` = 8.  Phase 1 runs the engine and Ray Data (Spark
not started yet, so Ray Data has both Ray CPUs); phase 2 starts Spark (its
executor then holds both Ray CPUs) and runs it on the same tables.  **Input**:
every system starts each run from input already in its memory, none of it timed:
Spark from the facts and dimension created from the same Arrow tables
(``createDataFrame`` from pandas with Arrow on), repartitioned into 8, cached and
counted; the engine and Ray Data from the same blocks put into the object store
once (``from_arrow`` of their ObjectRefs, ``ray.data.from_arrow_refs``).  So the
uncached runs pay exactly the prepared aggregation and the query, and the cached
ones the query over the kept result.

**Measured**, each a warm-up then the median of ``runs`` (``benchmarks.harness``):
every query per system, cached and uncached, and the fill; the "5 queries" figure
of a system is the sum of its five medians, "fill + 5 queries" that plus its fill
(both derived, not runs of their own).  The targets of the issue: the engine's
cached 5 queries at most 0.5x its uncached ones, and at most 0.5x Spark's cached
5 queries.

**Checked**: the prepared result, the five queries' answers and the sort's
summary are computed once by pyarrow in the driver (``Table.group_by``, ``join``,
``select_k_unstable``).  **Every** engine run, the warm-ups included, is checked
against them (filter: rows and sum of ``k`` exact, sum of ``v_sum`` to 1e-9;
top-k: the same set of keys, the same ``v_sum`` values; join and regroup: every
group's key and integer figures exact, float figures to 1e-9; sort: rows and sum
of ``k``, every batch sorted and the batches in order), and so is what
``JobResult.caches`` says the run did with the cache ("read" for every cached
query, nothing for the uncached ones), and every fill's ``CacheInfo`` (filled,
with pyarrow's row count); a mismatch becomes the measurement's error, so a fast
wrong answer is no result.  Ray Data's and Spark's answers are checked the same
way (Ray Data's sorted blocks ordered by their first value first: it does not
promise its block order; Spark's ``noop`` sort is not checked), and so are their
fills' row counts.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import hybrid_shuffle as hs
from benchmarks.batch_operators import spark_frame, spark_plan
from benchmarks.data import blocks
from benchmarks.harness import Measurement, measure

PARALLELISM = 8
SLOTS = 10
ROWS_PER_KEY = 10
SEGMENTS = 50
THRESHOLD = 6.0
TOP_K = 100
GROUPS = 1000
#: "ample" operator memory: far more than any task of this workload holds
AMPLE = 1 << 30
SPARK = {"executors": 1, "executor_cores": 2, "executor_memory": "6 GiB", "prewarm": True}
PEERS = ("spark", "ray-data")
DISTRIBUTION = "uniform"

AGGREGATES: dict[str, str | list[str]] = {"v": ["sum", "count"], "q": "max"}

ENGINE_UNCACHED = "engine uncached"
ENGINE_CACHED = "engine cached (from_cache)"
SPARK_UNCACHED = "spark uncached"
SPARK_CACHED = "spark cached (df.cache())"
RAY_UNCACHED = "ray data uncached"
RAY_CACHED = "ray data cached (materialize())"
ENGINE_FILL = "engine fill()"
SPARK_FILL = "spark cache().count()"
RAY_FILL = "ray data materialize()"
#: per system: (uncached, cached, fill), the columns of the printed table
SYSTEMS = {
    "engine": (ENGINE_UNCACHED, ENGINE_CACHED, ENGINE_FILL),
    "spark": (SPARK_UNCACHED, SPARK_CACHED, SPARK_FILL),
    "ray-data": (RAY_UNCACHED, RAY_CACHED, RAY_FILL),
}

FILL = "cache: fill"
TOTAL = "cache: 5 queries"
FILL_TOTAL = "cache: fill + 5 queries"

#: the targets of issue 13
CACHED_OVER_UNCACHED_TARGET = 0.5
CACHED_OVER_SPARK_TARGET = 0.5


def session_config(object_store: str = "3 GiB") -> dict[str, Any]:
    return {
        "parallelism": PARALLELISM,
        "ray": {"num_cpus": 2, "object_store_memory": object_store},
        "shuffle": {"buffer_size": "8 MiB", "memory_budget": "2 GiB"},
        "operators": {"memory": AMPLE},
        "spark": dict(SPARK),
    }


# -- data ------------------------------------------------------------------------------


def key_count(rows: int) -> int:
    return max(rows // ROWS_PER_KEY, 1)


def facts(rows: int, seed: int = 46) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "k": rng.integers(0, key_count(rows), rows, dtype=np.int64),
            "v": rng.random(rows),
            "q": rng.integers(0, 1_000_000, rows, dtype=np.int64),
        }
    )


def dimension(keys: int, seed: int = 47) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "k": np.arange(keys, dtype=np.int64),
            "segment": rng.integers(0, SEGMENTS, keys, dtype=np.int64),
        }
    )


# -- what runs inside the engine's tasks and Ray Data's (module level: shipped by value) -


def filter_summary(table: pa.Table) -> pa.Table:
    """One row per batch: its rows and the sums of ``k`` and ``v_sum``."""
    return pa.table(
        {
            "rows": pa.array([table.num_rows], pa.int64()),
            "k_sum": pa.array([int(pc.sum(table["k"]).as_py() or 0)], pa.int64()),
            "v_sum": pa.array([float(pc.sum(table["v_sum"]).as_py() or 0.0)], pa.float64()),
        }
    )


def top_k(table: pa.Table) -> pa.Table:
    """The ``TOP_K`` rows of largest ``v_sum`` (``k`` and ``v_sum`` only)."""
    table = table.select(["k", "v_sum"])
    if table.num_rows <= TOP_K:
        return table
    return table.take(pc.select_k_unstable(table, TOP_K, [("v_sum", "descending")]))


def coarse_key(table: pa.Table) -> pa.Table:
    """The regroup's key ``g = k % GROUPS``, added as a column."""
    return table.append_column("g", pa.array(table["k"].to_numpy() % GROUPS))


def sort_summary(table: pa.Table) -> pa.Table:
    """One row per sorted batch: enough to check the sort without moving it."""
    v = table.column("v_sum").to_numpy()
    n = len(v)
    return pa.table(
        {
            "rows": pa.array([n], pa.int64()),
            "v_first": pa.array([float(v[0]) if n else 0.0], pa.float64()),
            "v_last": pa.array([float(v[-1]) if n else 0.0], pa.float64()),
            "sorted": pa.array([bool(np.all(v[1:] >= v[:-1])) if n > 1 else True]),
            "k_sum": pa.array([int(pc.sum(table["k"]).as_py() or 0)], pa.int64()),
            "v_sum": pa.array([float(v.sum())], pa.float64()),
        }
    )


# -- references (pyarrow on the whole tables, once) and the checks ----------------------


@dataclass
class Reference:
    prepared_rows: int
    #: filter: rows, sum(k), sum(v_sum)
    filtered: tuple[int, int, float]
    #: top-k: k, v_sum, by v_sum descending
    top: pa.Table
    #: join: per segment, sorted by segment
    per_segment: pa.Table
    #: regroup: per g, sorted by g
    regrouped: pa.Table
    #: sort: rows, sum(k), sum(v_sum)
    ordered: tuple[int, int, float]


def prepare_reference(table: pa.Table) -> pa.Table:
    """The prepared result by pyarrow: ``k, v_sum, v_count, q_max``."""
    out = table.group_by("k").aggregate([("v", "sum"), ("v", "count"), ("q", "max")])
    return out.select(["k", "v_sum", "v_count", "q_max"])


def reference(table: pa.Table, dim: pa.Table) -> Reference:
    p = prepare_reference(table)
    f = p.filter(pc.field("v_sum") > THRESHOLD)
    per_segment = p.join(dim, "k", join_type="inner").group_by("segment").aggregate(
        [("v_sum", "sum"), ("v_sum", "count"), ("v_count", "sum")]
    )  # fmt: skip
    regrouped = coarse_key(p).group_by("g").aggregate(
        [("v_sum", "sum"), ("v_count", "sum"), ("q_max", "max")]
    )  # fmt: skip
    return Reference(
        prepared_rows=p.num_rows,
        filtered=(f.num_rows, _sum(f, "k"), float(_sum(f, "v_sum"))),
        top=top_k(p).sort_by([("v_sum", "descending")]),
        per_segment=per_segment.sort_by("segment"),
        regrouped=regrouped.sort_by("g"),
        ordered=(p.num_rows, _sum(p, "k"), float(_sum(p, "v_sum"))),
    )


def _sum(table: pa.Table, column: str) -> Any:
    if column not in table.column_names:
        return 0
    return pc.sum(table[column]).as_py() or 0


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)


def check_totals(out: pa.Table, want: tuple[int, int, float]) -> str | None:
    """Summary rows against pyarrow's (rows, sum of ``k``, sum of ``v_sum``): the first
    two exact, the float sum to 1e-9."""
    rows, k_sum, v_sum = want
    got = (int(_sum(out, "rows")), int(_sum(out, "k_sum")))
    if got != (rows, k_sum):
        return f"rows, sum(k) {got} != pyarrow's {(rows, k_sum)}"
    if not _close(float(_sum(out, "v_sum")), v_sum):
        return f"sum(v_sum) {_sum(out, 'v_sum')} != pyarrow's {v_sum}"
    return None


def check_filter(out: pa.Table, ref: Reference, in_order: bool = True) -> str | None:
    return check_totals(out, ref.filtered)


def check_top(out: pa.Table, ref: Reference, in_order: bool = True) -> str | None:
    want = ref.top
    if out.num_rows != want.num_rows:
        return f"{out.num_rows} rows != pyarrow's top {want.num_rows}"
    got = out.select(["k", "v_sum"]).sort_by([("v_sum", "descending")])
    if set(got["k"].to_pylist()) != set(want["k"].to_pylist()):
        return "the top keys differ from pyarrow's"
    if not np.allclose(got["v_sum"].to_numpy(), want["v_sum"].to_numpy(), rtol=1e-9):
        return "the top v_sum values differ from pyarrow's"
    return None


def check_grouped(out: pa.Table, want: pa.Table, key: str) -> str | None:
    missing = set(want.column_names) - set(out.column_names)
    if missing:
        return f"columns {sorted(missing)} missing"
    got = out.select(want.column_names).sort_by(key)
    if got.num_rows != want.num_rows:
        return f"{got.num_rows} groups != pyarrow's {want.num_rows}"
    for name in want.column_names:
        a, b = got[name].to_numpy(), want[name].to_numpy()
        if pa.types.is_floating(want.schema.field(name).type):
            if not np.allclose(a, b, rtol=1e-9):
                return f"column {name} differs from pyarrow's"
        elif not np.array_equal(a, b):
            return f"column {name} differs from pyarrow's"
    return None


def check_join(out: pa.Table, ref: Reference, in_order: bool = True) -> str | None:
    return check_grouped(out, ref.per_segment, "segment")


def check_regroup(out: pa.Table, ref: Reference, in_order: bool = True) -> str | None:
    return check_grouped(out, ref.regrouped, "g")


def check_sort(out: pa.Table, ref: Reference, in_order: bool = True) -> str | None:
    """As ``batch_operators.check_sort`` on ``v_sum``; ``in_order=False`` (Ray Data, whose
    block order is not kept) orders the batches by their first value first."""
    problem = check_totals(out, ref.ordered)
    if problem is not None:
        return problem
    batches = out.filter(pc.greater(out["rows"], 0))
    if not in_order:
        batches = batches.sort_by("v_first")
    if not all(batches["sorted"].to_pylist()):
        return "a batch is not sorted"
    first, last = batches["v_first"].to_numpy(), batches["v_last"].to_numpy()
    if len(first) > 1 and not np.all(first[1:] >= last[:-1]):
        return "batches are not in v_sum order"
    return None


# -- the queries -----------------------------------------------------------------------

Check = Callable[[pa.Table, Reference, bool], str | None]


@dataclass(frozen=True)
class Query:
    key: str
    label: str
    #: (job, prepared stream, dimension refs) -> the stream to collect
    engine: Callable[[Any, Any, list[Any]], Any]
    #: (prepared dataset, dimension dataset) -> the answer
    ray_data: Callable[[Any, Any], pa.Table]
    #: (prepared DataFrame, dimension DataFrame) -> the answer (None: the noop sink)
    spark: Callable[[Any, Any], pa.Table | None]
    check: Check
    #: what the driver does with the engine's (and Ray Data's) collected table, timed
    finish: Callable[[pa.Table], pa.Table] | None = None
    spark_note: str = ""


def _engine_filter(job: Any, p: Any, dim: list[Any]) -> Any:
    return p.filter(pc.field("v_sum") > THRESHOLD, name="filter").map_batches(
        filter_summary, name="summary"
    )


def _engine_top(job: Any, p: Any, dim: list[Any]) -> Any:
    return p.map_batches(top_k, name="top_k")


def _engine_join(job: Any, p: Any, dim: list[Any]) -> Any:
    d = job.from_arrow(dim, name="dimension", parallelism=len(dim))
    joined = p.join(d, on="k", how="inner", name="join")
    return joined.key_by("segment").aggregate(
        {"v_sum": ["sum", "count"], "v_count": "sum"}, name="per_segment"
    )


def _engine_regroup(job: Any, p: Any, dim: list[Any]) -> Any:
    return (
        p.map_batches(coarse_key, name="coarse_key")
        .key_by("g")
        .aggregate({"v_sum": "sum", "v_count": "sum", "q_max": "max"}, name="regroup")
    )


def _engine_sort(job: Any, p: Any, dim: list[Any]) -> Any:
    return p.sort("v_sum", name="sort").map_batches(sort_summary, name="summary")


def _rd_collect(ds: Any) -> pa.Table:
    import ray

    tables = [t for t in ray.get(ds.to_arrow_refs()) if t.num_rows]
    return pa.concat_tables(tables) if tables else pa.table({})


def _rd_pyarrow(ds: Any, fn: Callable[[pa.Table], pa.Table]) -> Any:
    return ds.map_batches(fn, batch_format="pyarrow", batch_size=None)


def _rd_filter(p: Any, dim: Any) -> pa.Table:
    return _rd_collect(_rd_pyarrow(p.filter(expr=f"v_sum > {THRESHOLD}"), filter_summary))


def _rd_top(p: Any, dim: Any) -> pa.Table:
    return top_k(_rd_collect(_rd_pyarrow(p, top_k)))


def _rd_join(p: Any, dim: Any) -> pa.Table:
    from ray.data.aggregate import Count, Sum

    joined = p.join(dim, "inner", PARALLELISM, on=("k",))
    return _rd_collect(
        joined.groupby("segment", num_partitions=PARALLELISM).aggregate(
            Sum("v_sum", alias_name="v_sum_sum"),
            Count("v_sum", alias_name="v_sum_count"),
            Sum("v_count", alias_name="v_count_sum"),
        )
    )


def _rd_regroup(p: Any, dim: Any) -> pa.Table:
    from ray.data.aggregate import Max, Sum

    return _rd_collect(
        _rd_pyarrow(p, coarse_key)
        .groupby("g", num_partitions=PARALLELISM)
        .aggregate(
            Sum("v_sum", alias_name="v_sum_sum"),
            Sum("v_count", alias_name="v_count_sum"),
            Max("q_max", alias_name="q_max_max"),
        )
    )


def _rd_sort(p: Any, dim: Any) -> pa.Table:
    return _rd_collect(_rd_pyarrow(p.sort("v_sum"), sort_summary))


def _spark_rows(rows: list[Any]) -> pa.Table:
    return pa.Table.from_pylist([r.asDict() for r in rows])


def _spark_filter(p: Any, dim: Any) -> pa.Table:
    from pyspark.sql import functions as F

    out = p.filter(F.col("v_sum") > THRESHOLD).agg(
        F.count(F.lit(1)).alias("rows"), F.sum("k").alias("k_sum"), F.sum("v_sum").alias("v_sum")
    )
    return _spark_rows(out.collect())


def _spark_top(p: Any, dim: Any) -> pa.Table:
    from pyspark.sql import functions as F

    return _spark_rows(p.select("k", "v_sum").orderBy(F.desc("v_sum")).limit(TOP_K).collect())


def _spark_join_frame(p: Any, dim: Any) -> Any:
    from pyspark.sql import functions as F

    return (
        p.join(dim, on="k", how="inner")
        .groupBy("segment")
        .agg(
            F.sum("v_sum").alias("v_sum_sum"),
            F.count("v_sum").alias("v_sum_count"),
            F.sum("v_count").alias("v_count_sum"),
        )
    )


def _spark_join(p: Any, dim: Any) -> pa.Table:
    return _spark_rows(_spark_join_frame(p, dim).collect())


def _spark_regroup(p: Any, dim: Any) -> pa.Table:
    from pyspark.sql import functions as F

    out = (
        p.withColumn("g", F.col("k") % GROUPS)
        .groupBy("g")
        .agg(
            F.sum("v_sum").alias("v_sum_sum"),
            F.sum("v_count").alias("v_count_sum"),
            F.max("q_max").alias("q_max_max"),
        )
    )
    return _spark_rows(out.collect())


def _spark_sort(p: Any, dim: Any) -> None:
    p.orderBy("v_sum").write.format("noop").mode("overwrite").save()


QUERIES = (
    Query(
        "filter",
        f"filter v_sum > {THRESHOLD:g}",
        _engine_filter,
        _rd_filter,
        _spark_filter,
        check_filter,
        spark_note="filter, global agg, collect",
    ),
    Query(
        "top-k",
        f"top-{TOP_K} by v_sum",
        _engine_top,
        _rd_top,
        _spark_top,
        check_top,
        finish=top_k,
        spark_note=f"orderBy(desc).limit({TOP_K}), collect",
    ),
    Query("join", "join dimension, per segment", _engine_join, _rd_join, _spark_join, check_join),
    Query(
        "regroup",
        f"regroup by k % {GROUPS}",
        _engine_regroup,
        _rd_regroup,
        _spark_regroup,
        check_regroup,
        spark_note="withColumn, groupBy, collect",
    ),
    Query(
        "sort",
        "global sort by v_sum",
        _engine_sort,
        _rd_sort,
        _spark_sort,
        check_sort,
        spark_note="orderBy('v_sum') to noop (not checked)",
    ),
)


def workload(q: Query) -> str:
    return f"cache: {q.label}"


# -- the engine ------------------------------------------------------------------------


def engine_prepared(job: Any, facts_refs: list[Any]) -> Any:
    source = job.from_arrow(facts_refs, name="facts", parallelism=len(facts_refs))
    return source.key_by("k", edge="by_k").aggregate(AGGREGATES, name="prepare")


class EngineRun:
    """One engine query as a callable for ``measure``: the job's ``JobResult`` and the
    answer (the collected table, finished in the driver where the query says so)."""

    def __init__(self, build: Callable[[], Any], finish: Callable[[pa.Table], pa.Table] | None):
        self.build = build
        self.finish = finish
        self.results: list[tuple[Any, pa.Table]] = []

    def __call__(self) -> None:
        result = self.build().collect()
        answer = self.finish(result.table) if self.finish else result.table
        self.results.append((result, answer))


def engine_measure(
    m: Measurement,
    run: EngineRun,
    runs: int,
    q: Query,
    ref: Reference,
    caches: dict[str, str],
) -> tuple[Measurement, int]:
    """``measure`` the query, then check every run (the warm-up too): its answer against
    pyarrow and what it did with the cache (``caches``: what ``JobResult.caches``
    must be)."""
    measure(m, run, runs)
    checked = 0
    for result, answer in run.results:
        problem = q.check(answer, ref, True)
        if problem is None and result.caches != caches:
            problem = f"the run's caches were {result.caches}, not {caches}"
        if problem is not None and m.error is None:
            m.error = f"wrong result: {problem}"
            print(f"[bench] {m.workload} | {m.system}: {m.error}", file=sys.stderr, flush=True)
        checked += 1
    return m, checked


class EngineFill:
    """The engine's fill as a callable for ``measure``: ``invalidate()`` then ``fill()``
    of one cached stream (its first call fills it the first time)."""

    def __init__(self, cached: Any) -> None:
        self.cached = cached
        self.infos: list[Any] = []

    def __call__(self) -> None:
        self.cached.invalidate()
        self.infos.append(self.cached.fill())


# -- the run ---------------------------------------------------------------------------


@dataclass
class CacheBench:
    rows: int
    runs: int
    peers: set[str]
    object_store: str
    results: list[Measurement] = field(default_factory=list)
    extra: dict[int, dict[str, Any]] = field(default_factory=dict)
    cache_info: dict[str, Any] | None = None
    spark_join_plan: str = ""

    def add(self, m: Measurement, **extra: Any) -> None:
        self.results.append(m)
        if extra:
            self.extra[id(m)] = extra


def run(
    rows: int, runs: int, object_store: str = "3 GiB", peers: Sequence[str] = PEERS
) -> tuple[list[Measurement], dict[str, Any]]:
    """Every measurement of the workload in one Ray; must be called while no other
    session (no other Ray) is open in the process.  The measurements and the summary
    (``payload["cache"]``)."""
    unknown = set(peers) - set(PEERS)
    if unknown:
        raise ValueError(f"unknown peer(s) {sorted(unknown)}; choose from {PEERS}")
    b = CacheBench(rows, runs, set(peers), object_store)
    started = time.time()
    table = facts(rows)
    dim = dimension(key_count(rows))
    ref = reference(table, dim)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hs.ConfigWarning)
        with hs.Session(session_config(object_store), slots=SLOTS) as session:
            _phase_engine(b, session, table, dim, ref)
            if "spark" in b.peers:
                _phase_spark(b, session, table, dim, ref)
    b.results += _derived(b)
    summary = _summary(b, ref, time.time() - started)
    return b.results, summary


def _phase_engine(
    b: CacheBench, session: hs.Session, table: pa.Table, dim: pa.Table, ref: Reference
) -> None:
    """The engine and Ray Data (Spark not started: Ray Data has both Ray CPUs)."""
    import ray

    # once, not timed (see the docstring)
    facts_refs = [ray.put(t) for t in blocks(table, PARALLELISM)]
    dim_refs = [ray.put(t) for t in blocks(dim, PARALLELISM)]
    _engine(b, session, facts_refs, dim_refs, ref)
    if "ray-data" in b.peers:
        _ray_data(b, facts_refs, dim_refs, ref)


def _engine(
    b: CacheBench, session: hs.Session, facts_refs: list[Any], dim_refs: list[Any],
    ref: Reference,
) -> None:  # fmt: skip
    for q in QUERIES:

        def uncached(q: Query = q) -> Any:
            job = session.job(f"cache-uncached-{q.key}")
            return q.engine(job, engine_prepared(job, facts_refs), dim_refs)

        m = Measurement(workload(q), ENGINE_UNCACHED, b.rows, DISTRIBUTION)
        m, checked = engine_measure(m, EngineRun(uncached, q.finish), b.runs, q, ref, {})
        b.add(m, checked_runs=checked)

    prepare_job = session.job("cache-prepare")
    cached = engine_prepared(prepare_job, facts_refs).cache("prepared")
    fill = EngineFill(cached)
    m = measure(Measurement(FILL, ENGINE_FILL, b.rows, DISTRIBUTION,
                            note="invalidate() then fill()"), fill, b.runs)  # fmt: skip
    for info in fill.infos:
        if (info.state, info.rows) != ("filled", ref.prepared_rows) and m.error is None:
            m.error = (
                f"wrong fill: {info.state}, {info.rows:,} rows; pyarrow has {ref.prepared_rows:,}"
            )
    b.add(m, checked_runs=len(fill.infos))
    if m.error or not fill.infos:
        for q in QUERIES:
            b.add(Measurement(workload(q), ENGINE_CACHED, b.rows, DISTRIBUTION,
                              error=f"no cache: {m.error or 'not filled'}"))  # fmt: skip
        cached.invalidate()
        return
    try:
        for q in QUERIES:

            def read(q: Query = q) -> Any:
                job = session.job(f"cache-cached-{q.key}")
                return q.engine(job, job.from_cache(cached), dim_refs)

            m = Measurement(workload(q), ENGINE_CACHED, b.rows, DISTRIBUTION)
            m, checked = engine_measure(
                m, EngineRun(read, q.finish), b.runs, q, ref, {cached.name: "read"}
            )
            b.add(m, checked_runs=checked)
        b.cache_info = dataclasses.asdict(cached.info())
    finally:
        cached.invalidate()


class RayDataFill:
    """Ray Data's fill: a new ``materialize()`` (the previous one dropped first)."""

    def __init__(self, facts_refs: list[Any]) -> None:
        self.facts_refs = facts_refs
        self.materialized: Any = None
        self.counts: list[int] = []

    def __call__(self) -> None:
        self.materialized = None
        self.materialized = ray_data_prepared(self.facts_refs).materialize()

    def check(self) -> None:
        if self.materialized is not None:
            self.counts.append(self.materialized.count())


def ray_data_prepared(facts_refs: list[Any]) -> Any:
    import ray
    from ray.data.aggregate import Count, Max, Sum

    ds = ray.data.from_arrow_refs(facts_refs)
    return ds.groupby("k", num_partitions=PARALLELISM).aggregate(
        Sum("v", alias_name="v_sum"), Count("v", alias_name="v_count"), Max("q", alias_name="q_max")
    )


def peer_measure(
    m: Measurement, fn: Callable[[], pa.Table | None], runs: int, q: Query, ref: Reference,
    in_order: bool,
) -> tuple[Measurement, int]:  # fmt: skip
    """``measure`` a peer's query and check every answer it returned (None: not checked)."""
    answers: list[pa.Table] = []

    def call() -> None:
        answer = fn()
        if answer is not None:
            answers.append(answer)

    measure(m, call, runs)
    for answer in answers:
        problem = q.check(answer, ref, in_order)
        if problem is not None and m.error is None:
            m.error = f"wrong result: {problem}"
            print(f"[bench] {m.workload} | {m.system}: {m.error}", file=sys.stderr, flush=True)
    return m, len(answers)


def _ray_data(b: CacheBench, facts_refs: list[Any], dim_refs: list[Any], ref: Reference) -> None:
    import ray

    dim = ray.data.from_arrow_refs(dim_refs)
    for q in QUERIES:

        def uncached(q: Query = q) -> pa.Table:
            return q.ray_data(ray_data_prepared(facts_refs), dim)

        m = Measurement(workload(q), RAY_UNCACHED, b.rows, DISTRIBUTION)
        m, checked = peer_measure(m, uncached, b.runs, q, ref, in_order=False)
        b.add(m, checked_runs=checked)
    fill = RayDataFill(facts_refs)

    def timed_fill() -> None:
        fill()
        fill.check()  # metadata only: the row count of the blocks just made

    m = measure(Measurement(FILL, RAY_FILL, b.rows, DISTRIBUTION), timed_fill, b.runs)
    wrong = [c for c in fill.counts if c != ref.prepared_rows]
    if wrong and m.error is None:
        m.error = f"wrong fill: {wrong[0]:,} rows, pyarrow has {ref.prepared_rows:,}"
    b.add(m, checked_runs=len(fill.counts))
    try:
        for q in QUERIES:
            m = Measurement(workload(q), RAY_CACHED, b.rows, DISTRIBUTION)
            if fill.materialized is None or fill.counts != [ref.prepared_rows] * len(fill.counts):
                m.error = f"no materialized dataset: {b.results[-1].error or 'not filled'}"
                b.add(m)
                continue
            mat = fill.materialized
            answer = functools.partial(q.ray_data, mat, dim)
            m, checked = peer_measure(m, answer, b.runs, q, ref, in_order=False)
            b.add(m, checked_runs=checked)
    finally:
        fill.materialized = None


def _phase_spark(
    b: CacheBench, session: hs.Session, table: pa.Table, dim: pa.Table, ref: Reference
) -> None:
    """Spark on the same tables (its executor now holds both Ray CPUs)."""
    from pyspark.sql import functions as F

    spark = session.spark
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    spark.conf.set("spark.sql.shuffle.partitions", str(PARALLELISM))
    spark.conf.set("spark.sql.execution.arrow.pyspark.enabled", "true")
    fact_df = spark_frame(spark, blocks(table, PARALLELISM))
    dim_df = spark_frame(spark, blocks(dim, PARALLELISM))
    prepared = fact_df.groupBy("k").agg(
        F.sum("v").alias("v_sum"), F.count("v").alias("v_count"), F.max("q").alias("q_max")
    )
    b.spark_join_plan = spark_plan(_spark_join_frame(prepared, dim_df))
    try:
        # every uncached query before the cache(): once cached, Spark would read it
        for q in QUERIES:
            m = Measurement(workload(q), SPARK_UNCACHED, b.rows, DISTRIBUTION,
                            note=_spark_note(q, b))  # fmt: skip
            answer = functools.partial(q.spark, prepared, dim_df)
            m, checked = peer_measure(m, answer, b.runs, q, ref, in_order=True)
            b.add(m, checked_runs=checked)
        counts: list[int] = []

        def fill() -> None:
            prepared.unpersist(blocking=True)
            prepared.cache()
            counts.append(prepared.count())

        m = measure(Measurement(FILL, SPARK_FILL, b.rows, DISTRIBUTION,
                                note="unpersist(blocking=True), cache(), count()"), fill,
                    b.runs)  # fmt: skip
        wrong = [c for c in counts if c != ref.prepared_rows]
        if wrong and m.error is None:
            m.error = f"wrong fill: {wrong[0]:,} rows, pyarrow has {ref.prepared_rows:,}"
        b.add(m, checked_runs=len(counts))
        fill_error = m.error or (None if counts else "not filled")
        for q in QUERIES:
            m = Measurement(workload(q), SPARK_CACHED, b.rows, DISTRIBUTION,
                            note=_spark_note(q, b))  # fmt: skip
            if fill_error:
                m.error = f"no cache: {fill_error}"
                b.add(m)
                continue
            answer = functools.partial(q.spark, prepared, dim_df)
            m, checked = peer_measure(m, answer, b.runs, q, ref, in_order=True)
            b.add(m, checked_runs=checked)
    finally:
        prepared.unpersist()
        fact_df.unpersist()
        dim_df.unpersist()


def _spark_note(q: Query, b: CacheBench) -> str:
    if q.key == "join":
        return f"{b.spark_join_plan}, groupBy, collect; AQE off"
    return f"{q.spark_note}; AQE off"


# -- the summary -----------------------------------------------------------------------


def _median(results: list[Measurement], workload_name: str, system: str) -> float | None:
    for m in results:
        if (m.workload, m.system) == (workload_name, system):
            return m.median if m.seconds and not m.error else None
    return None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _derived(b: CacheBench) -> list[Measurement]:
    """Per system and kind: the sum of the five queries' medians, and that plus the fill
    (figures, not runs of their own: ``seconds`` holds the one sum)."""
    out: list[Measurement] = []
    measured = {m.system for m in b.results}
    for uncached, cached, fill in SYSTEMS.values():
        for system in (uncached, cached):
            if system not in measured:
                continue
            medians = {q.label: _median(b.results, workload(q), system) for q in QUERIES}
            failed = [label for label, s in medians.items() if s is None]
            m = Measurement(TOTAL, system, b.rows, DISTRIBUTION,
                            note="sum of the five queries' medians")  # fmt: skip
            if failed:
                m.error = f"not measured: {', '.join(failed)}"
            else:
                m.seconds = [sum(s for s in medians.values() if s is not None)]
            out.append(m)
            if system == cached:
                f = _median(b.results, FILL, fill)
                t = Measurement(FILL_TOTAL, system, b.rows, DISTRIBUTION,
                                note="fill median + the five queries' medians")  # fmt: skip
                if f is None or m.error:
                    t.error = m.error or "fill not measured"
                else:
                    t.seconds = [f + m.seconds[0]]
                out.append(t)
    return out


def _status(value: float | None, target: float) -> str:
    if value is None:
        return "not measured"
    return "met" if value <= target else "missed"


def _fmt(seconds: float | None) -> str:
    return f"{seconds:.3f} s" if seconds is not None else "-"


def _targets(b: CacheBench) -> list[dict[str, Any]]:
    r = b.results
    cached = _median(r, TOTAL, ENGINE_CACHED)
    uncached = _median(r, TOTAL, ENGINE_UNCACHED)
    spark = _median(r, TOTAL, SPARK_CACHED)
    out = []
    for target, value, limit, what in (
        (f"engine cached 5 queries <= {CACHED_OVER_UNCACHED_TARGET}x uncached",
         _ratio(cached, uncached), CACHED_OVER_UNCACHED_TARGET,
         f"{_fmt(cached)} vs {_fmt(uncached)}"),
        (f"engine cached 5 queries <= {CACHED_OVER_SPARK_TARGET}x Spark's cached run",
         _ratio(cached, spark), CACHED_OVER_SPARK_TARGET,
         f"{_fmt(cached)} vs {_fmt(spark)}"),
    ):  # fmt: skip
        out.append(
            {
                "target": target,
                "value": value,
                "limit": limit,
                "measured": what,
                "status": _status(value, limit),
                "unit": "x",
            }
        )
    return out


def _table(b: CacheBench) -> dict[str, dict[str, float | None]]:
    """Median seconds per system (column) and query, fill and totals (rows)."""
    rows = [workload(q) for q in QUERIES] + [TOTAL, FILL, FILL_TOTAL]
    out: dict[str, dict[str, float | None]] = {}
    for uncached, cached, fill in SYSTEMS.values():
        for system in (uncached, cached):
            if not any(m.system == system for m in b.results):
                continue
            column = {}
            for row in rows:
                name = fill if row == FILL else system
                if row == FILL and system == uncached:
                    continue
                column[row] = _median(b.results, row, name)
            out[system] = column
    return out


def _ratios(table: dict[str, dict[str, float | None]]) -> list[dict[str, Any]]:
    """Per query and total: each system's cached over uncached, and the engine's cached
    over each peer's cached."""
    rows = [workload(q) for q in QUERIES] + [TOTAL]
    out = []
    engine = table.get(ENGINE_CACHED, {})
    for row in rows:
        entry: dict[str, Any] = {"workload": row}
        for name, (uncached, cached, _) in SYSTEMS.items():
            entry[f"{name} cached/uncached"] = _ratio(
                table.get(cached, {}).get(row), table.get(uncached, {}).get(row)
            )
            if name != "engine":
                entry[f"engine cached/{name} cached"] = _ratio(
                    engine.get(row), table.get(cached, {}).get(row)
                )
        out.append(entry)
    return out


def _summary(b: CacheBench, ref: Reference, seconds: float) -> dict[str, Any]:
    rows = [
        {
            "workload": m.workload,
            "system": m.system,
            "rows": m.rows,
            "median_seconds": m.median if m.seconds and not m.error else None,
            "error": m.error,
            "note": m.note,
            **b.extra.get(id(m), {}),
        }
        for m in b.results
    ]
    table = _table(b)
    return {
        "seconds": seconds,
        "rows": b.rows,
        "keys": key_count(b.rows),
        "prepared_rows": ref.prepared_rows,
        "segments": SEGMENTS,
        "top_k": TOP_K,
        "groups": GROUPS,
        "threshold": THRESHOLD,
        "runs": b.runs,
        "peers": sorted(b.peers),
        "config": session_config(b.object_store),
        "slots": SLOTS,
        "queries": [q.label for q in QUERIES],
        "engine_cache": b.cache_info,
        "spark_join_plan": b.spark_join_plan or None,
        "measurements": rows,
        "table": table,
        "ratios": _ratios(table),
        "targets": _targets(b),
    }
