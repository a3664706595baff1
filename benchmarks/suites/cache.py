"""Issue 13: five queries (filter, top-k, join with a dimension, regroup, sort) over one
prepared aggregation, with and without the engine's cache (``stream.cache()``,
``job.from_cache``), against Spark's ``df.cache()`` and Ray Data's ``materialize()``;
see ``benchmarks/cache.py``."""

from __future__ import annotations

from benchmarks import cache
from benchmarks.suite import Context, Outcome, Suite, mark_checked, object_store


def run(ctx: Context) -> Outcome:
    measured, summary = cache.run(
        int(ctx.scale * 1e6),
        ctx.runs,
        object_store=object_store(ctx.scale),
        peers=[p for p in cache.PEERS if p in ctx.systems],
    )
    mark_checked(measured, lambda m: m.system.startswith("engine"))
    return Outcome(measured, summary)


SUITE = Suite(
    name="cache",
    description="five queries over a cached aggregation vs Spark df.cache(), Ray Data",
    issue="issue 13",
    scale_unit="million fact rows",
    default_scale=10,
    tiny_scale=0.1,
    systems=("engine", "spark", "ray-data"),
    oracle="pyarrow (each query's answer)",
    run=run,
)
