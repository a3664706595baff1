"""Issue 24 (and 25, 34): the 22 TPC-H queries as SQL text on Spark SQL (one executor
of both cores), DuckDB (2 threads) and ``Session.sql``; Spark's answer is the
reference every DuckDB and engine run is checked against; see
``benchmarks/tpch_sql.py``."""

from __future__ import annotations

from pathlib import Path

from benchmarks import tpch_data, tpch_sql
from benchmarks.harness import Measurement
from benchmarks.suite import Context, Outcome, Suite

SYSTEMS = {"engine": "engine (sql + collect)", "duckdb": "duckdb (2 threads)",
           "spark": "spark sql (2 cores)"}  # fmt: skip


def run(ctx: Context) -> Outcome:
    queries = list(tpch_sql.QUERIES)
    summary = tpch_sql.run(ctx.scale, queries, ctx.runs, ctx.systems, data=Path(ctx.data))
    cases = []
    for q, f in summary["queries"].items():
        for system in ctx.systems:
            if system == "engine":
                plans, runs = f["engine_plan_runs"] or [], f["engine_run_runs"] or []
                runs = [a + b for a, b in zip(plans, runs, strict=False)]
                checked, error = f["engine_equal"], f["engine_problem"]
            else:
                runs = f[f"{system}_runs"] or []
                checked = f["duckdb_equal"] if system == "duckdb" else None
                error = f[f"{system}_problem" if system == "duckdb" else "spark_error"]
            cases.append(Measurement(f"tpch {q}", SYSTEMS[system], f["rows"] or 0,
                                     f"TPC-H SF{ctx.scale:g}", seconds=runs, checked=checked,
                                     error=error if not checked else None))  # fmt: skip
    return Outcome(cases, summary)


SUITE = Suite(
    name="tpch-sql",
    description="the 22 TPC-H queries as SQL on Spark SQL, DuckDB and Session.sql",
    issue="issue 34",
    scale_unit="TPC-H scale factor",
    default_scale=1,
    tiny_scale=0.01,
    systems=("engine", "duckdb", "spark"),
    oracle="Spark SQL (names, types, rows; in order under ORDER BY)",
    run=run,
    runs=1,
    data=lambda scale, root: tpch_data.ensure(scale, root, tpch_data.ALL_TABLES).parent,
)
