"""Workload 4 (issue 10, issue 34): the main job (``examples/main_job.py``) on the
engine path against plain PySpark, in one session from ``configs/main.yaml`` with Spark
on one executor of both cores, at TPC-H-like scale factors (1.0 = 1.65M input rows);
see ``benchmarks/mainjob.py``.  ``--scale`` is the largest scale factor: the run
measures it and the smaller of 0.1, 1 and 5."""

from __future__ import annotations

from benchmarks import mainjob
from benchmarks.suite import Context, Outcome, Suite


def run(ctx: Context) -> Outcome:
    scales = [s for s in (0.1, 1.0, 5.0) if s < ctx.scale] + [ctx.scale]
    config = mainjob.session_config()
    measured, rows = mainjob.run(scales, ctx.runs, config)
    return Outcome(measured, {"config": config, "scales": rows})


SUITE = Suite(
    name="mainjob",
    description="examples/main_job.py on the engine path against plain PySpark",
    issue="issue 10",
    scale_unit="largest TPC-H-like scale factor",
    default_scale=20,
    tiny_scale=0.01,
    systems=("engine", "spark"),
    oracle="none here: tests/spark checks the main job's answer against PySpark's",
    run=run,
)
