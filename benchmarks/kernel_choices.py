"""Per-batch work that stays on Arrow: each step timed on Arrow and on DuckDB, one process.

    python -m benchmarks.kernel_choices [--rows 262144] [--reps 40]

A task's per-batch operators (filter, select, the map-side combiner's partial
aggregate, the exchange's hash partitioner) see one buffer at a time.  DuckDB
pays a fixed cost per query (register the batch, plan, convert the result),
which a whole-partition aggregate or sort amortizes and a 4 MiB batch does not.
This prints both timings and their ratio for one seeded batch, so
``docs/architecture.md`` ("Kernels") can say which steps DuckDB runs and why.
Not part of the test suite: it measures, it asserts nothing.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hybrid_shuffle.operators.aggregation import Aggregation
from hybrid_shuffle.shuffle.partitioner import hash_partition_ids


def _millis(fn: Callable[[], object], reps: int) -> float:
    fn()  # warm
    started = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - started) / reps * 1000


def _duckdb(con: duckdb.DuckDBPyConnection, batch: pa.Table, query: str) -> pa.Table:
    con.register("input", batch)
    try:
        return con.execute(query).to_arrow_table()
    finally:
        con.unregister("input")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1 << 18, help="rows of the batch")
    parser.add_argument("--reps", type=int, default=40, help="timed repetitions per step")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    batch = pa.table(
        {
            "k": rng.integers(0, 100_000, args.rows),
            "s": pa.array(rng.integers(0, 50, args.rows).astype(str)),
            "v": rng.random(args.rows),
        }
    )
    con = duckdb.connect(config={"threads": 1})
    agg = Aggregation(["k", "s"], {"v": ["sum", "count"]}, "partial")
    steps: list[tuple[str, Callable[[], object], Callable[[], object]]] = [
        (
            "filter",
            lambda: batch.filter((pc.field("v") > 0.5) & (pc.field("k") < 50_000)),
            lambda: _duckdb(con, batch, "SELECT * FROM input WHERE v > 0.5 AND k < 50000"),
        ),
        (
            "select",
            lambda: batch.select(["k", "v"]),
            lambda: _duckdb(con, batch, "SELECT k, v FROM input"),
        ),
        (
            "combiner partial",
            lambda: agg.partial(batch),
            lambda: _duckdb(
                con,
                batch,
                "SELECT k, s, sum(v) AS v_sum, count(v) AS v_count FROM input GROUP BY k, s",
            ),
        ),
        (
            "hash partition ids (8)",
            lambda: hash_partition_ids(batch, ["k"], 8),
            lambda: _duckdb(con, batch, "SELECT hash(k) % 8 AS p FROM input"),
        ),
    ]
    print(f"one batch of {args.rows:,} rows, {args.reps} repetitions, DuckDB on 1 thread")
    print(f"{'step':<24}{'arrow ms':>10}{'duckdb ms':>11}{'duckdb/arrow':>14}")
    for name, arrow, duck in steps:
        a, d = _millis(arrow, args.reps), _millis(duck, args.reps)
        print(f"{name:<24}{a:>10.2f}{d:>11.2f}{d / a:>13.2f}x")


if __name__ == "__main__":
    main()
