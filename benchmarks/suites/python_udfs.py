"""Issue 35: a PySpark job with Python UDFs (a scalar function, then
``groupBy().applyInPandas``), in the engine's tasks (``Session.from_dataframe``)
against Spark's own, as ``@pandas_udf`` and as row-at-a-time ``@udf``; both answers
compared; see ``benchmarks/python_udfs.py``."""

from __future__ import annotations

from pathlib import Path

from benchmarks import python_udfs
from benchmarks.harness import Measurement
from benchmarks.suite import Context, Outcome, Suite

GROUPS = 1000


def run(ctx: Context) -> Outcome:
    rows = int(ctx.scale * 1e6)
    summary = python_udfs.measure(rows, GROUPS, ctx.runs, ("pandas", "rows"), Path(ctx.data))
    cases = []
    for variant, e in summary["variants"].items():
        for system, key in (("engine from_dataframe", "engine_seconds"),
                            ("pyspark (2 cores, Arrow on)", "spark_seconds")):  # fmt: skip
            cases.append(Measurement(f"udfs, {variant}", system, rows, f"{GROUPS} groups",
                                     seconds=e[key], checked=e["equal"]))  # fmt: skip
    return Outcome(cases, summary)


SUITE = Suite(
    name="python-udfs",
    description="Python UDFs (pandas and row-at-a-time) in the engine's tasks vs PySpark's",
    issue="issue 35",
    scale_unit="million rows",
    default_scale=10,
    tiny_scale=0.02,
    systems=("engine", "spark"),
    oracle="PySpark (the same pipeline's rows)",
    run=run,
    runs=2,
    data=lambda scale, root: root,
)
