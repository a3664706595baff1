"""Workload 4: the main job (``examples/main_job.py``) against plain PySpark, scale by scale.

Runs in its own session, not the shared benchmark one: the main job's own
``configs/main.yaml`` (edge modes, parallelism, and whatever else the engine's
config grows) with only the ``spark`` and ``ray`` sections overridden so that
Spark gets one executor with both cores, and its JVMs both compilers.  The
engine's executors take no Ray CPUs, so the engine and Spark each can use both
cores; in the shared session Spark had one core, which made plain PySpark look
slower than it is.

Per scale, the inputs are the main job's own (``main_job.generate``): the ``orders``
Parquet, written once, which Spark plans as a file scan, and the ``customers``, which
Spark generates.  Neither is cached, as in the main job: plain PySpark reads the same
Parquet file and generates the same customers the engine gets.  On that data, in the
same run, each of these is warmed up once and timed ``runs`` times (median):

* **engine path**: ``session.from_dataframe(spark_pipeline(...)).collect()``, the
  result back to Spark (``bridge.to_dataframe``) and written to Spark's ``noop`` sink,
  split into conversion in (the customers, Spark -> Arrow -> object store,
  ``JobResult.sources_seconds``), engine (the rest of ``wall_seconds``: the executors
  read the orders' Parquet themselves) and conversion out;
* **plain pyspark**: ``spark_pipeline(...)`` written to the ``noop`` sink;
* **spark export bound**: Spark exporting what the engine gets handed over (the
  customers) to Arrow and doing nothing else (``mapInArrow`` counting rows, to
  ``noop``), once with every column and once with only the columns the main job
  reads.  The engine prunes unread columns before exporting, so the second is the
  bound its conversion in is held to;
* **first run**: the engine path's warm-up, kept as its own figure (at the
  first scale it is the session's first job) so a first-run penalty shows.

The ratios (engine / PySpark, conversion in / read-column bound, per-row time
against the previous scale) are what is claimed; absolute seconds drift on a
shared machine.
"""

from __future__ import annotations

import functools
import statistics
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

import hybrid_shuffle as hs
from benchmarks.harness import Measurement, measure

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "main.yaml"
WORKLOAD = "main job"
DISTRIBUTION = "tpch"
#: the customers' columns ``spark_pipeline`` reads: what the engine has Spark export
#: (the orders are a Parquet scan its executors read)
READ_COLUMNS = ["c_custkey", "c_mktsegment", "c_nationkey"]
#: Spark: one executor with both cores; memory enough for scale 20's join and aggregate
SPARK = {"executors": 1, "executor_cores": 2, "executor_memory": "6 GiB", "prewarm": True}
RAY = {"num_cpus": 2, "object_store_memory": "4 GiB"}
#: the JVM option that keeps the quick compiler alone (see ``_full_compilers``)
_QUICK_ONLY = "-XX:TieredStopAtLevel="

ENGINE = "engine path"
FIRST_RUN = "first run of engine path (warm-up)"
PYSPARK = "plain pyspark"
BOUND_FULL = "export bound, all columns (mapInArrow)"
BOUND_READ = "export bound, read columns (mapInArrow)"
PARTS = ("in", "engine", "out")
#: the join tasks' CPU microseconds per probe row (kept with the parts of each run)
JOIN_US = "join_us_per_row"


def session_config(path: Path = CONFIG) -> dict[str, Any]:
    """``configs/main.yaml`` as loaded, with only the ``spark`` and ``ray`` sections
    overridden (Spark's JVMs keep both compilers: ``_full_compilers``).

    The other keys are passed through untouched, so the benchmark follows the
    main job's config as it changes (new engine keys need no change here).
    Keys of the file's ``spark`` section that are not overridden (e.g. extra
    Spark ``configs``) are kept.  Its ``edges`` section is left out (see below).
    """
    raw = yaml.safe_load(path.read_text()) or {}
    config = dict(raw)
    # the file's ``edges`` name the exchanges of Spark's plan at the main job's default
    # scale (a broadcast join); from scale 5 Spark plans a sort-merge join, whose
    # exchanges have other ids, and a config naming an edge the job does not have is a
    # ConfigError: the benchmark lets the engine's rules choose every edge's mode instead
    config.pop("edges", None)
    spark = {**(raw.get("spark") or {}), **SPARK}
    spark["configs"] = _full_compilers(spark.get("configs") or {})
    config["spark"] = spark
    config["ray"] = {**(raw.get("ray") or {}), **RAY}
    return config


