"""Issue 36: a global ``ORDER BY`` through ``Session.sql``, sorted in parallel over a
range edge against the single task it ran in before, and against Spark's own (one
executor of both cores); every answer's ``id`` order against Spark's; see
``benchmarks/order_by.py``."""

from __future__ import annotations

from pathlib import Path

from benchmarks import order_by
from benchmarks.harness import Measurement
from benchmarks.suite import Context, Outcome, Suite

NAMES = {"spark": "spark sql (2 cores)", "parallel": "engine parallel", "single": "engine single"}


def run(ctx: Context) -> Outcome:
    rows = int(ctx.scale * 1e6)
    summary = order_by.measure(rows, ctx.runs, Path(ctx.data))
    equal = summary["equal_to_spark"]
    cases = [
        Measurement(
            "ORDER BY",
            NAMES[system],
            rows,
            "8 Parquet files",
            seconds=seconds,
            checked=equal.get(system),
            note=_note(summary, system),
        )
        for system, seconds in summary["seconds"].items()
    ]
    notes = [f"\nengine, {s}, last run:\n{summary['profiles'][s]}" for s in ("parallel", "single")]
    return Outcome(cases, summary, notes)


def _note(summary: dict[str, object], system: str) -> str:
    subtasks = summary["sorting_subtasks"]
    assert isinstance(subtasks, dict)
    return f"{subtasks[system]} sorting subtasks" if system in subtasks else ""


SUITE = Suite(
    name="order-by",
    description="a global ORDER BY: parallel range edge vs one sorting task vs Spark",
    issue="issue 36",
    scale_unit="million rows",
    default_scale=10,
    tiny_scale=0.02,
    systems=("engine", "spark"),
    oracle="Spark SQL (the id column in order)",
    run=run,
    data=lambda scale, root: root,
)
