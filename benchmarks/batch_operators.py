"""Issue 12: the batch operators (global sort, hash and sort-merge join, co_group) within
a memory budget, against Spark and Ray Data on the same data and the same 2 cores.

**Data** (seeded, ``benchmarks.data.make_table``): ``k`` int64 uniform over 100,000
keys, ``v`` float64, dealt as ``PARALLELISM`` = 8 contiguous blocks.  The right-hand
tables have their value in ``w``:

* the **dimension**: 100,000 rows, ``k`` = 0..99,999, ``w`` float64;
* the **second fact table** of the join: as many rows as the left, ``k`` a seeded
  permutation of 0..rows-1 (unique keys), ``w`` float64.  Each left row matches exactly
  one of its rows, so the join gives ``rows`` rows: with both sides on 100,000 uniform
  keys a 10M x 10M inner join would give 1e9 rows (100 x 100 per key), which no peer
  could write in this run's time;
* the **co_group's right side**: ``make_table(rows, seed=43)`` (100,000 uniform keys,
  like the left), ``v`` renamed ``w``.

**Set-up**: its own embedded Ray (``num_cpus=2``, a 3 GiB object store, 300 MiB under
scale 1) started by a
session with ample operator memory (``AMPLE``, 1 GiB a task) and ``SLOTS`` = 10
slots, ``parallelism: 8``; Spark in that session on one executor with both cores
(``SPARK``, as ``benchmarks/mainjob.py``).  Every other memory setting is a session
of its own, opened in the same Ray beside it and closed after its measurements
(``operators.memory`` is per session).  The engine's executors take no Ray CPU, so
each system gets both cores, as long as they do not run at the same time: phase 1
runs the engine and Ray Data (Spark not started yet, so Ray Data has both Ray
CPUs), phase 2 starts Spark (its executor then holds both Ray CPUs) and runs it on
the same data, regenerated from the same seeds.

**Quarter memory** (``quarter_memory``): a quarter of the per-task input of the
stateful operator, i.e. the bytes of all its inputs / 8 / 4 (at least 1 MiB, the
engine's floor): a sort of 10M rows (160 MB) gets 5 MB a task, the 10M x 10M join
10 MB, so the sort, the hash join's build side and the co_group spill.

**Measured**, each a warm-up then the median of ``runs`` (``benchmarks.harness``):

1. global sort at each of ``rows``: the engine (``sort("k")``: range exchange,
   blocking by the output-on-EOF rule) with ample memory and with quarter memory;
   Spark ``orderBy("k")`` to the ``noop`` sink; Ray Data ``sort("k").materialize()``;
2. join of ``join_rows`` facts with the dimension and with the second fact table,
   inner: the engine's hash join (ample, quarter) and sort-merge join (ample,
   quarter); Spark with broadcast joins off (``autoBroadcastJoinThreshold=-1``) and,
   with the dimension only, on (the default 10 MiB threshold); Ray Data
   ``join(..., "inner", 8, on=("k",)).materialize()`` (needs polars);
3. co_group of two ``join_rows`` tables: the engine with the vectorized ``cogroup_counts``
   (per key: left rows, right rows, sum of left ``v``, by ``group_by`` inside the
   function), ample and quarter memory; the same figures record at a time
   (``cogroup_records``: a dict key -> list of row dicts per side from ``to_pylist``,
   then a Python loop over the union of keys) as the engine's co_group function at
   ``baseline_rows`` per side, and alone in the driver (one process) on the first
   ``baseline_rows`` rows of each side; both record-at-a-time figures are scaled per
   row to ``join_rows`` (the measured seconds are in the note).

Spark: AQE off (``spark.sql.adaptive.enabled=false``), ``spark.sql.shuffle.partitions``
= 8; its input is created from the same Arrow tables (``createDataFrame`` from pandas
with Arrow on), repartitioned into 8, cached and counted, none of it timed.  The
engine and Ray Data put the driver's blocks into the object store in every timed run
(as in ``benchmarks/systems.py``).  The engine's sort and join end in a chained
``map_batches`` that turns each output batch into one summary row (rows, key and
value sums, first and last key, sorted or not), so that nothing large comes back to
the driver (Spark writes to ``noop``, Ray Data keeps its blocks in the object
store); the co_group's 100,000-row result comes back whole.  **Every** engine run,
the warm-up included, is checked against pyarrow (``Table.sort_by`` / ``Table.join``
/ ``group_by`` on the whole tables, once per size): row count, key and value sums,
and for the sort that every batch is sorted and the batches follow each other in key
order; a mismatch becomes the measurement's error, so a fast wrong answer is no
result.  Ray Data's row counts are checked the same way.

Per engine measurement, from ``JobResult.vertices`` (the vertices with operator
memory, i.e. the stateful one): the largest ``peak_memory_bytes / memory`` of a task
and the bytes spilled (the largest over the timed runs), with the edges' modes.
"""