def _full_compilers(configs: dict[str, str]) -> dict[str, str]:
    """``configs`` without a JVM option that stops at the quick compiler.

    ``configs/main.yaml`` gives Spark's JVMs the quick compiler alone, which serves the
    main job's few seconds of Spark work best; plain PySpark here runs the whole join
    and aggregate for seconds, where the quick compiler alone made it 1.7x slower
    (scale 5: 9.36 s against 5.53 s, BENCHMARKS.md, issue 34).  Each peer gets its best
    settings, so the benchmark's Spark keeps the JVM's default compilers.
    """
    kept: dict[str, str] = {}
    for key, value in configs.items():
        if key.endswith("extraJavaOptions"):
            value = " ".join(o for o in str(value).split() if not o.startswith(_QUICK_ONLY))
            if not value:
                continue
        kept[key] = value
    return kept


def run(
    scales: Sequence[float], runs: int, config: dict[str, Any] | None = None
) -> tuple[list[Measurement], list[dict[str, Any]]]:
    """Every scale in one session: the measurements, and one summary row per scale.

    Must be called while no other session (no other Ray) is open in the process.
    """
    sys.path.insert(0, str(ROOT / "examples"))
    from main_job import generate

    config = config if config is not None else session_config()
    results: list[Measurement] = []
    summary: list[dict[str, Any]] = []
    with hs.Session(config) as session:
        spark = session.spark
        for scale in scales:
            orders, customers = generate(spark, scale)
            counts = {"orders": orders.count(), "customers": customers.count()}
            measured = _scale(session, orders, customers, sum(counts.values()), runs)
            results += measured
            summary.append(_summary(scale, counts, measured, summary[-1] if summary else None))
        reference = int64_join_reference(session)
    for row in summary:
        row["int64_join_cpu_us_per_probe_row"] = reference
        row["join_over_int64_join"] = _ratio(row["join_cpu_us_per_probe_row"], reference)
    return results, summary


def _scale(
    session: hs.Session, orders: Any, customers: Any, rows: int, runs: int
) -> list[Measurement]:
    """The four measurements of one scale; the engine path first, so that at the first
    scale its warm-up is the session's first job."""
    from main_job import spark_pipeline

    engine = _EnginePath(session, orders, customers)
    m = measure(Measurement(WORKLOAD, ENGINE, rows, DISTRIBUTION), engine, runs)
    warmup, timed = engine.calls[:1], engine.calls[1:]
    m.parts = {k: [c[k] for c in timed] for k in (*PARTS, JOIN_US)} if m.seconds else {}
    if m.parts:
        m.note = ", ".join(f"{k} {statistics.median(m.parts[k]):.3f} s" for k in PARTS)
    first = Measurement(WORKLOAD, FIRST_RUN, rows, DISTRIBUTION)
    if warmup:
        first.seconds = [warmup[0]["total"]]
        first.parts = {k: [warmup[0][k]] for k in PARTS}
        split = ", ".join(f"{k} {warmup[0][k]:.3f} s" for k in PARTS)
        first.note = f"{split} (a warm-up: peak memory not sampled)"
    else:
        first.error = m.error or "the warm-up did not finish"
    out = [m, first]
    out.append(
        measure(
            Measurement(
                WORKLOAD, PYSPARK, rows, DISTRIBUTION, note="spark_pipeline to noop, same input"
            ),
            lambda: spark_pipeline(orders, customers).write.format("noop").mode("overwrite").save(),
            runs,
        )
    )
    for name, frames, note in (
        (BOUND_FULL, (customers,), "customers, every column"),
        (BOUND_READ, (customers.select(*READ_COLUMNS),), "customers, the 3 columns the job reads"),
    ):
        out.append(
            measure(
                Measurement(WORKLOAD, name, rows, DISTRIBUTION, note=note),
                functools.partial(_export, frames),
                runs,
            )
        )
    return out


class _EnginePath:
    """The engine path as one callable for ``measure``, keeping each call's split.

    ``measure`` times the whole call; the split comes from ``JobResult`` (in and
    engine) and from timing the conversion out here.  Every call is kept,
    the warm-up included, so the caller can report the first run on its own.
    """

    def __init__(self, session: hs.Session, orders: Any, customers: Any) -> None:
        self.session, self.orders, self.customers = session, orders, customers
        self.calls: list[dict[str, float]] = []

    def __call__(self) -> None:
        from main_job import spark_pipeline

        started = time.perf_counter()
        pipeline = spark_pipeline(self.orders, self.customers)
        result = self.session.from_dataframe(pipeline, "tpch-revenue").collect()
        join_us = _join_us_per_row(result)
        mark = time.perf_counter()
        df = self.session.bridge.to_dataframe(result.table)
        df.write.format("noop").mode("overwrite").save()
        done = time.perf_counter()
        self.calls.append(
            {
                "in": result.sources_seconds,
                "engine": result.wall_seconds - result.sources_seconds,
                "out": done - mark,
                "total": done - started,
                "join_us_per_row": join_us,
            }
        )


