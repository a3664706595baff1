"""Issue 11: an aggregation with one executor killed mid-job and without, per mode and
shuffle service, in its own Ray; then the happy path paired against the engine before
issue 11 (a git worktree of ``failover.BASELINE``, run side by side; ``--systems
engine`` leaves it out).  Every run, killed or not, is checked against pyarrow (a
mismatch fails the run); see ``benchmarks/failover.py``."""

from __future__ import annotations

from benchmarks import failover
from benchmarks.suite import Context, Outcome, Suite, mark_checked


def run(ctx: Context) -> Outcome:
    measured, summary = failover.run(
        int(ctx.scale * 1e6),
        ctx.runs,
        object_store=3 << 30 if ctx.scale >= 1 else 300 << 20,
        baseline=failover.BASELINE if "baseline" in ctx.systems else None,
    )
    mark_checked(measured, lambda m: True)
    return Outcome(measured, summary)


SUITE = Suite(
    name="failover",
    description="an aggregation with an executor killed mid-job, per mode and service",
    issue="issue 11",
    scale_unit="million rows",
    default_scale=10,
    tiny_scale=0.2,
    systems=("engine", "baseline"),
    oracle="pyarrow (the aggregate, after every restart)",
    run=run,
)
