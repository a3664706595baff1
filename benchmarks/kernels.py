"""Issue 23: the same jobs with ``operators.kernel: duckdb`` and ``arrow``, side by side.

**Data** (seeded, ``benchmarks.data.make_table``): ``--kernel-rows`` (default 10M)
rows of ``k`` int64 uniform over 100,000 keys and ``v`` float64, dealt as
``PARALLELISM`` = 8 blocks; for the joins, the right-hand tables of
``benchmarks.batch_operators``: the 100,000-row dimension and a second fact table of
as many rows with unique keys (``w`` float64).

**Jobs**, each ending so that little comes back to the driver:

* **group-by**: ``key_by("k").aggregate({"v": ["sum", "count", "mean"]})`` (the
  map-side combiner on, as by default), 100,000 rows back.  Its keys span 0..99,999,
  which the arrow kernel groups without hashing (``operators/dense_aggregate.py``,
  ``np.bincount``); so it runs a second time with **wide keys**, ``k * 1,000,003``
  (the same 100,000 groups spread over 10^11, which only a hash table can group);
* **sort**: ``sort("k")`` then the per-batch summary of ``batch_operators``;
* **join, dimension** and **join, fact table**: an inner hash ``join`` on ``k``,
  then the per-batch summary.

**Set-up**: its own embedded Ray (``num_cpus=2``), one session per kernel, both open
side by side (``slots`` = 10 each, ``parallelism: 8``, ``operators.memory`` 1 GiB a
task, so nothing spills and the kernels alone differ); each job runs on both sessions
before the next job (duckdb first, then arrow first for the next, and so on), so drift
on a shared machine falls on both alike.  Each is a warm-up then the median of ``--runs``.

**Checked**: every run, warm-ups included, against pyarrow on the whole tables (the
group-by key for key: keys and counts exactly, sums and means to 1e-9 relative; the
sort and the joins by ``batch_operators``' checks); a mismatch is the measurement's
error.

**Printed**: per job both medians and duckdb / arrow, against issue 23's targets: no
job slower with duckdb, the group-by at most 0.6x arrow.  The JSON also keeps the
stateful vertex's ``cpu_seconds`` per kernel: the task threads' and their streamed
DuckDB queries' threads.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import hybrid_shuffle as hs
from benchmarks import batch_operators as bo
from benchmarks.data import blocks, make_table
from benchmarks.harness import Measurement, print_targets, target

__all__ = ["DEFAULT_ROWS", "KERNELS", "check_group_by", "print_summary", "run", "target"]

DEFAULT_ROWS = 10_000_000
KERNELS = ("duckdb", "arrow")
PARALLELISM = bo.PARALLELISM
SLOTS = bo.SLOTS
MEMORY = 1 << 30
SPEC = {"v": ["sum", "count", "mean"]}
GROUP_BY = "kernel group-by"
GROUP_BY_WIDE = "kernel group-by, wide keys"
#: the wide keys: k times this (the same groups, a range no dense path takes)
WIDE = 1_000_003
SORT = "kernel sort"
JOIN_DIM = "kernel join, 100k-row dimension"
JOIN_FACT = "kernel join, fact table (unique keys)"
#: issue 23's targets on duckdb / arrow
NOT_SLOWER = 1.0
GROUP_BY_TARGET = 0.6


def session_config(
    kernel: str, memory: int = MEMORY, object_store: str = "3 GiB"
) -> dict[str, Any]:
    config = bo.session_config(memory, object_store)
    config["operators"] = {"memory": memory, "kernel": kernel}
    return config


def system(kernel: str) -> str:
    return f"engine {kernel} kernel"


# -- the group-by ------------------------------------------------------------------------


def group_by_job(session: hs.Session, data: list[pa.Table]) -> Callable[[], Any]:
    def build() -> Any:
        job = session.job("kernel-group-by")
        source = job.from_arrow(data, name="source", parallelism=len(data))
        return source.key_by("k", edge="by_k").aggregate(SPEC, name="aggregate")

    return build


def expected_group_by(table: pa.Table) -> bo.Expected:
    want = table.group_by("k").aggregate([("v", "sum"), ("v", "count"), ("v", "mean")])
    want = want.sort_by("k")
    return bo.Expected(want.num_rows, 0, 0.0, table=want)


def check_group_by(out: pa.Table, want: bo.Expected) -> str | None:
    """Key for key against pyarrow: keys and counts exactly, sums and means to 1e-9."""
    assert want.table is not None
    expected = want.table
    got = out.sort_by("k")
    if got.num_rows != expected.num_rows:
        return f"{got.num_rows} keys, pyarrow has {expected.num_rows}"
    if not got.column("k").equals(expected.column("k")):
        return "the keys differ from pyarrow's"
    counts = got.column("v_count").cast(pa.int64())
    if not counts.equals(expected.column("v_count")):
        return "v_count differs from pyarrow's"
    for name in ("v_sum", "v_mean"):
        a, b = got.column(name).to_numpy(), expected.column(name).to_numpy()
        if not np.allclose(a, b, rtol=1e-9, atol=0):
            return f"{name} differs from pyarrow's by up to {np.max(np.abs(a - b)):.3g}"
    return None


# -- the run -----------------------------------------------------------------------------


Check = Callable[[pa.Table, bo.Expected], str | None]


def run(
    rows: int = DEFAULT_ROWS, runs: int = 3, object_store: str = "3 GiB"
) -> tuple[list[Measurement], dict[str, Any]]:
    """Every measurement in one Ray of its own (no other session may be open): the
    measurements and the summary (``payload["kernels"]``)."""
    started = time.time()
    results: list[Measurement] = []
    figures: dict[int, bo.EngineFigures] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hs.ConfigWarning)
        sessions: dict[str, hs.Session] = {}
        try:
            for kernel in KERNELS:
                config = session_config(kernel, MEMORY, object_store)
                sessions[kernel] = hs.Session(config, slots=SLOTS)
            for i, (workload, job, check, want) in enumerate(_jobs(rows)):
                for kernel in KERNELS if i % 2 == 0 else KERNELS[::-1]:
                    session = sessions[kernel]
                    m = Measurement(workload, system(kernel), rows, "uniform")
                    m, f = bo.engine_measure(m, job(session), runs, check, want)
                    results.append(m)
                    figures[id(m)] = f
        finally:
            for session in reversed(sessions.values()):
                session.close()
    return results, _summary(results, figures, rows, runs, object_store, time.time() - started)


def _jobs(
    rows: int,
) -> list[tuple[str, Callable[[hs.Session], Callable[[], Any]], Check, bo.Expected]]:
    """(workload, job on a session, check, pyarrow's answer) for each job, in order."""
    table = make_table(rows, "uniform")
    data = blocks(table, PARALLELISM)
    dim, fact = bo.dimension(), bo.fact_unique(rows)
    dim_blocks, fact_blocks = blocks(dim, PARALLELISM), blocks(fact, PARALLELISM)
    wide = table.set_column(0, "k", pc.multiply(table.column("k"), WIDE))
    wide_blocks = blocks(wide, PARALLELISM)
    print(f"[bench] kernels: pyarrow answers for {rows:,} rows", file=sys.stderr, flush=True)
    return [
        (GROUP_BY, lambda s: group_by_job(s, data), check_group_by, expected_group_by(table)),
        (GROUP_BY_WIDE, lambda s: group_by_job(s, wide_blocks), check_group_by,
         expected_group_by(wide)),
        (SORT, lambda s: bo.sort_job(s, data), bo.check_sort, bo.expected_sort(table)),
        (JOIN_DIM, lambda s: bo.join_job(s, data, dim_blocks, "hash"), bo.check_join,
         bo.expected_join(table, dim)),
        (JOIN_FACT, lambda s: bo.join_job(s, data, fact_blocks, "hash"), bo.check_join,
         bo.expected_join(table, fact)),
    ]  # fmt: skip


# -- the summary -------------------------------------------------------------------------


def _summary(
    results: list[Measurement],
    figures: dict[int, bo.EngineFigures],
    rows: int,
    runs: int,
    object_store: str,
    seconds: float,
) -> dict[str, Any]:
    jobs: dict[str, dict[str, Any]] = {}
    for m in results:
        f = figures[id(m)]
        kernel = m.system.split()[1]
        row = jobs.setdefault(m.workload, {})
        row[kernel] = {
            "median_seconds": m.median if m.seconds and not m.error else None,
            "seconds": m.seconds,
            # VertexMetrics.cpu_seconds: the task threads' and their DuckDB queries'
            "cpu_seconds": f.stateful_cpu_seconds,
            "stateful_wall_seconds": f.stateful_wall_seconds,
            "peak_over_memory": f.peak_over_memory,
            "spilled_bytes": f.spilled_bytes,
            "checked_runs": f.checked_runs,
            "error": m.error,
        }
    for row in jobs.values():
        d, a = (row.get(k, {}).get("median_seconds") for k in KERNELS)
        row["duckdb_over_arrow"] = d / a if d and a else None
    targets = [
        target(f"{name}: duckdb <= arrow", row["duckdb_over_arrow"], NOT_SLOWER)
        for name, row in jobs.items()
    ]
    for name in (GROUP_BY, GROUP_BY_WIDE):
        if name in jobs:
            value = jobs[name]["duckdb_over_arrow"]
            targets.append(target(f"{name}: duckdb <= {GROUP_BY_TARGET:g}x arrow", value,
                                  GROUP_BY_TARGET))  # fmt: skip
    return {
        "rows": rows,
        "runs": runs,
        "config": {k: session_config(k, MEMORY, object_store) for k in KERNELS},
        "slots": SLOTS,
        "seconds": seconds,
        "jobs": jobs,
        "targets": targets,
    }


def print_summary(summary: dict[str, Any] | None) -> None:
    if not summary:
        return
    print(
        f"\nkernels (issue 23): {summary['rows']:,} rows, parallelism {PARALLELISM}, "
        f"operators.memory {bo.mib(MEMORY)}; every run checked against pyarrow"
    )
    print(f"  {'job':<38} {'duckdb s':>9} {'arrow s':>9} {'duck/arrow':>11}")
    for name, row in summary["jobs"].items():
        d, a = row.get("duckdb", {}), row.get("arrow", {})
        print(
            f"  {name:<38} {_s(d.get('median_seconds')):>9} {_s(a.get('median_seconds')):>9} "
            f"{_x(row['duckdb_over_arrow']):>11}"
        )
        for kernel, figures in (("duckdb", d), ("arrow", a)):
            if figures.get("error"):
                print(f"    {kernel}: error: {figures['error'][:160]}")
    print_targets("issue 23 kernel targets", summary["targets"])


def _s(value: float | None) -> str:
    return f"{value:.3f}" if value is not None and not math.isnan(value) else "-"


def _x(value: float | None) -> str:
    return f"{value:.2f}x" if value is not None else "-"
