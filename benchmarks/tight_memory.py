"""Issues 23 and 37: a 40M-row aggregate at the smallest operator memory the engine honours.

**Data** (seeded): ``--scale`` million (default 40M) rows of ``k`` int64 uniform over
``rows / 2`` keys (at 40M: about 17.3M distinct keys, so the state cannot fit in
64 MiB and must spill) and ``v`` float64, dealt as ``PARALLELISM`` = 8 blocks.

**The job**: ``key_by("k").aggregate({"v": ["sum", "count"]})`` (the map-side
combiner on, as by default: it stops combining by itself on keys this unique), in
its own Ray (``num_cpus=2``) and session, ``operators.memory: 64 MiB``
(``OPERATORS_MIN_MEMORY``: a smaller budget is a ``ConfigError``),
``parallelism: 8``, 10 slots.  A warm-up, then the median of ``--runs``.

**Checked**: every run against pyarrow's ``group_by`` of the whole table (keys and
counts exactly, sums to 1e-9 relative).

**Reported**, from ``JobResult.vertices`` of the timed runs: the aggregate vertex's
``peak_memory_bytes`` (its largest subtask's) against its ``memory``, and the bytes
it spilled (the largest of the runs); issue 37's target is a peak of at most 1.5x the
memory.  The source vertex's figures (its map-side combiner) are printed too, and
the ``memory_limit`` the task's DuckDB had (three quarters of the budget,
``operators/duck/database.py``, ``duckdb_memory_limit``).  And
what the operators' own accounts leave out: the executors' resident memory (RSS) at its
peak above their size before the first run (``benchmarks.memory.peak_rss``), the
largest executor's and their sum; an executor runs several of the 8 tasks at once, so
this is not one task's figure.
"""

from __future__ import annotations

import sys
import time
import warnings
from typing import Any

import numpy as np
import pyarrow as pa

import hybrid_shuffle as hs
from benchmarks import batch_operators as bo
from benchmarks.data import blocks
from benchmarks.harness import Measurement, measure, target
from benchmarks.memory import peak_rss
from hybrid_shuffle.config import OPERATORS_MIN_MEMORY
from hybrid_shuffle.operators.duck.database import duckdb_memory_limit

__all__ = ["DEFAULT_ROWS", "MEMORY", "make_table", "run"]

DEFAULT_ROWS = 40_000_000
MEMORY = OPERATORS_MIN_MEMORY
PARALLELISM = bo.PARALLELISM
SLOTS = bo.SLOTS
WORKLOAD = "aggregate in 64 MiB"
SYSTEM = "engine, 64 MiB"
VERTEX = "aggregate"
PEAK_TARGET = 1.5


def make_table(rows: int, seed: int = 46) -> pa.Table:
    """``rows`` rows of ``k`` uniform over ``rows // 2`` keys and ``v`` float64."""
    rng = np.random.default_rng(seed)
    keys = max(rows // 2, 1)
    return pa.table({"k": rng.integers(0, keys, rows, dtype=np.int64), "v": rng.random(rows)})


def run(
    rows: int = DEFAULT_ROWS, runs: int = 3, object_store: str = "3 GiB"
) -> tuple[list[Measurement], dict[str, Any]]:
    """The measurement in one Ray of its own (no other session may be open) and the
    summary (``payload["tight_memory"]``)."""
    started = time.time()
    table = make_table(rows)
    data = blocks(table, PARALLELISM)
    print(f"[bench] {WORKLOAD}: pyarrow's answer for {rows:,} rows", file=sys.stderr, flush=True)
    want = bo.Expected(0, 0, 0.0, table=_expected(table))
    config = bo.session_config(MEMORY, object_store)
    m = Measurement(WORKLOAD, SYSTEM, rows, f"uniform over {rows // 2:,} keys")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hs.ConfigWarning)
        with hs.Session(config, slots=SLOTS) as session:
            run_ = bo.EngineRun(_job(session, data))
            pids = [int(e["pid"]) for e in session.executor_info]
            with peak_rss(pids) as rss:
                measure(m, run_, runs)
    checked = 0
    for result in run_.results:
        problem = _check(result.table, want)
        if problem is not None and m.error is None:
            m.error = f"wrong result: {problem}"
        checked += 1
    timed = run_.results[-runs:] if len(run_.results) > runs else run_.results
    vertices = [r.vertices[VERTEX] for r in timed if VERTEX in r.vertices]
    peak = max((v.peak_memory_bytes for v in vertices), default=0)
    memory = max((v.memory for v in vertices), default=0)
    spilled = max((v.spilled_bytes for v in vertices), default=0)
    ratio = peak / memory if memory else None
    limit = duckdb_memory_limit(memory)  # what the task's DuckDB was given
    others = {  # the combiner chained into the source, which has its own share
        name: {
            "memory_bytes": max(r.vertices[name].memory for r in timed),
            "peak_memory_bytes": max(r.vertices[name].peak_memory_bytes for r in timed),
            "spilled_bytes": max(r.vertices[name].spilled_bytes for r in timed),
        }
        for name in (timed[0].vertices if timed else {})
        if name != VERTEX and timed[0].vertices[name].memory
    }
    m.note = f"peak {bo.mib(peak)} of {bo.mib(memory)}, spilled {bo.mib(spilled)}"
    summary = {
        "rows": rows,
        "distinct_keys": want.table.num_rows if want.table is not None else None,
        "runs": runs,
        "config": config,
        "median_seconds": m.median if m.seconds and not m.error else None,
        "seconds": m.seconds,
        "error": m.error,
        "checked_runs": checked,
        "memory_bytes": memory,
        "peak_memory_bytes": peak,
        "peak_over_memory": ratio,
        "duckdb_memory_limit_bytes": limit,
        "peak_over_duckdb_limit": peak / limit if limit else None,
        "spilled_bytes": spilled,
        "run_peaks": [v.peak_memory_bytes for v in vertices],
        "executors": len(pids),
        "tasks_per_executor": -(-PARALLELISM // max(len(pids), 1)),
        "executor_rss_rise_bytes": rss["peak_bytes"],
        "executors_rss_rise_bytes": rss["peak_sum_bytes"],
        "other_vertices": others,
        "target": target(f"peak <= {PEAK_TARGET:g}x memory", ratio, PEAK_TARGET),
        "wall_seconds": time.time() - started,
    }
    return [m], summary


def _job(session: hs.Session, data: list[pa.Table]) -> Any:
    def build() -> Any:
        job = session.job("tight-aggregate")
        source = job.from_arrow(data, name="source", parallelism=len(data))
        keyed = source.key_by("k", edge="by_k")
        return keyed.aggregate({"v": ["sum", "count"]}, name=VERTEX)

    return build


def _expected(table: pa.Table) -> pa.Table:
    return table.group_by("k").aggregate([("v", "sum"), ("v", "count")]).sort_by("k")


def _check(out: pa.Table, want: bo.Expected) -> str | None:
    assert want.table is not None
    expected = want.table
    got = out.sort_by("k")
    if got.num_rows != expected.num_rows:
        return f"{got.num_rows:,} keys, pyarrow has {expected.num_rows:,}"
    if not got.column("k").equals(expected.column("k")):
        return "the keys differ from pyarrow's"
    if not got.column("v_count").cast(pa.int64()).equals(expected.column("v_count")):
        return "v_count differs from pyarrow's"
    a, b = got.column("v_sum").to_numpy(), expected.column("v_sum").to_numpy()
    if not np.allclose(a, b, rtol=1e-9, atol=0):
        return f"v_sum differs from pyarrow's by up to {np.max(np.abs(a - b)):.3g}"
    return None
