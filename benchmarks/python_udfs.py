"""Issue 35: a PySpark job with Python UDFs, in the engine's tasks against Spark's own.

    RAY_ADDRESS=local .venv/bin/python -m benchmarks run python-udfs --scale 10 --runs 2

One Parquet dataset (``--scale`` million rows over 1,000 keys, 8 files), and two versions
of one pipeline: Parquet scan -> a scalar function of two columns -> ``groupBy(k)
.applyInPandas`` (one summary row per group) -> an aggregate of the summaries.  In
``pandas`` the scalar function is a ``@pandas_udf``, in ``rows`` a row-at-a-time
``@udf``.  Each runs, in the same session and the same run:

* **spark**: the DataFrame's ``collect()`` in Spark on Ray (one executor with both
  cores, ``spark.sql.execution.arrow.pyspark.enabled`` on, AQE on);
* **engine**: ``Session.from_dataframe(df).collect()`` (Spark plans it, the engine runs
  it: 2 CPUs, parallelism 2), planning included.

Every run builds its DataFrame afresh (Spark would otherwise reuse the shuffle files of
the previous run's plan), and both answers are compared.  The share of the engine's
time spent in the user's functions is estimated by calling the same functions in this
process over the same data, batch by batch and group by group (one thread), against
the CPU seconds of the engine's tasks.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

import hybrid_shuffle as hs
from benchmarks.harness import target

ROOT = Path(__file__).resolve().parent
DATA = ROOT / ".data"
CONFIG = {
    "parallelism": 2,
    "ray": {"num_cpus": 2, "object_store_memory": "3 GiB"},
    "spark": {"executors": 1, "executor_cores": 2, "executor_memory": "4 GiB", "prewarm": True},
}
BATCH = 10_000  # spark.sql.execution.arrow.maxRecordsPerBatch, Spark's default
SCHEMA = "k long, n long, mean_x double, max_x double"


def dataset(rows: int, groups: int, data: Path = DATA) -> Path:
    """``rows`` rows of ``k`` (``groups`` keys), ``a``, ``b`` as 8 Parquet files (made once)."""
    folder = data / f"python-udfs-{rows}-{groups}"
    if not folder.exists():
        rng = np.random.default_rng(35)
        tmp = folder.with_suffix(".tmp")
        tmp.mkdir(parents=True, exist_ok=True)
        per = -(-rows // 8)
        for i in range(8):
            n = min(per, rows - i * per)
            table = pa.table(
                {
                    "k": rng.integers(0, groups, n),
                    "a": rng.random(n) * 100.0,
                    "b": rng.random(n),
                }
            )
            pq.write_table(table, tmp / f"part-{i}.parquet", row_group_size=1 << 20)
        tmp.rename(folder)
    return folder


def functions() -> dict[str, Any]:
    """The user's functions, made here so that cloudpickle ships them by value (Spark's
    Python workers cannot import this module)."""
    from pyspark.sql.functions import pandas_udf, udf
    from pyspark.sql.types import DoubleType

    def combine(a: pd.Series, b: pd.Series) -> pd.Series:
        return a * 2.0 + b

    def combine_row(a: float, b: float) -> float:
        return a * 2.0 + b

    def summary(frame: pd.DataFrame) -> pd.DataFrame:
        x = frame["x"]
        return pd.DataFrame(
            {"k": [frame["k"].iloc[0]], "n": [len(frame)], "mean_x": [x.mean()], "max_x": [x.max()]}
        )

    return {
        "pandas": pandas_udf(combine, DoubleType()),
        "rows": udf(combine_row, DoubleType()),
        "combine": combine,
        "combine_row": combine_row,
        "summary": summary,
    }


def pipeline(spark: Any, path: Path, scalar: Any, summary: Callable[..., Any]) -> Any:
    from pyspark.sql import functions as F

    df = spark.read.parquet(str(path)).withColumn("x", scalar("a", "b"))
    per_group = df.groupBy("k").applyInPandas(summary, SCHEMA)
    return per_group.agg(
        F.count("*").alias("groups"),
        F.sum("n").alias("rows"),
        F.round(F.sum("mean_x"), 6).alias("sum_mean"),
        F.round(F.max("max_x"), 6).alias("max_x"),
    )


def user_seconds(path: Path, fns: dict[str, Any], variant: str) -> float:
    """The user's functions alone, in this process, over the same rows: scalar per batch
    of ``BATCH`` rows, then the summary per group."""
    table = ds.dataset(path).to_table()
    started = time.perf_counter()
    xs = []
    for batch in table.to_batches(BATCH):
        if variant == "pandas":
            a, b = batch.column("a").to_pandas(), batch.column("b").to_pandas()
            xs.append(fns["combine"](a, b))
        else:  # called per row, as the engine calls it: map over the argument lists
            a, b = batch.column("a").to_pylist(), batch.column("b").to_pylist()
            xs.append(pd.Series(list(map(fns["combine_row"], a, b))))
    frame = pd.DataFrame({"k": table.column("k").to_numpy(), "x": pd.concat(xs).to_numpy()})
    for _, group in frame.groupby("k", sort=False):
        fns["summary"](group)
    return time.perf_counter() - started


def _compare(
    session: hs.Session, path: Path, fns: dict[str, Any], variant: str, runs: int
) -> dict[str, Any]:
    """One variant in Spark and in the engine, same data, same run; its figures."""
    spark = session.spark
    scalar = fns[variant]

    def frame() -> Any:
        return pipeline(spark, path, scalar, fns["summary"])

    def run_spark() -> list[tuple[Any, ...]]:
        return [tuple(r) for r in frame().collect()]

    cpu: list[float] = []

    def run_engine() -> list[tuple[Any, ...]]:
        stream = session.from_dataframe(frame(), name=f"udfs-{variant}")
        fell_back = stream.explain_data()["spark_subtrees"]
        if fell_back:
            raise AssertionError(f"ran in Spark: {fell_back}")
        result = stream.collect()
        cpu.append(sum(t.cpu_seconds for t in result.tasks))
        return [tuple(r.values()) for r in result.table.to_pylist()]

    timings: dict[str, list[float]] = {"spark": [], "engine": []}
    answers: dict[str, Any] = {}
    for system, run in (("spark", run_spark), ("engine", run_engine)):
        answers[system] = run()  # warm-up (Spark's Python workers, the executors)
        for _ in range(runs):
            started = time.perf_counter()
            answers[system] = run()
            timings[system].append(time.perf_counter() - started)
    equal = answers["spark"] == answers["engine"]
    own = user_seconds(path, fns, variant)
    spark_s, engine_s = (statistics.median(timings[s]) for s in ("spark", "engine"))
    engine_cpu = statistics.median(cpu[1:] or cpu)
    print(
        f"{variant:>6}: Spark {spark_s:7.2f} s  engine {engine_s:7.2f} s  "
        f"engine/Spark {engine_s / spark_s:5.2f}x  answers equal: {equal}  "
        f"user functions {own:.2f} s of the tasks' {engine_cpu:.2f} s CPU "
        f"({own / engine_cpu:.0%})"
    )
    return {
        "spark_seconds": timings["spark"],
        "engine_seconds": timings["engine"],
        "engine_task_cpu_seconds": engine_cpu,
        "user_function_seconds": own,
        "ratio": engine_s / spark_s,
        "user_share_of_engine_cpu": own / engine_cpu if engine_cpu else None,
        "equal": equal,
        "answer": answers["engine"],
    }


def measure(
    rows: int, groups: int, runs: int, variants: tuple[str, ...], data: Path
) -> dict[str, Any]:
    """Each variant in one session: its figures, and the targets."""
    path = dataset(rows, groups, data)
    fns = functions()
    results: dict[str, Any] = {"rows": rows, "groups": groups, "variants": {}}
    with hs.Session(CONFIG) as session:
        session.spark.conf.set("spark.sql.execution.arrow.pyspark.enabled", "true")
        for variant in variants:
            results["variants"][variant] = _compare(session, path, fns, variant, runs)
    results["targets"] = [
        target(f"{v}: from_dataframe / PySpark (Arrow on) <= 0.5x", e["ratio"], 0.5)
        for v, e in results["variants"].items()
    ]
    return results
