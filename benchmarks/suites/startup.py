"""Issue 26: start-up, each start a fresh interpreter: ``hs.Session()`` against a bare
``ray.init`` in pairs, Spark's start phase by phase on each backend, and a warm
``./dev main`` from outside; see ``benchmarks/startup.py``.  Start-ups have no answer
to check."""

from __future__ import annotations

from benchmarks import startup
from benchmarks.harness import Measurement
from benchmarks.suite import Context, Outcome, Suite


def run(ctx: Context) -> Outcome:
    summary = startup.measure(ctx.runs, ctx.runs if "spark" in ctx.systems else 0,
                              ctx.runs if "dev-main" in ctx.systems else 0)  # fmt: skip
    pairs = summary["ray_against_session"]["pairs"]
    cases = [
        Measurement("start", "engine hs.Session()", 0, "fresh process",
                    seconds=[p["session"]["start"] for p in pairs]),
        Measurement("start", "bare ray.init", 0, "fresh process",
                    seconds=[p["ray"]["start"] for p in pairs]),
    ]  # fmt: skip
    for backend, b in summary.get("spark_phases", {}).items():
        cases.append(Measurement("start", f"session.spark ({backend})", 0, "fresh process",
                                 seconds=[r["spark_seconds"] for r in b["runs"]]))  # fmt: skip
    if summary.get("dev_main"):
        cases.append(Measurement("./dev main", "engine", 0, "warm",
                                 seconds=summary["dev_main"]["walls"]))  # fmt: skip
    return Outcome(cases, summary, startup.report(summary))


SUITE = Suite(
    name="startup",
    description="hs.Session() vs ray.init, Spark's start by phase, a warm ./dev main",
    issue="issue 26",
    scale_unit="not scaled",
    default_scale=1,
    tiny_scale=1,
    systems=("engine", "ray", "spark", "dev-main"),
    default_systems=("engine", "ray", "spark"),
    oracle="none (start-up times have no answer)",
    run=run,
    runs=5,
)
