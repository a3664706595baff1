"""Issue 34, item 3: the fixed cost of a job and of a hop between two stages.

Two figures, each the median of ``--runs`` timed runs after ``--warmup`` untimed ones,
in one session (2 slots' worth of cores, as ``benchmarks.tpch``):

* **trivial query**: ``SELECT count(*) FROM nation`` (TPC-H's 25-row table, from the
  Parquet of ``--scale``), timed from after ``Session.sql`` returned to the end of
  ``collect()``: a job's set-up, its deployment, the tasks and the result's hand-back.
  Target: <= 50 ms.
* **per hop**: a job of a tiny source and ``--hops`` blocking round-robin exchanges,
  against the same job with one: the difference over the extra hops is what one more
  blocking hop (a producer finishing -> its consumer running) costs.  Target: <= 5 ms
  plus the data (here a few rows).

It also prints the trivial query's time split into the job's phases when
``--phases`` is given (the scheduler's and ``Job._run``'s own clocks, taken from the
result's task timestamps).  Run it under the benchmark lock:

    flock /tmp/hs-bench.lock env PYTHONPATH=. RAY_ADDRESS=local \\
        .venv/bin/python -m benchmarks.fixed_cost
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import pyarrow as pa

import hybrid_shuffle as hs
from benchmarks import tpch_data
from benchmarks.tpch import SLOTS, session_config

__all__ = ["main"]


def _median_ms(fn: Callable[[], object], runs: int, warmup: int) -> tuple[float, float, float]:
    """Median, min and max of ``runs`` timed calls of ``fn`` in ms, after ``warmup``."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), min(times), max(times)


def _hop_job(session: hs.Session, hops: int, table: pa.Table) -> Callable[[], object]:
    """A function running a job of ``hops`` blocking round-robin exchanges over ``table``."""

    def run() -> object:
        stream = session.job(f"hops{hops}").from_arrow(table, parallelism=2)
        for i in range(hops):
            stream = stream.rebalance(edge=f"hop{i}", mode="blocking", partitions=2)
        return stream.collect()

    return run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=float, default=1)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--hops", type=int, default=6)
    args = parser.parse_args(argv)
    data = tpch_data.ensure(args.scale, tables=("nation",))
    with hs.Session(session_config(2, "1 GiB"), slots=SLOTS) as session:
        session.spark.read.parquet(str(data / "nation.parquet")).createOrReplaceTempView("nation")
        stream = session.sql("SELECT count(*) FROM nation")
        got = stream.collect().table.column(0)[0].as_py()
        if got != 25:
            raise SystemExit(f"count(*) FROM nation gave {got}, not 25")
        med, lo, hi = _median_ms(stream.collect, args.runs, args.warmup)
        print(
            f"trivial query (count(*) FROM nation, run after Session.sql): "
            f"median {med:.1f} ms (min {lo:.1f}, max {hi:.1f}) over {args.runs} runs"
        )
        table = pa.table({"x": list(range(100))})
        one = _median_ms(_hop_job(session, 1, table), args.runs, args.warmup)[0]
        many = _median_ms(_hop_job(session, args.hops, table), args.runs, args.warmup)[0]
        per_hop = (many - one) / (args.hops - 1)
        print(
            f"hop job: 1 hop {one:.1f} ms, {args.hops} hops {many:.1f} ms: "
            f"{per_hop:.1f} ms per blocking hop"
        )


if __name__ == "__main__":
    main()
