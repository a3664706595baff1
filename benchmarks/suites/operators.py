"""Issue 23 (the kernels workload, issue 37 since every operator runs on DuckDB): a
group-by, the same group-by over wide keys, a sort and two joins, the engine against
its peers in one process: DuckDB with 2 threads over the same Arrow table, and pyarrow.

**Data** (seeded, ``benchmarks.data.make_table``): rows of ``k`` int64 uniform over
100,000 keys and ``v`` float64, dealt as 8 blocks; the wide keys are ``k * 1,000,003``
(the same groups spread over 10^11); the joins' right sides are
``benchmarks.batch_operators``' 100,000-row dimension and a fact table of as many rows
with unique keys.  **Engine**: one session (10 slots, parallelism 8, 1 GiB of operator
memory a task, so nothing spills).  **Checked**: the engine's every run and DuckDB's
answers against pyarrow (the group-by key for key, the sort and the joins by
``batch_operators``' summaries); a mismatch is the case's error.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import hybrid_shuffle as hs
from benchmarks import batch_operators as bo
from benchmarks.data import blocks, make_table
from benchmarks.harness import Measurement, measure
from benchmarks.suite import Context, Outcome, Suite, mark_checked, object_store

PARALLELISM = bo.PARALLELISM
MEMORY = 1 << 30
SPEC = {"v": ["sum", "count", "mean"]}
WIDE = 1_000_003
DUCKDB_THREADS = 2
Check = Callable[[pa.Table, bo.Expected], str | None]


def expected_group_by(table: pa.Table) -> bo.Expected:
    want = table.group_by("k").aggregate([("v", "sum"), ("v", "count"), ("v", "mean")])
    return bo.Expected(want.num_rows, 0, 0.0, table=want.sort_by("k"))


def check_group_by(out: pa.Table, want: bo.Expected) -> str | None:
    """Key for key against pyarrow: keys and counts exactly, sums and means to 1e-9."""
    assert want.table is not None
    expected, got = want.table, out.sort_by("k")
    if got.num_rows != expected.num_rows:
        return f"{got.num_rows} keys, pyarrow has {expected.num_rows}"
    if not got.column("k").equals(expected.column("k")):
        return "the keys differ from pyarrow's"
    if not got.column("v_count").cast(pa.int64()).equals(expected.column("v_count")):
        return "v_count differs from pyarrow's"
    for name in ("v_sum", "v_mean"):
        a, b = got.column(name).to_numpy(), expected.column(name).to_numpy()
        if not np.allclose(a, b, rtol=1e-9, atol=0):
            return f"{name} differs from pyarrow's by up to {np.max(np.abs(a - b)):.3g}"
    return None


def _group_by_job(session: hs.Session, data: list[pa.Table]) -> Callable[[], Any]:
    def build() -> Any:
        source = session.job("group-by").from_arrow(data, name="source", parallelism=len(data))
        return source.key_by("k", edge="by_k").aggregate(SPEC, name="aggregate")

    return build


_GROUP_BY_SQL = ("SELECT k, sum(v) AS v_sum, count(v) AS v_count, avg(v) AS v_mean "
                 "FROM l GROUP BY k")  # fmt: skip
_JOIN_SQL = "SELECT l.k, l.v, r.w FROM l JOIN r ON l.k = r.k"


def _cases(rows: int) -> list[tuple[str, Any, Check, bo.Expected, Any, Any]]:
    """(case, engine job on a session, check, pyarrow's answer, DuckDB's run, pyarrow's
    run) per case; each DuckDB and pyarrow run returns what the check reads."""
    table = make_table(rows, "uniform")
    wide = table.set_column(0, "k", pc.multiply(table.column("k"), WIDE))
    dim, fact = bo.dimension(), bo.fact_unique(rows)
    data, wide_blocks = blocks(table, PARALLELISM), blocks(wide, PARALLELISM)
    con = duckdb.connect(config={"threads": DUCKDB_THREADS})

    def sql(text: str, left: pa.Table, right: pa.Table | None = None) -> pa.Table:
        con.register("l", left)
        if right is not None:
            con.register("r", right)
        return con.execute(text).to_arrow_table()

    def arrow_group_by(t: pa.Table) -> pa.Table:
        out = t.group_by("k").aggregate([("v", "sum"), ("v", "count"), ("v", "mean")])
        return out

    out = []
    for name, t, b in (("group-by", table, data), ("group-by, wide keys", wide, wide_blocks)):
        out.append((name, lambda s, b=b: _group_by_job(s, b), check_group_by,
                    expected_group_by(t), lambda t=t: sql(_GROUP_BY_SQL, t),
                    lambda t=t: arrow_group_by(t)))  # fmt: skip
    out.append(("sort", lambda s: bo.sort_job(s, data), bo.check_sort, bo.expected_sort(table),
                lambda: bo.sort_summary(sql("SELECT * FROM l ORDER BY k", table)),
                lambda: bo.sort_summary(table.sort_by("k"))))  # fmt: skip
    for name, right in (("join, 100k-row dimension", dim), ("join, fact table", fact)):
        rb = blocks(right, PARALLELISM)
        out.append((name, lambda s, rb=rb: bo.join_job(s, data, rb, "hash"), bo.check_join,
                    bo.expected_join(table, right),
                    lambda r=right: bo.join_summary(sql(_JOIN_SQL, table, r)),
                    lambda r=right: bo.join_summary(table.join(r, "k", "k", "inner"))))  # fmt: skip
    return out


def _checked(fn: Callable[[], pa.Table], check: Check, want: bo.Expected) -> Callable[[], Any]:
    def run() -> pa.Table:
        got = fn()
        problem = check(got, want)
        if problem is not None:
            raise AssertionError(f"wrong result: {problem}")
        return got

    return run


def run(ctx: Context) -> Outcome:
    rows = int(ctx.scale * 1e6)
    store = object_store(ctx.scale)
    results: list[Measurement] = []
    figures: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hs.ConfigWarning)
        with hs.Session(bo.session_config(MEMORY, store), slots=bo.SLOTS) as session:
            for case, job, check, want, duck, arrow in _cases(rows):
                if "engine" in ctx.systems:
                    m = Measurement(case, "engine", rows, "uniform")
                    m, f = bo.engine_measure(m, job(session), ctx.runs, check, want)
                    results.append(m)
                    figures[case] = {"cpu_seconds": f.stateful_cpu_seconds,
                                     "peak_over_memory": f.peak_over_memory,
                                     "checked_runs": f.checked_runs}  # fmt: skip
                if "duckdb" in ctx.systems:
                    m = Measurement(case, f"duckdb ({DUCKDB_THREADS} threads, 1 process)", rows,
                                    "uniform")  # fmt: skip
                    results.append(measure(m, _checked(duck, check, want), ctx.runs))
                if "pyarrow" in ctx.systems:
                    m = Measurement(case, "pyarrow (1 process)", rows, "uniform")
                    results.append(measure(m, arrow, ctx.runs))
    mark_checked(results, lambda m: not m.system.startswith("pyarrow"))
    return Outcome(results, {"rows": rows, "memory": MEMORY, "engine": figures})


SUITE = Suite(
    name="operators",
    description="group-by, sort and joins: the engine vs DuckDB in one process and pyarrow",
    issue="issue 23",
    scale_unit="million rows",
    default_scale=10,
    tiny_scale=0.1,
    systems=("engine", "duckdb", "pyarrow"),
    oracle="pyarrow (group-by key for key, sort and join summaries)",
    run=run,
)