from __future__ import annotations

import math
import statistics
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
from benchmarks.data import KEYS, blocks, make_table
from benchmarks.harness import Measurement, measure
from hybrid_shuffle.config import OPERATORS_MIN_MEMORY

PARALLELISM = 8
SLOTS = 10
#: "ample" operator memory: far more than any task of this workload holds
AMPLE = 1 << 30
SPARK = {"executors": 1, "executor_cores": 2, "executor_memory": "6 GiB", "prewarm": True}
PEERS = ("spark", "ray-data")
SPARK_BROADCAST_DEFAULT = str(10 << 20)

SORT = "global sort"
JOIN_DIM = "join with 100k-row dimension"
JOIN_FACT = "join with fact table (unique keys)"
COGROUP = "co_group"

#: the targets of issue 12
SORT_TARGET = 0.4
JOIN_TARGET = 0.25
LINEAR_TARGET = 1.2
PEAK_TARGET = 1.5
COGROUP_TARGET = 10.0


def session_config(memory: int, object_store: str = "3 GiB") -> dict[str, Any]:
    return {
        "parallelism": PARALLELISM,
        "ray": {"num_cpus": 2, "object_store_memory": object_store},
        "shuffle": {"buffer_size": "8 MiB", "memory_budget": "2 GiB"},
        "operators": {"memory": memory},
        "spark": dict(SPARK),
    }


