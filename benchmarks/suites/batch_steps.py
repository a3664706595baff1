"""Per-batch work that stays on Arrow: each step of a task's per-batch operators
(filter, select, the map-side combiner's partial aggregate, the exchange's hash
partitioner) timed on pyarrow and on DuckDB (one thread), one process, one seeded
batch.  DuckDB pays a fixed cost per query (register the batch, plan, convert the
result), which a whole-partition aggregate or sort amortizes and a 4 MiB batch does
not; ``docs/architecture.md`` ("Kernels") says which steps DuckDB runs and why.
Checked: each DuckDB answer's row count against pyarrow's (the partitioner: one id
per row)."""

from __future__ import annotations

from collections.abc import Callable

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from benchmarks.harness import Measurement, measure
from benchmarks.suite import Context, Outcome, Suite, mark_checked
from hybrid_shuffle.operators.aggregation import Aggregation
from hybrid_shuffle.shuffle.partitioner import hash_partition_ids


def run(ctx: Context) -> Outcome:
    rows = int(ctx.scale * 1e6)
    rng = np.random.default_rng(0)
    batch = pa.table({"k": rng.integers(0, 100_000, rows),
                      "s": pa.array(rng.integers(0, 50, rows).astype(str)),
                      "v": rng.random(rows)})  # fmt: skip
    con = duckdb.connect(config={"threads": 1})
    con.register("input", batch)
    agg = Aggregation(["k", "s"], {"v": ["sum", "count"]}, "partial")
    steps: list[tuple[str, Callable[[], object], str]] = [
        ("filter", lambda: batch.filter((pc.field("v") > 0.5) & (pc.field("k") < 50_000)),
         "SELECT * FROM input WHERE v > 0.5 AND k < 50000"),
        ("select", lambda: batch.select(["k", "v"]), "SELECT k, v FROM input"),
        ("combiner partial", lambda: agg.partial(batch),
         "SELECT k, s, sum(v) AS v_sum, count(v) AS v_count FROM input GROUP BY k, s"),
        ("hash partition ids (8)", lambda: pa.table({"p": hash_partition_ids(batch, ["k"], 8)}),
         "SELECT hash(k) % 8 AS p FROM input"),
    ]  # fmt: skip
    cases = []
    for step, arrow, query in steps:
        want = len(arrow())  # type: ignore[arg-type]

        def duck(query: str = query, want: int = want) -> None:
            got = con.execute(query).to_arrow_table().num_rows
            if got != want:
                raise AssertionError(f"{got} rows, pyarrow has {want}")

        cases.append(measure(Measurement(step, "engine step (pyarrow)", rows, "one batch"),
                             arrow, ctx.runs))  # fmt: skip
        cases.append(measure(Measurement(step, "duckdb (1 thread)", rows, "one batch"),
                             duck, ctx.runs))  # fmt: skip
    mark_checked(cases, lambda m: m.system.startswith("duckdb"))
    return Outcome(cases, {"rows": rows})


SUITE = Suite(
    name="batch-steps",
    description="per-batch steps (filter, select, combiner, partitioner): pyarrow vs DuckDB",
    issue="issue 23",
    scale_unit="million rows (one batch)",
    default_scale=0.262144,
    tiny_scale=0.01,
    systems=("engine", "duckdb"),
    oracle="pyarrow (each answer's row count)",
    run=run,
    runs=40,
)
