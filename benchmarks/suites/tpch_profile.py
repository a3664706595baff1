"""Issue 34: where TPC-H queries' time goes.  One session (``benchmarks.tpch``'s config:
2 CPUs, parallelism 2), the TPC-H Parquet as temporary views; per query
``Session.sql`` once, then ``collect`` a warm-up and ``--runs`` times.  Per query: the
wall times, the least of the runs' CPU (each task's ``process_cpu_seconds``: its
executor process over the task, DuckDB's and the readers' threads included; wall time
on a shared 2-core machine moves by 20-40% from run to run, the tasks' CPU far less),
and the last run's ``JobResult.profile()`` (the phases outside the tasks, then each
vertex and edge).  Run it on both commits of a before/after pair, then ``compare``.
The answers are checked by ``tpch-sql``; here only their row count, against DuckDB's."""

from __future__ import annotations

import math

from benchmarks import tpch_data
from benchmarks.harness import Measurement, measure
from benchmarks.suite import Context, Outcome, Suite, mark_checked
from benchmarks.tpch import sql_session

QUERIES = tuple(range(1, 23))


def run(ctx: Context) -> Outcome:
    con = tpch_data.duckdb_connection(2)
    tpch_data_views(con, ctx.data)
    texts = {n: tpch_data.query(con, n) for n in QUERIES}
    want = {n: con.execute(texts[n]).to_arrow_table().num_rows for n in QUERIES}
    cases, cpu, notes = [], {}, []
    with sql_session(ctx.data) as session:
        for n in QUERIES:
            stream = session.sql(texts[n], name=f"tpch-q{n}")
            results = []

            def once(stream=stream, results=results, n=n) -> None:  # type: ignore[no-untyped-def]
                result = stream.collect()
                if result.table.num_rows != want[n]:
                    raise AssertionError(f"{result.table.num_rows} rows, DuckDB has {want[n]}")
                results.append(result)

            m = measure(Measurement(f"tpch q{n}", "engine", want[n], "TPC-H"), once, ctx.runs)
            cases.append(m)
            if results:
                cpu[f"q{n}"] = min(sum(t.process_cpu_seconds for t in r.tasks) for r in results)
                notes += [f"\n## TPC-H Q{n}", str(results[-1].profile())]
    mark_checked(cases, lambda m: True)
    logs = [math.log(v) for v in cpu.values() if v > 0]
    summary = {"task_cpu_seconds": cpu,
               "task_cpu_geomean": math.exp(sum(logs) / len(logs)) if logs else None}  # fmt: skip
    return Outcome(cases, summary, notes)


def tpch_data_views(con, folder) -> None:  # type: ignore[no-untyped-def]
    for table in tpch_data.ALL_TABLES:
        con.execute(f"CREATE OR REPLACE VIEW {table} AS "
                    f"SELECT * FROM read_parquet('{folder / (table + '.parquet')}')")  # fmt: skip


SUITE = Suite(
    name="tpch-profile",
    description="the 22 TPC-H queries' task CPU and JobResult.profile(), for before/after",
    issue="issue 34",
    scale_unit="TPC-H scale factor",
    default_scale=1,
    tiny_scale=0.01,
    systems=("engine",),
    oracle="DuckDB (the row count; tpch-sql checks the rows)",
    run=run,
    data=lambda scale, root: tpch_data.ensure(scale, root, tpch_data.ALL_TABLES),
)