def quarter_memory(*tables: pa.Table) -> int:
    """A quarter of a task's share of the inputs (bytes / parallelism / 4), but at least
    the smallest budget the engine honours (``OPERATORS_MIN_MEMORY``)."""
    return max(sum(t.nbytes for t in tables) // PARALLELISM // 4, OPERATORS_MIN_MEMORY)


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


# -- data ------------------------------------------------------------------------------


def dimension(seed: int = 44) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({"k": np.arange(KEYS, dtype=np.int64), "w": rng.random(KEYS)})


def fact_unique(rows: int, seed: int = 45) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({"k": rng.permutation(rows).astype(np.int64), "w": rng.random(rows)})


def cogroup_right(rows: int) -> pa.Table:
    return make_table(rows, "uniform", seed=43).rename_columns(["k", "w"])


# -- what runs inside the engine's tasks (module level: shipped by value) ---------------


def sort_summary(table: pa.Table) -> pa.Table:
    """One row per sorted output batch: enough to check the sort without moving it."""
    k = table.column("k").to_numpy()
    n = len(k)
    return pa.table(
        {
            "rows": pa.array([n], pa.int64()),
            "k_first": pa.array([int(k[0]) if n else 0], pa.int64()),
            "k_last": pa.array([int(k[-1]) if n else 0], pa.int64()),
            "sorted": pa.array([bool(np.all(k[1:] >= k[:-1])) if n > 1 else True]),
            "k_sum": pa.array([int(k.sum())], pa.int64()),
            "v_sum": pa.array([float(table.column("v").to_numpy().sum())]),
        }
    )


def join_summary(table: pa.Table) -> pa.Table:
    """One row per joined output batch: rows and the sums of k, v and w."""

    def total(name: str) -> Any:
        return pc.sum(table.column(name)).as_py() or 0

    return pa.table(
        {
            "rows": pa.array([table.num_rows], pa.int64()),
            "k_sum": pa.array([int(total("k"))], pa.int64()),
            "v_sum": pa.array([float(total("v"))]),
            "w_sum": pa.array([float(total("w"))]),
        }
    )


COGROUP_SCHEMA = pa.schema(
    [("k", pa.int64()), ("n_left", pa.int64()), ("n_right", pa.int64()), ("v_sum", pa.float64())]
)


def cogroup_counts(left: pa.Table, right: pa.Table) -> pa.Table:
    """Per key of either side: rows on the left, rows on the right, sum of the left ``v``
    (vectorized: one ``group_by`` per side and a full outer join of the two)."""
    lg = left.group_by("k").aggregate([([], "count_all"), ("v", "sum")])
    lg = lg.rename_columns({"count_all": "n_left"})
    rg = right.group_by("k").aggregate([([], "count_all")]).rename_columns({"count_all": "n_right"})
    both = lg.join(rg, "k", join_type="full outer")
    return pa.table(
        {
            "k": both.column("k").cast(pa.int64()),
            "n_left": pc.fill_null(both.column("n_left"), 0).cast(pa.int64()),
            "n_right": pc.fill_null(both.column("n_right"), 0).cast(pa.int64()),
            "v_sum": pc.fill_null(both.column("v_sum"), 0.0).cast(pa.float64()),
        },
        schema=COGROUP_SCHEMA,
    )


def cogroup_records(left: pa.Table, right: pa.Table) -> pa.Table:
    """The same figures record at a time: a hash table of rows per side, then a loop."""
    lrows: dict[int, list[dict[str, Any]]] = {}
    for row in left.to_pylist():
        lrows.setdefault(row["k"], []).append(row)
    rrows: dict[int, list[dict[str, Any]]] = {}
    for row in right.to_pylist():
        rrows.setdefault(row["k"], []).append(row)
    keys, n_left, n_right, v_sum = [], [], [], []
    for key in lrows.keys() | rrows.keys():
        ls = lrows.get(key, [])
        total = 0.0
        for row in ls:
            total += row["v"]
        keys.append(key)
        n_left.append(len(ls))
        n_right.append(len(rrows.get(key, [])))
        v_sum.append(total)
    return pa.table([keys, n_left, n_right, v_sum], schema=COGROUP_SCHEMA)


# -- references (pyarrow on the whole tables) and the checks ---------------------------


@dataclass
class Expected:
    rows: int
    k_sum: int
    v_sum: float
    w_sum: float = 0.0
    #: the co_group's result, sorted by k
    table: pa.Table | None = None


def expected_sort(table: pa.Table) -> Expected:
    ordered = table.sort_by("k")
    k = ordered.column("k")
    return Expected(table.num_rows, int(pc.sum(k).as_py()), float(pc.sum(table["v"]).as_py()))


def expected_join(left: pa.Table, right: pa.Table) -> Expected:
    joined = left.join(right, "k", join_type="inner")
    s = join_summary(joined)
    return Expected(joined.num_rows, s["k_sum"][0].as_py(), s["v_sum"][0].as_py(),
                    s["w_sum"][0].as_py())  # fmt: skip


def expected_cogroup(left: pa.Table, right: pa.Table) -> Expected:
    table = cogroup_counts(left, right).sort_by("k")
    return Expected(table.num_rows, int(pc.sum(table["k"]).as_py()),
                    float(pc.sum(table["v_sum"]).as_py()), table=table)  # fmt: skip


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)


def check_sort(out: pa.Table, want: Expected) -> str | None:
    rows = out.filter(pc.greater(out["rows"], 0))
    got = (int(pc.sum(out["rows"]).as_py() or 0), int(pc.sum(out["k_sum"]).as_py() or 0))
    if got != (want.rows, want.k_sum):
        return f"rows, sum(k) {got} != pyarrow's {(want.rows, want.k_sum)}"
    if not _close(float(pc.sum(out["v_sum"]).as_py() or 0.0), want.v_sum):
        return f"sum(v) {pc.sum(out['v_sum']).as_py()} != pyarrow's {want.v_sum}"
    if not all(rows["sorted"].to_pylist()):
        return "a batch is not sorted"
    first, last = rows["k_first"].to_numpy(), rows["k_last"].to_numpy()
    if len(first) > 1 and not np.all(first[1:] >= last[:-1]):
        return "batches are not in key order"
    return None


def check_join(out: pa.Table, want: Expected) -> str | None:
    got = (int(pc.sum(out["rows"]).as_py() or 0), int(pc.sum(out["k_sum"]).as_py() or 0))
    if got != (want.rows, want.k_sum):
        return f"rows, sum(k) {got} != pyarrow's {(want.rows, want.k_sum)}"
    for col, value in (("v_sum", want.v_sum), ("w_sum", want.w_sum)):
        have = float(pc.sum(out[col]).as_py() or 0.0)
        if not _close(have, value):
            return f"{col} {have} != pyarrow's {value}"
    return None


