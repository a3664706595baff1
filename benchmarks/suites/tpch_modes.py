"""Issue 36: the 22 TPC-H queries through ``Session.sql`` with hybrid exchange modes
against blocking ones, in one session, interleaved round by round; every run checked
against Spark's answer; see ``benchmarks/tpch_modes.py``."""

from __future__ import annotations

from types import SimpleNamespace

from benchmarks import tpch_data, tpch_modes
from benchmarks.harness import Measurement, target
from benchmarks.suite import Context, Outcome, Suite


def run(ctx: Context) -> Outcome:
    args = SimpleNamespace(scale=ctx.scale, data=str(ctx.data), queries=list(range(1, 23)),
                           repeat=ctx.runs, timeout=600.0)  # fmt: skip
    summary = tpch_modes.measure(args)
    cases = []
    for q, figures in summary["queries"].items():
        for config in tpch_modes.CONFIGS:
            f = figures[config]
            m = Measurement(f"tpch {q}", f"engine {config}", 0, f"TPC-H SF{ctx.scale:g}",
                            seconds=f.get("runs", []), checked=f.get("equal"),
                            error=f.get("error") or f.get("problem"))  # fmt: skip
            cases.append(m)
    notes = tpch_modes.report(summary)  # reads the targets as measure wrote them
    summary["targets"] = [
        target(f"{c}: geomean over blocking", g, tpch_modes.TARGET)
        for c, g in summary["geomean_over_blocking"].items()
    ]
    return Outcome(cases, summary, notes)


SUITE = Suite(
    name="tpch-modes",
    description="the 22 TPC-H queries through Session.sql, hybrid modes vs blocking",
    issue="issue 36",
    scale_unit="TPC-H scale factor",
    default_scale=1,
    tiny_scale=0.01,
    systems=("engine", "spark"),
    oracle="Spark SQL (names, types, rows; in order under ORDER BY)",
    run=run,
    data=lambda scale, root: tpch_data.ensure(scale, root, tpch_data.ALL_TABLES).parent,
)
