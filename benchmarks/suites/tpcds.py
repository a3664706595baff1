"""Issue 33 (and 34): the 99 TPC-DS queries on Spark SQL and ``Session.sql``: whether
the engine's answer is Spark's, whether it ran fully in the engine (or which subtrees
fell back, and why), and its time; with ``duckdb`` among the systems, DuckDB with 2
threads timed on the same files; see ``benchmarks/tpcds_sql.py``."""

from __future__ import annotations

from pathlib import Path

from benchmarks import tpcds_data, tpcds_sql
from benchmarks.harness import Measurement, target
from benchmarks.suite import Context, Outcome, Suite

TIMEOUT = 300.0


def run(ctx: Context) -> Outcome:
    summary = tpcds_sql.measure(ctx.scale, list(range(1, 100)), TIMEOUT,
                                "duckdb" in ctx.systems, Path(ctx.data), ctx.runs)  # fmt: skip
    dist = f"TPC-DS SF{ctx.scale:g}"
    cases = []
    for r in summary["records"]:
        q, rows, equal = r["query"], r.get("rows", 0), r["status"] == "equal"
        engine = Measurement(q, "engine (sql + collect)", rows, dist, checked=equal,
                             note="" if r.get("in_engine") else "fell back to Spark")  # fmt: skip
        if r.get("run_seconds") is not None:
            engine.seconds = [r["plan_seconds"] + r["run_seconds"]]
        if not equal:
            engine.error = f"{r['status']}: {r.get('error') or r.get('problem') or r.get('why')}"
        cases.append(engine)
        for system, key in (("spark", "spark_seconds"), ("duckdb", "duckdb_seconds")):
            if system in ctx.systems and r.get(key) is not None:
                cases.append(Measurement(q, f"{system} (2 cores)", rows, dist, seconds=[r[key]]))
    summary["targets"] = [
        target("queries Spark answers not fully in the engine, % (<= 5)",
               100.0 - summary["in_engine_pct"], 100.0 - tpcds_sql.IN_ENGINE_TARGET, "%"),
        target("engine run / DuckDB, geomean", summary["duckdb_geomean"],
               tpcds_sql.DUCKDB_TARGET),
    ]  # fmt: skip
    return Outcome(cases, summary, tpcds_sql.report_lines(summary)[:8])


SUITE = Suite(
    name="tpcds",
    description="the 99 TPC-DS queries on Spark SQL and Session.sql (and DuckDB)",
    issue="issue 33",
    scale_unit="TPC-DS scale factor",
    default_scale=1,
    tiny_scale=0.01,
    systems=("engine", "spark", "duckdb"),
    oracle="Spark SQL (names, Spark types, rows; in order under ORDER BY)",
    run=run,
    runs=1,
    data=lambda scale, root: tpcds_data.ensure(scale, root).parent,
)
