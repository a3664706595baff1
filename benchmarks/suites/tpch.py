"""Issue 23: TPC-H Q1, Q3 and Q6 built with the engine's operators (``from_parquet``,
its operators and ``sql``) against DuckDB with 2 threads and Spark SQL on one executor
of both cores; tpchgen-cli Parquet made once into ``benchmarks/.data/``; see
``benchmarks/tpch.py``."""

from __future__ import annotations

from pathlib import Path

from benchmarks import tpch, tpch_data
from benchmarks.suite import Context, Outcome, Suite, mark_checked, object_store


def run(ctx: Context) -> Outcome:
    measured, summary = tpch.run(
        ctx.scale,
        ctx.runs,
        object_store=object_store(ctx.scale),
        peers=[p for p in tpch.PEERS if p in ctx.systems],
        data=Path(ctx.data),
    )
    mark_checked(measured, lambda m: m.system != tpch.DUCKDB)
    return Outcome(measured, summary)


SUITE = Suite(
    name="tpch",
    description="TPC-H Q1, Q3, Q6 on the engine's operators vs DuckDB and Spark SQL",
    issue="issue 23",
    scale_unit="TPC-H scale factor",
    default_scale=1,
    tiny_scale=0.01,
    systems=("engine", "duckdb", "spark"),
    oracle="DuckDB (2 threads)",
    run=run,
    data=lambda scale, root: tpch_data.ensure(scale, root).parent,
)
