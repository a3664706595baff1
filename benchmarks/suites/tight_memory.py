"""Issues 23 and 37: an aggregate of as many keys as half its rows at 64 MiB of operator
memory a task: its answer against pyarrow's, its task's peak memory against its
memory; see ``benchmarks/tight_memory.py``."""

from __future__ import annotations

from benchmarks import tight_memory
from benchmarks.suite import Context, Outcome, Suite, mark_checked, object_store


def run(ctx: Context) -> Outcome:
    store = object_store(ctx.scale)
    measured, summary = tight_memory.run(int(ctx.scale * 1e6), ctx.runs, store)
    mark_checked(measured, lambda m: True)
    return Outcome(measured, summary)


SUITE = Suite(
    name="tight-memory",
    description="an aggregate at 64 MiB (the smallest budget honoured) a task, its peak",
    issue="issues 23, 37",
    scale_unit="million rows",
    default_scale=40,
    tiny_scale=0.2,
    systems=("engine",),
    oracle="pyarrow (sum, count, mean per key)",
    run=run,
)
