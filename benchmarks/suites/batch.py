"""Issue 12: the batch operators within a memory budget: a global sort, hash and
sort-merge joins and co_group, the engine with ample operator memory and with a quarter
of a task's input, against Spark (one executor of both cores, AQE off) and Ray Data,
and co_group against the same figures computed record at a time; see
``benchmarks/batch_operators.py``.  ``--scale``: millions of rows of the largest sort
(the smaller sorts at 1/5 and 1/20 of it) and a quarter of it per join side."""

from __future__ import annotations

from benchmarks import batch_operators
from benchmarks.suite import Context, Outcome, Suite, mark_checked, object_store


def run(ctx: Context) -> Outcome:
    rows = int(ctx.scale * 1e6)
    measured, summary = batch_operators.run(
        sorted({max(rows // 20, 1000), max(rows // 4, 1000), rows}),
        max(rows // 4, 1000),
        max(rows // 40, 1000),
        ctx.runs,
        object_store=object_store(ctx.scale),
        peers=[p for p in batch_operators.PEERS if p in ctx.systems],
    )
    mark_checked(measured, lambda m: m.system.startswith("engine"))
    return Outcome(measured, summary)


SUITE = Suite(
    name="batch",
    description="global sort, joins and co_group within a memory budget, vs Spark, Ray Data",
    issue="issue 12",
    scale_unit="million rows (largest sort)",
    default_scale=40,
    tiny_scale=0.4,
    systems=("engine", "spark", "ray-data"),
    oracle="pyarrow (sorted keys, join counts and sums, co_group figures)",
    run=run,
)
