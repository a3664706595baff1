"""Issue 34, item 3: the fixed cost of a job and of a hop between two stages, in one
session (2 slots' worth of cores, as ``benchmarks.tpch``), each case the runs after
3 untimed ones:

* **trivial query**: ``SELECT count(*) FROM nation`` (TPC-H's 25-row table), timed
  from after ``Session.sql`` returned to the end of ``collect()``: a job's set-up, its
  deployment, the tasks and the result's hand-back.  Target: <= 50 ms.  Its answer
  must be 25.
* **per hop**: a job of a tiny source and 6 blocking round-robin exchanges, against
  the same job with one: the difference over the extra hops is what one more blocking
  hop costs.  Target: <= 5 ms plus the data (here a few rows); every run returns its
  100 rows.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import pyarrow as pa

import hybrid_shuffle as hs
from benchmarks import tpch_data
from benchmarks.harness import Measurement, measure, target
from benchmarks.suite import Context, Outcome, Suite, mark_checked
from benchmarks.tpch import SLOTS, session_config

HOPS = 6
WARMUP = 3


def _hop_job(session: hs.Session, hops: int, table: pa.Table) -> Callable[[], object]:
    """A job of ``hops`` blocking round-robin exchanges over ``table``, checked."""

    def run() -> object:
        stream = session.job(f"hops{hops}").from_arrow(table, parallelism=2)
        for i in range(hops):
            stream = stream.rebalance(edge=f"hop{i}", mode="blocking", partitions=2)
        result = stream.collect()
        if result.table.num_rows != table.num_rows:
            raise AssertionError(f"{result.table.num_rows} rows came back, not {table.num_rows}")
        return result

    return run


def run(ctx: Context) -> Outcome:
    nation = ctx.data / "nation.parquet"
    with hs.Session(session_config(2, "1 GiB"), slots=SLOTS) as session:
        session.spark.read.parquet(str(nation)).createOrReplaceTempView("nation")
        stream = session.sql("SELECT count(*) FROM nation")

        def trivial() -> None:
            got = stream.collect().table.column(0)[0].as_py()
            if got != 25:
                raise AssertionError(f"count(*) FROM nation gave {got}, not 25")

        table = pa.table({"x": list(range(100))})
        cases = [
            measure(Measurement("trivial query", "engine", 25, "nation"), trivial, ctx.runs,
                    WARMUP),
            measure(Measurement("hop job", "engine, 1 hop", 100, "blocking"),
                    _hop_job(session, 1, table), ctx.runs, WARMUP),
            measure(Measurement("hop job", f"engine, {HOPS} hops", 100, "blocking"),
                    _hop_job(session, HOPS, table), ctx.runs, WARMUP),
        ]  # fmt: skip
    mark_checked(cases, lambda m: True)
    trivial_ms = cases[0].median * 1000 if cases[0].seconds else None
    one, many = (statistics.median(m.seconds) * 1000 if m.seconds else None for m in cases[1:])
    per_hop = (many - one) / (HOPS - 1) if one is not None and many is not None else None
    summary = {
        "trivial_query_ms": trivial_ms,
        "per_hop_ms": per_hop,
        "targets": [
            target("trivial query, ms (<= 50)", trivial_ms, 50.0, "ms"),
            target("one more blocking hop, ms (<= 5)", per_hop, 5.0, "ms"),
        ],
    }
    return Outcome(cases, summary)


SUITE = Suite(
    name="fixed-cost",
    description="the fixed cost of a trivial query and of one more blocking hop",
    issue="issue 34",
    scale_unit="TPC-H scale factor (of nation)",
    default_scale=1,
    tiny_scale=0.01,
    systems=("engine",),
    oracle="the answer's row count (25 nations; 100 rows through the hops)",
    run=run,
    runs=20,
    data=lambda scale, root: tpch_data.ensure(scale, root, ("nation",)),
)