def check_cogroup(out: pa.Table, want: Expected) -> str | None:
    assert want.table is not None
    got = out.select(COGROUP_SCHEMA.names).cast(COGROUP_SCHEMA).sort_by("k")
    if got.num_rows != want.rows:
        return f"{got.num_rows} keys != pyarrow's {want.rows}"
    for col in ("k", "n_left", "n_right"):
        if not got[col].equals(want.table[col]):
            return f"column {col} differs from pyarrow's"
    if not np.allclose(got["v_sum"].to_numpy(), want.table["v_sum"].to_numpy(), rtol=1e-9):
        return "v_sum differs from pyarrow's"
    return None


# -- the engine ------------------------------------------------------------------------


class EngineRun:
    """One engine job as a callable for ``measure``, keeping every call's ``JobResult``."""

    def __init__(self, build: Callable[[], Any]) -> None:
        self.build = build
        self.results: list[Any] = []

    def __call__(self) -> None:
        self.results.append(self.build().collect())


def sort_job(session: hs.Session, data: list[pa.Table]) -> Callable[[], Any]:
    def build() -> Any:
        job = session.job("batch-sort")
        source = job.from_arrow(data, name="source", parallelism=len(data))
        return source.sort("k", name="sort").map_batches(sort_summary, name="check")

    return build


def join_job(
    session: hs.Session, left: list[pa.Table], right: list[pa.Table], strategy: str
) -> Callable[[], Any]:
    def build() -> Any:
        job = session.job(f"batch-join-{strategy}")
        a = job.from_arrow(left, name="left", parallelism=len(left))
        b = job.from_arrow(right, name="right", parallelism=len(right))
        joined = a.join(b, on="k", how="inner", strategy=strategy, name="join")
        return joined.map_batches(join_summary, name="check")

    return build


def cogroup_job(
    session: hs.Session, left: list[pa.Table], right: list[pa.Table], fn: Callable[..., Any]
) -> Callable[[], Any]:
    def build() -> Any:
        job = session.job("batch-co-group")
        a = job.from_arrow(left, name="left", parallelism=len(left))
        b = job.from_arrow(right, name="right", parallelism=len(right))
        return a.co_group(b, "k", fn, name="co_group")

    return build


@dataclass
class EngineFigures:
    """What the workload keeps of an engine measurement beyond its seconds."""

    memory: int = 0
    peak_over_memory: float | None = None
    peak_bytes: int = 0
    spilled_bytes: int = 0
    edge_modes: dict[str, str] = field(default_factory=dict)
    checked_runs: int = 0
    stateful_cpu_seconds: float | None = None
    stateful_wall_seconds: float | None = None

    def note(self) -> str:
        if self.peak_over_memory is None:
            return ""
        modes = ", ".join(sorted(set(self.edge_modes.values())))
        return (
            f"memory {mib(self.memory)}, peak {self.peak_over_memory:.2f}x, spilled "
            f"{mib(self.spilled_bytes)}; edges {modes}; {self.checked_runs} runs checked"
        )


def engine_measure(
    m: Measurement,
    build: Callable[[], Any],
    runs: int,
    check: Callable[[pa.Table, Expected], str | None],
    want: Expected,
) -> tuple[Measurement, EngineFigures]:
    """``measure`` the job, then check every run (warm-up too) against pyarrow and read
    the stateful vertex's memory figures from the timed runs."""
    run = EngineRun(build)
    measure(m, run, runs)
    figures = EngineFigures()
    for result in run.results:
        problem = check(result.table, want)
        if problem is not None and m.error is None:
            m.error = f"wrong result: {problem}"
            print(f"[bench] {m.workload} | {m.system}: {m.error}", file=sys.stderr, flush=True)
        figures.checked_runs += 1
    timed = run.results[1:] if len(run.results) > runs else run.results
    for result in timed:
        vertices = [v for v in result.vertices.values() if v.memory]
        if not vertices:
            continue
        figures.memory = max(figures.memory, max(v.memory for v in vertices))
        ratio = max(v.peak_memory_bytes / v.memory for v in vertices)
        figures.peak_over_memory = max(figures.peak_over_memory or 0.0, ratio)
        figures.peak_bytes = max(figures.peak_bytes, max(v.peak_memory_bytes for v in vertices))
        figures.spilled_bytes = max(figures.spilled_bytes, sum(v.spilled_bytes for v in vertices))
        figures.edge_modes = {e.name: e.mode for e in result.edges.values()}
    if timed and figures.peak_over_memory is not None:
        stateful = [vs for r in timed if (vs := [v for v in r.vertices.values() if v.memory])]
        figures.stateful_cpu_seconds = statistics.median(
            sum(v.cpu_seconds for v in vs) for vs in stateful
        )
        figures.stateful_wall_seconds = statistics.median(
            max(v.wall_seconds for v in vs) for vs in stateful
        )
    note = figures.note()
    m.note = f"{m.note}; {note}" if m.note and note else (m.note or note)
    return m, figures


