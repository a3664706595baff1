"""Issue 34: where TPC-H queries' time goes, as ``JobResult.profile()`` shows it.

    RAY_ADDRESS=local .venv/bin/python -m benchmarks.query_profiles --queries 1,6,18,2 --scale 1

One ``hs.Session`` (``benchmarks.tpch``'s config: 2 CPUs, parallelism 2), the TPC-H
Parquet of ``--scale`` as temporary views; per query, ``Session.sql`` then ``collect``
twice (the first warms the executors), and the second run's profile is printed:
the phases outside the tasks (Spark's planning, the translation, deployment,
hand-back), then each vertex and edge.  Run from a checkout whose ``JobResult`` has
no ``profile()`` (a commit before issue 34), it prints the vertex and edge
summaries and each task's start and end instead, so a before/after pair can be
taken with the same script.
"""

from __future__ import annotations

import argparse
import sys
import time

from benchmarks import tpch_data
from benchmarks.tpch import sql_session


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.query_profiles")
    parser.add_argument("--queries", default="1,6,18,2", help="TPC-H query numbers")
    parser.add_argument("--scale", type=float, default=1.0)
    args = parser.parse_args(argv)
    numbers = [int(q) for q in args.queries.split(",")]
    folder = tpch_data.ensure(args.scale, tables=tpch_data.ALL_TABLES)
    con = tpch_data.duckdb_connection(2)
    texts = {n: tpch_data.query(con, n) for n in numbers}
    with sql_session(folder) as session:
        for n in numbers:
            for _ in range(2):  # the second run is the one shown
                started = time.perf_counter()
                stream = session.sql(texts[n], name=f"tpch-q{n}")
                planned = time.perf_counter()
                result = stream.collect()
                done = time.perf_counter()
            print(f"## TPC-H Q{n} (SF{args.scale:g}): Session.sql {planned - started:.3f} s, "
                  f"collect {done - planned:.3f} s")  # fmt: skip
            print(_shown(result))
            print()
    return 0


def _shown(result: object) -> str:
    """The profile's text, or (before issue 34) the summaries and the tasks' spans."""
    if hasattr(result, "profile"):
        return str(result.profile())
    tasks = sorted(result.tasks, key=lambda t: t.started_at)  # type: ignore[attr-defined]
    first = tasks[0].started_at if tasks else 0.0
    lines = [result.vertex_summary(), result.edge_summary()]  # type: ignore[attr-defined]
    lines += [f"  task {t.name:<34} {t.started_at - first:6.3f} .. {t.finished_at - first:6.3f} s"
              f"  CPU {t.cpu_seconds:.3f} s" for t in tasks]  # fmt: skip
    lines.append(f"  wall {result.wall_seconds:.3f} s")  # type: ignore[attr-defined]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