def _join_us_per_row(result: Any) -> float:
    """CPU microseconds per probe row of the join tasks (the join, with the aggregate's
    combiner chained after it): from ``TaskReport.cpu_seconds`` and the rows read."""
    tasks = [t for t in result.tasks if t.vertex.split("->")[0] == "join"]
    cpu = sum(t.cpu_seconds for t in tasks)
    probe = sum(r.rows for t in tasks for r in t.reads if r.edge.endswith(".left"))
    return cpu / max(probe, 1) * 1e6


def int64_join_reference(session: hs.Session, rows: int = 10_000_000) -> float:
    """The same shape on int64/float64 columns, same session and config: ``rows`` facts
    joined with a 100,000-row dimension, the aggregate's combiner chained after the join;
    CPU microseconds per probe row of the join tasks (median of 3 after a warm-up)."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(7)
    facts = pa.table({"k": rng.integers(0, 100_000, rows), "v": rng.random(rows)})
    dim = pa.table({"k": np.arange(100_000), "g": np.arange(100_000) % 125})

    def once() -> float:
        job = session.job("tpch-revenue-int64")
        joined = job.from_arrow(facts, name="facts", parallelism=4).join(
            job.from_arrow(dim, name="dim", parallelism=4), on="k", edge="by_k", name="join"
        )
        result = joined.key_by("g", edge="by_g").aggregate({"v": ["sum", "count"]}).collect()
        return _join_us_per_row(result)

    with warnings.catch_warnings():  # the main job's edges: not this job's (default modes)
        warnings.simplefilter("ignore", hs.ConfigWarning)
        once()
        return statistics.median(once() for _ in range(3))


def _count_batches(batches: Iterator[Any]) -> Iterator[Any]:
    """Runs in Spark's Python worker: receives the Arrow batches and only counts rows."""
    import pyarrow as pa

    n = 0
    for batch in batches:
        n += batch.num_rows
    yield pa.RecordBatch.from_pydict({"n": [n]})


def _export(frames: Sequence[Any]) -> None:
    """Spark exports each DataFrame to Arrow and hands it to Python, which drops it."""
    for df in frames:
        df.mapInArrow(_count_batches, "n long").write.format("noop").mode("overwrite").save()


def _median(m: Measurement) -> float | None:
    return m.median if m.seconds and not m.error else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _summary(
    scale: float,
    counts: dict[str, int],
    measured: list[Measurement],
    previous: dict[str, Any] | None,
) -> dict[str, Any]:
    """One machine-readable row of the main-job table (``None`` where a system failed)."""
    by = {m.system: m for m in measured}
    rows = sum(counts.values())
    engine, first = by[ENGINE], by[FIRST_RUN]
    engine_s, pyspark_s = _median(engine), _median(by[PYSPARK])
    full_s, read_s = _median(by[BOUND_FULL]), _median(by[BOUND_READ])
    parts = {k: statistics.median(v) for k, v in engine.parts.items() if v and k in PARTS}
    join_us = statistics.median(engine.parts[JOIN_US]) if engine.parts.get(JOIN_US) else None
    us_per_row = engine_s / rows * 1e6 if engine_s is not None else None
    return {
        "scale": scale,
        "rows": rows,
        **{f"{k}_rows": v for k, v in counts.items()},
        "runs": len(engine.seconds),
        "engine_seconds": engine_s,
        "engine_parts_seconds": parts,
        "first_run_seconds": _median(first),
        "first_run_parts_seconds": {k: v[0] for k, v in first.parts.items()},
        "pyspark_seconds": pyspark_s,
        "engine_over_pyspark": _ratio(engine_s, pyspark_s),
        "export_bound_all_columns_seconds": full_s,
        "export_bound_read_columns_seconds": read_s,
        "conversion_in_over_read_columns_bound": _ratio(parts.get("in"), read_s),
        "first_run_over_engine": _ratio(_median(first), engine_s),
        "engine_us_per_row": us_per_row,
        "pyspark_us_per_row": pyspark_s / rows * 1e6 if pyspark_s is not None else None,
        # per-row time against the previous scale: "scale 20 within 1.2x of scale 5" reads here
        "engine_per_row_over_previous_scale": _ratio(
            us_per_row, previous["engine_us_per_row"] if previous else None
        ),
        "join_cpu_us_per_probe_row": join_us,
        "errors": {m.system: m.error for m in measured if m.error},
    }