# -- the peers -------------------------------------------------------------------------


def ray_data_sort(data: list[pa.Table], counts: list[int]) -> Callable[[], Any]:
    import ray

    def run() -> None:
        ds = ray.data.from_arrow(data).sort("k").materialize()
        counts.append(ds.count())

    return run


def ray_data_join(
    left: list[pa.Table], right: list[pa.Table], counts: list[int]
) -> Callable[[], Any]:
    import ray

    def run() -> None:
        a, b = ray.data.from_arrow(left), ray.data.from_arrow(right)
        ds = a.join(b, "inner", PARALLELISM, on=("k",)).materialize()
        counts.append(ds.count())

    return run


def ray_data_measure(
    m: Measurement, fn: Callable[[list[int]], Callable[[], Any]], runs: int, want: Expected
) -> Measurement:
    counts: list[int] = []
    measure(m, fn(counts), runs)
    wrong = [c for c in counts if c != want.rows]
    if wrong and m.error is None:
        m.error = f"wrong result: {wrong[0]:,} rows, pyarrow has {want.rows:,}"
    return m


def spark_frame(spark: Any, data: Sequence[pa.Table]) -> Any:
    """The same Arrow data as a cached Spark DataFrame of 8 partitions (not timed)."""
    df = spark.createDataFrame(pa.concat_tables(data).to_pandas())
    df = df.repartition(PARALLELISM).cache()
    df.count()
    return df


def spark_plan(df: Any) -> str:
    """The physical join Spark chose (``BroadcastHashJoin``, ``SortMergeJoin``, ...)."""
    plan = df._jdf.queryExecution().executedPlan().toString()
    for name in ("BroadcastHashJoin", "SortMergeJoin", "ShuffledHashJoin"):
        if name in plan:
            return name
    return "?"


# -- the run ---------------------------------------------------------------------------


@dataclass
class Batch:
    rows: list[int]
    join_rows: int
    baseline_rows: int
    runs: int
    peers: set[str]
    object_store: str
    results: list[Measurement] = field(default_factory=list)
    figures: dict[int, EngineFigures] = field(default_factory=dict)
    extra: dict[int, dict[str, Any]] = field(default_factory=dict)
    memories: dict[str, int] = field(default_factory=dict)

    def add(self, m: Measurement, figures: EngineFigures | None = None, **extra: Any) -> None:
        self.results.append(m)
        if figures is not None:
            self.figures[id(m)] = figures
        if extra:
            self.extra[id(m)] = extra


def run(
    rows: Sequence[int],
    join_rows: int,
    baseline_rows: int,
    runs: int,
    object_store: str = "3 GiB",
    peers: Sequence[str] = PEERS,
) -> tuple[list[Measurement], dict[str, Any]]:
    """Every measurement of the workload in one Ray; must be called while no other
    session (no other Ray) is open in the process.  The measurements and the summary
    (``payload["batch"]``)."""
    unknown = set(peers) - set(PEERS)
    if unknown:
        raise ValueError(f"unknown peer(s) {sorted(unknown)}; choose from {PEERS}")
    b = Batch(list(rows), join_rows, baseline_rows, runs, set(peers), object_store)
    started = time.time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hs.ConfigWarning)
        with hs.Session(session_config(AMPLE, object_store), slots=SLOTS) as session:
            _phase_engine(b, session)
            if "spark" in b.peers:
                _phase_spark(b, session)
    summary = _summary(b, time.time() - started)
    return b.results, summary


class QuarterSessions:
    """The session of the current smaller memory: opened when first asked for, kept while
    the next measurement asks for the same memory, closed when it asks for another (one
    such session open at a time, beside the ample one)."""

    def __init__(self, object_store: str) -> None:
        self.object_store = object_store
        self.memory = 0
        self.session: hs.Session | None = None

    def get(self, memory: int) -> hs.Session:
        if self.session is None or memory != self.memory:
            self.close()
            self.session = hs.Session(session_config(memory, self.object_store), slots=SLOTS)
            self.memory = memory
        return self.session

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None


def _phase_engine(b: Batch, session: hs.Session) -> None:
    """The engine and Ray Data (Spark not started: Ray Data has both Ray CPUs)."""
    quarters = QuarterSessions(b.object_store)
    try:
        _engine_and_ray_data(b, session, quarters)
    finally:
        quarters.close()


