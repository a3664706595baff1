"""Issue 25: the Spark hand-over on Spark 4 (``spark.backend: local``, ``.venv-spark4``)
against RayDP on Spark 3.5 (``.venv``): Spark -> engine through the driver and through
the executors, and engine -> Spark, one child process per Spark; the row counts
checked after every round; see ``benchmarks/spark_handover.py``."""

from __future__ import annotations

from types import SimpleNamespace

from benchmarks import spark_handover
from benchmarks.harness import Measurement
from benchmarks.suite import Context, Outcome, Suite


def run(ctx: Context) -> Outcome:
    backends = [b for b in spark_handover.BACKENDS if b in ctx.systems]
    args = SimpleNamespace(rows=int(ctx.scale * 1e6), partitions=4, warmup=1, rounds=ctx.runs,
                           backends=backends, timeout=1800.0)  # fmt: skip
    summary = spark_handover.run_parent(args)
    cases = [
        Measurement(spark_handover.LABELS[p], f"engine, spark {b} ({c['pyspark']})", args.rows,
                    "spark.range", seconds=c["paths"][p]["runs"], checked=True)
        for b, c in summary["children"].items()
        for p in spark_handover.PATHS
    ]  # fmt: skip
    notes = spark_handover.report(summary) if len(backends) == 2 else []
    return Outcome(cases, summary, notes)


SUITE = Suite(
    name="spark-handover",
    description="Spark <-> engine hand-over: Spark 4 local backend vs RayDP on Spark 3.5",
    issue="issue 25",
    scale_unit="million rows",
    default_scale=10,
    tiny_scale=0.02,
    systems=("raydp", "local"),
    oracle="the DataFrame's row count, every round",
    run=run,
)
