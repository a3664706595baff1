"""Issue 34: the executors' CPU per TPC-H query, for a before/after pair of commits.

    RAY_ADDRESS=local .venv/bin/python -m benchmarks.task_cpu --queries 2,10,16 --runs 3

Wall time on a shared 2-core machine moves by 20-40% from one run to the next; the CPU
the tasks spent moves far less, and it is what a kernel change changes.  One
``hs.Session`` (``benchmarks.tpch``'s config), the TPC-H Parquet of ``--scale`` as
temporary views; per query ``Session.sql`` once, then ``collect`` ``--runs`` times,
and the least of the runs' CPU (each task's ``process_cpu_seconds``: its executor
process over the task, DuckDB's and the readers' threads included) and of their
wall time is printed, with the geomean of each.  Run it on both commits (``git
stash`` or a worktree) in the same hour; the answers are checked elsewhere
(``benchmarks.tpch_sql``).
"""

from __future__ import annotations

import argparse
import math
import sys
import time

from benchmarks import tpch_data
from benchmarks.tpch import sql_session


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.task_cpu")
    parser.add_argument("--queries", default="all", help="TPC-H query numbers, or all")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=3, help="collects per query; least counts")
    args = parser.parse_args(argv)
    numbers = range(1, 23) if args.queries == "all" else [int(q) for q in args.queries.split(",")]
    folder = tpch_data.ensure(args.scale, tables=tpch_data.ALL_TABLES)
    con = tpch_data.duckdb_connection(2)
    cpu_logs: list[float] = []
    wall_logs: list[float] = []
    with sql_session(folder) as session:
        print(f"TPC-H SF{args.scale:g}: least of {args.runs} collects per query")
        print(f"  {'query':<6} {'tasks CPU s':>12} {'wall s':>8}")
        for n in numbers:
            stream = session.sql(tpch_data.query(con, n), name=f"tpch-q{n}")
            cpu = wall = math.inf
            for _ in range(args.runs):
                started = time.perf_counter()
                result = stream.collect()
                wall = min(wall, time.perf_counter() - started)
                cpu = min(cpu, sum(t.process_cpu_seconds for t in result.tasks))
            cpu_logs.append(math.log(cpu))
            wall_logs.append(math.log(wall))
            print(f"  Q{n:<5} {cpu:12.3f} {wall:8.3f}", flush=True)
    geo_cpu = math.exp(sum(cpu_logs) / len(cpu_logs))
    geo_wall = math.exp(sum(wall_logs) / len(wall_logs))
    print(f"  {'geomean':<6} {geo_cpu:12.3f} {geo_wall:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