def _engine_and_ray_data(b: Batch, session: hs.Session, quarters: QuarterSessions) -> None:
    ample = "ample memory"
    for n in b.rows:
        table = make_table(n, "uniform")
        data = blocks(table, PARALLELISM)
        want = expected_sort(table)
        quarter = quarter_memory(table)
        b.memories[f"sort {n}"] = quarter
        b.add(*engine_measure(Measurement(SORT, f"engine sort, {ample}", n, "uniform"),
                              sort_job(session, data), b.runs, check_sort, want))  # fmt: skip
        m = Measurement(SORT, "engine sort, 1/4 memory", n, "uniform")
        small = quarters.get(quarter)
        b.add(*engine_measure(m, sort_job(small, data), b.runs, check_sort, want))
        if "ray-data" in b.peers:
            m = Measurement(SORT, "ray data sort", n, "uniform", note="sort('k').materialize()")
            b.add(ray_data_measure(m, lambda c, d=data: ray_data_sort(d, c), b.runs, want))

    n = b.join_rows
    left_table = make_table(n, "uniform")
    left = blocks(left_table, PARALLELISM)
    for workload, right_table in (
        (JOIN_DIM, dimension()),
        (JOIN_FACT, fact_unique(n)),
    ):
        right = blocks(right_table, PARALLELISM)
        want = expected_join(left_table, right_table)
        quarter = quarter_memory(left_table, right_table)
        b.memories[workload] = quarter
        small = quarters.get(quarter)
        for strategy in ("hash", "sort-merge"):
            for where, label in ((session, ample), (small, "1/4 memory")):
                m = Measurement(workload, f"engine {strategy} join, {label}", n, "uniform")
                build = join_job(where, left, right, strategy)
                b.add(*engine_measure(m, build, b.runs, check_join, want))
        if "ray-data" in b.peers:
            m = Measurement(
                workload, "ray data join", n, "uniform", note="join('inner', 8).materialize()"
            )
            b.add(ray_data_measure(m, lambda c, r=right: ray_data_join(left, r, c), b.runs, want))

    right_table = cogroup_right(n)
    right = blocks(right_table, PARALLELISM)
    want = expected_cogroup(left_table, right_table)
    quarter = quarter_memory(left_table, right_table)
    b.memories[COGROUP] = quarter
    b.add(*engine_measure(Measurement(COGROUP, f"engine co_group, vectorized, {ample}", n,
                                      "uniform"),
                          cogroup_job(session, left, right, cogroup_counts), b.runs,
                          check_cogroup, want))  # fmt: skip
    m = Measurement(COGROUP, "engine co_group, vectorized, 1/4 memory", n, "uniform")
    small = quarters.get(quarter)
    b.add(*engine_measure(m, cogroup_job(small, left, right, cogroup_counts), b.runs,
                          check_cogroup, want))  # fmt: skip
    quarters.close()
    _record_at_a_time(b, session, left_table, right_table)


def _record_at_a_time(
    b: Batch, session: hs.Session, left_table: pa.Table, right_table: pa.Table
) -> None:
    """The co_group's figures record at a time, on the first ``baseline_rows`` of each
    side, scaled per row to ``join_rows``: as the engine's co_group function, and alone
    in the driver."""
    n, sub = b.join_rows, min(b.baseline_rows, b.join_rows)
    lsub, rsub = left_table.slice(0, sub), right_table.slice(0, sub)
    want = expected_cogroup(lsub, rsub)
    scale = n / sub
    scaled = f"measured on {sub:,} + {sub:,} rows, seconds scaled x{scale:g} to {n:,} + {n:,}"

    m = Measurement(COGROUP, "engine co_group, per-record fn (scaled)", n, "uniform")
    build = cogroup_job(session, blocks(lsub, PARALLELISM), blocks(rsub, PARALLELISM),
                        cogroup_records)  # fmt: skip
    m, figures = engine_measure(m, build, b.runs, check_cogroup, want)
    _scale(m, scale, scaled)
    b.add(m, figures, measured_rows=sub, scale=scale)

    m = Measurement(COGROUP, "python per-record, 1 process (scaled)", n, "uniform")
    outputs: list[pa.Table] = []
    measure(m, lambda: outputs.append(cogroup_records(lsub, rsub)), b.runs)
    problem = next((p for p in (check_cogroup(o, want) for o in outputs) if p), None)
    if problem and m.error is None:
        m.error = f"wrong result: {problem}"
    _scale(m, scale, scaled)
    b.add(m, measured_rows=sub, scale=scale)


def _scale(m: Measurement, scale: float, note: str) -> None:
    measured = ", ".join(f"{s:.3f}" for s in m.seconds)
    m.seconds = [s * scale for s in m.seconds]
    m.note = f"{note} (measured {measured} s)" + (f"; {m.note}" if m.note else "")


def _phase_spark(b: Batch, session: hs.Session) -> None:
    """Spark on the same data (its executor now holds both Ray CPUs)."""
    spark = session.spark
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    spark.conf.set("spark.sql.shuffle.partitions", str(PARALLELISM))
    spark.conf.set("spark.sql.execution.arrow.pyspark.enabled", "true")
    off, on = "-1", SPARK_BROADCAST_DEFAULT
    for n in b.rows:
        df = spark_frame(spark, blocks(make_table(n, "uniform"), PARALLELISM))
        try:
            m = Measurement(SORT, "spark orderBy", n, "uniform",
                            note="orderBy('k') to noop, AQE off, cached input")  # fmt: skip
            b.add(measure(m, lambda df=df: _noop(df.orderBy("k")), b.runs))
        finally:
            df.unpersist()
    n = b.join_rows
    left = spark_frame(spark, blocks(make_table(n, "uniform"), PARALLELISM))
    try:
        for workload, right_table, thresholds in (
            (JOIN_DIM, dimension(), (off, on)),
            (JOIN_FACT, fact_unique(n), (off,)),
        ):
            right = spark_frame(spark, blocks(right_table, PARALLELISM))
            try:
                for threshold in thresholds:
                    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", threshold)
                    joined = left.join(right, on="k", how="inner")
                    plan = spark_plan(joined)
                    label = "broadcast off" if threshold == off else "broadcast on"
                    m = Measurement(workload, f"spark join, {label}", n, "uniform",
                                    note=f"{plan} to noop, AQE off, cached input")  # fmt: skip
                    b.add(measure(m, lambda j=joined: _noop(j), b.runs), spark_plan=plan)
            finally:
                right.unpersist()
    finally:
        spark.conf.set("spark.sql.autoBroadcastJoinThreshold", on)
        left.unpersist()


def _noop(df: Any) -> None:
    df.write.format("noop").mode("overwrite").save()


# -- the summary -----------------------------------------------------------------------


def _median(results: list[Measurement], workload: str, rows: int, system: str) -> float | None:
    for m in results:
        if (m.workload, m.rows) == (workload, rows) and m.system.startswith(system):
            return m.median if m.seconds and not m.error else None
    return None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _status(value: float | None, target: float, at_most: bool = True) -> str:
    if value is None:
        return "not measured"
    return "met" if (value <= target if at_most else value >= target) else "missed"


def _targets(b: Batch) -> list[dict[str, Any]]:
    r = b.results
    ref = b.join_rows if b.join_rows in b.rows else sorted(b.rows)[len(b.rows) // 2]
    big = max(b.rows)
    out: list[dict[str, Any]] = []

    def add(target: str, value: float | None, limit: float, what: str, at_most: bool = True,
            unit: str = "x") -> None:  # fmt: skip
        out.append(
            {
                "target": target,
                "value": value,
                "limit": limit,
                "measured": what,
                "status": _status(value, limit, at_most),
                "unit": unit,
            }
        )

    spark_sort = _median(r, SORT, ref, "spark orderBy")
    for kind in ("ample", "1/4"):
        engine = _median(r, SORT, ref, f"engine sort, {kind}")
        add(f"sort <= {SORT_TARGET}x Spark at {ref:,} rows ({kind} memory)",
            _ratio(engine, spark_sort), SORT_TARGET,
            f"{_fmt(engine)} vs {_fmt(spark_sort)}")  # fmt: skip
    for workload, spark_systems in (
        (JOIN_DIM, ("spark join, broadcast off", "spark join, broadcast on")),
        (JOIN_FACT, ("spark join, broadcast off",)),
    ):
        best = _best_engine(r, workload, b.join_rows, "engine hash join")
        for system in spark_systems:
            spark = _median(r, workload, b.join_rows, system)
            add(f"{workload}: hash join <= {JOIN_TARGET}x {system.removeprefix('spark join, ')}"
                " Spark", _ratio(best[1], spark), JOIN_TARGET,
                f"{best[0]} {_fmt(best[1])} vs {_fmt(spark)}")  # fmt: skip
        smj = _best_engine(r, workload, b.join_rows, "engine sort-merge join")
        spark = _median(r, workload, b.join_rows, "spark join, broadcast off")
        add(f"{workload}: sort-merge join <= {JOIN_TARGET}x broadcast-off Spark",
            _ratio(smj[1], spark), JOIN_TARGET,
            f"{smj[0]} {_fmt(smj[1])} vs {_fmt(spark)}")  # fmt: skip
    if big != ref:
        for kind in ("ample", "1/4"):
            small_s = _median(r, SORT, ref, f"engine sort, {kind}")
            big_s = _median(r, SORT, big, f"engine sort, {kind}")
            per_row = _ratio(_ratio(big_s, big), _ratio(small_s, ref))
            add(f"sort time per row at {big:,} within {LINEAR_TARGET}x of {ref:,} ({kind} "
                "memory)", per_row, LINEAR_TARGET,
                f"{_us(big_s, big)} vs {_us(small_s, ref)} us/row")  # fmt: skip
    peaks = [(m, b.figures[id(m)]) for m in r if id(m) in b.figures]
    peaks = [(m, f) for m, f in peaks if f.peak_over_memory is not None and not m.error]
    if peaks:
        worst_m, worst = max(peaks, key=lambda p: p[1].peak_over_memory or 0.0)
        add(f"a task's peak memory <= {PEAK_TARGET}x operators.memory (every engine run)",
            worst.peak_over_memory, PEAK_TARGET,
            f"largest: {worst_m.system}, {worst_m.rows:,} rows ({worst_m.workload}): "
            f"{mib(worst.peak_bytes)} of {mib(worst.memory)}")  # fmt: skip
    else:
        add(f"a task's peak memory <= {PEAK_TARGET}x operators.memory", None, PEAK_TARGET,
            "no engine run reported operator memory")  # fmt: skip
    engine = _median(r, COGROUP, b.join_rows, "engine co_group, vectorized, ample")
    for system in ("python per-record", "engine co_group, per-record"):
        base = _median(r, COGROUP, b.join_rows, system)
        add(f"co_group >= {COGROUP_TARGET:g}x faster than record at a time ({system})",
            _ratio(base, engine), COGROUP_TARGET, f"{_fmt(base)} (scaled) vs {_fmt(engine)}",
            at_most=False)  # fmt: skip
    return out


def _best_engine(
    results: list[Measurement], workload: str, rows: int, prefix: str
) -> tuple[str, float | None]:
    done = [
        m for m in results
        if (m.workload, m.rows) == (workload, rows) and m.system.startswith(prefix)
        and m.seconds and not m.error
    ]  # fmt: skip
    if not done:
        return prefix, None
    best = min(done, key=lambda m: m.median)
    return best.system, best.median


def _fmt(seconds: float | None) -> str:
    return f"{seconds:.3f} s" if seconds is not None else "-"


def _us(seconds: float | None, rows: int) -> str:
    return f"{seconds / rows * 1e6:.3f}" if seconds is not None else "-"


def _summary(b: Batch, seconds: float) -> dict[str, Any]:
    rows = []
    for m in b.results:
        f = b.figures.get(id(m))
        row: dict[str, Any] = {
            "workload": m.workload,
            "system": m.system,
            "rows": m.rows,
            "median_seconds": m.median if m.seconds and not m.error else None,
            "us_per_row": m.median / m.rows * 1e6 if m.seconds and not m.error else None,
            "error": m.error,
            "note": m.note,
            **b.extra.get(id(m), {}),
        }
        if f is not None:
            row.update(
                memory_bytes=f.memory,
                peak_memory_bytes=f.peak_bytes,
                peak_over_memory=f.peak_over_memory,
                spilled_bytes=f.spilled_bytes,
                edge_modes=f.edge_modes,
                checked_runs=f.checked_runs,
                stateful_cpu_seconds=f.stateful_cpu_seconds,
                stateful_wall_seconds=f.stateful_wall_seconds,
            )
        rows.append(row)
    return {
        "seconds": seconds,
        "rows": b.rows,
        "join_rows": b.join_rows,
        "baseline_rows": b.baseline_rows,
        "runs": b.runs,
        "peers": sorted(b.peers),
        "config": session_config(AMPLE, b.object_store),
        "slots": SLOTS,
        "quarter_memory_bytes": b.memories,
        "measurements": rows,
        "targets": _targets(b),
    }
