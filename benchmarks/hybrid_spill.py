"""Issue 36, point 3: hybrid where blocking spills. A hash join and an aggregate whose
exchanges carry several times ``shuffle.memory_budget``, every edge ``blocking``
against every edge ``hybrid-selective``, paired in one run.

    RAY_ADDRESS=local flock /tmp/hs-bench.lock .venv/bin/python -m benchmarks run hybrid-spill \
        --scale 1 --runs 7

**The job** (hand-built with the Stream API, so that its exchanges are exactly the ones
named here and nothing else decides their size): TPC-H ``lineitem`` (6,001,215 rows at
SF1; ``l_orderkey``, ``l_suppkey``, ``l_quantity``, ``l_extendedprice``, ``l_discount``)
and ``orders`` (``o_orderkey``, ``o_custkey``) read with ``from_parquet``, a hash
``join`` on the order key (edges ``join.left``, the probe side, and ``join.right``, the
build side), then ``key_by("o_custkey")`` into an ``aggregate`` (sum, sum, mean, max)
with ``combine=False``, so the aggregate's edge ``by_cust`` carries every joined row as
a shuffle of raw rows does.  At SF1 the three edges move about 755 MiB, against a
``shuffle.memory_budget`` of 64 MiB for the whole session (``BUDGET``).

**Modes**: no edge has a mode in code; ``shuffle.default_mode`` and
``shuffle.batch_mode`` are both ``blocking`` on one side and both ``hybrid-selective``
on the other (``benchmarks.mode_runs.with_modes``), so every edge runs in the mode
named (checked per run from ``JobResult.edges[...].mode``).

**Control**: the same two modes in sessions whose budget is 2 GiB (nothing
spills), which says what avoiding the spills is worth at most.

**Rounds**: one embedded Ray (2 CPUs); one session per slot count (2 and 8) and
budget, all open at once.  After a warm-up of each variant (mode and budget) on each
slot count, ``--runs`` rounds, each running every variant once on every slot count, the
variants' order rotating from round to round, so a drift of the shared machine hits
them all.  Every run, warm-ups included, is checked
against DuckDB's answer over the same Parquet (keys and sums exactly, the mean to
1e-9).  Per (slots, variant): the median wall, the median of the rounds' ratios to
blocking, each edge's median spilled bytes and whether a consumer read a producer
still running, the CPU seconds of this process tree (the driver, Ray and its executors)
and its share of the 2 cores over the wall, the tasks' own CPU, and the machine's busy
share (every process; the machine is shared, so it is mostly others').  The run nearest the
median gives each vertex's span (first task start to last task end, from the job's
start): a timeline in text.

Results go to ``benchmarks/results/hybrid-spill/<label>.json``.
"""

from __future__ import annotations

import logging
import math
import os
import statistics
import sys
import time
import warnings
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa

import hybrid_shuffle as hs
from benchmarks import tpch_data
from benchmarks.mode_runs import CpuSample, edge_facts, with_modes

__all__ = ["measure", "report"]

MODES = ("blocking", "hybrid-selective")
TARGET = 0.8
AGGREGATES = {
    "l_extendedprice": "sum",
    "l_quantity": "sum",
    "l_discount": "mean",
    "l_suppkey": "max",
}
ORACLE = """
SELECT o_custkey, sum(l_extendedprice) AS l_extendedprice_sum,
       sum(l_quantity) AS l_quantity_sum, avg(l_discount) AS l_discount_mean,
       max(l_suppkey) AS l_suppkey_max
FROM read_parquet('{lineitem}') JOIN read_parquet('{orders}') ON l_orderkey = o_orderkey
GROUP BY o_custkey ORDER BY o_custkey
"""
MIB = 2**20


def _log(message: str) -> None:
    print(f"[hybrid-spill] {message}", file=sys.stderr, flush=True)


def session_config(parallelism: int, budget: str, buffer_size: str) -> dict[str, Any]:
    return {
        "parallelism": parallelism,
        "ray": {"num_cpus": 2, "object_store_memory": "3 GiB"},
        "shuffle": {"memory_budget": budget, "buffer_size": buffer_size},
    }


def build(session: hs.Session, paths: dict[str, str]) -> hs.Stream:
    job = session.job("hybrid-spill")
    lineitem = job.from_parquet(
        paths["lineitem"],
        name="lineitem",
        columns=["l_orderkey", "l_suppkey", "l_quantity", "l_extendedprice", "l_discount"],
    ).rename({"l_orderkey": "orderkey"}, name="li_key")
    orders = job.from_parquet(
        paths["orders"], name="orders", columns=["o_orderkey", "o_custkey"]
    ).rename({"o_orderkey": "orderkey"}, name="o_key")
    joined = lineitem.join(orders, on="orderkey", edge="join", name="join")
    return joined.key_by("o_custkey", edge="by_cust").aggregate(
        AGGREGATES, name="agg", combine=False
    )


def oracle(paths: dict[str, str]) -> pa.Table:
    import duckdb

    con = duckdb.connect(config={"threads": 2})
    try:
        return con.execute(ORACLE.format(**paths)).to_arrow_table()
    finally:
        con.close()


def check(got: pa.Table, want: pa.Table) -> str | None:
    """None if ``got`` (sorted by key) is DuckDB's answer, else what differs."""
    got = got.sort_by("o_custkey")
    if got.num_rows != want.num_rows:
        return f"{got.num_rows} rows, DuckDB has {want.num_rows}"
    for name in want.column_names:
        if name not in got.column_names:
            return f"no column {name}"
        a, b = got[name].to_pylist(), want[name].to_pylist()
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if isinstance(y, float) or isinstance(x, float):
                same = math.isclose(float(x), float(y), rel_tol=1e-9)
            else:
                same = Decimal(str(x)) == Decimal(str(y)) if x is not None else y is None
            if not same:
                return f"row {i} {name}: {x!r}, DuckDB has {y!r}"
    return None


def run_once(
    session: hs.Session, paths: dict[str, str], mode: str, want: pa.Table
) -> dict[str, Any]:
    with with_modes(session, mode, mode):
        stream = build(session, paths)
        cpu = CpuSample().start()
        started = time.perf_counter()
        result = stream.collect()
        seconds = time.perf_counter() - started
        cpu.stop()
    problem = check(result.table, want)
    if problem is not None:
        raise AssertionError(f"{mode} on {session.slots} slots: {problem}")
    edges = edge_facts(result)
    wrong = {n: e["mode"] for n, e in edges.items() if e["mode"] != mode}
    if wrong:
        raise AssertionError(f"edges ran in another mode than {mode}: {wrong}")
    t0 = min(t.started_at for t in result.tasks)
    spans: dict[str, list[float]] = {}
    for t in result.tasks:
        s, e = t.started_at - t0, t.finished_at - t0
        old = spans.get(t.vertex, [s, e])
        spans[t.vertex] = [round(min(old[0], s), 3), round(max(old[1], e), 3)]
    return {
        "seconds": seconds,
        "restarts": result.restarts,
        "edges": edges,
        "spilled_bytes": result.spilled_bytes,
        "task_cpu_seconds": sum(t.cpu_seconds for t in result.tasks),
        "own_cpu_seconds": cpu.own,
        "own_busy_share": cpu.own / (2 * seconds) if cpu.own is not None else None,
        "machine_busy": cpu.machine_busy,
        "vertex_spans": spans,
        "load": os.getloadavg()[0],
    }


def measure(args: Any) -> dict[str, Any]:
    folder = tpch_data.ensure(args.scale, Path(args.data), tables=("lineitem", "orders"))
    paths = tpch_data.table_paths(args.scale, Path(args.data), tables=("lineitem", "orders"))
    want = oracle(paths)
    _log(f"DuckDB's answer: {want.num_rows:,} customers")
    import ray

    ray.init(
        address="local",
        num_cpus=2,
        object_store_memory=args.object_store << 20,
        include_dashboard=False,
        logging_level=logging.ERROR,
    )
    budgets = {"spill": args.budget, "no-spill": args.reference_budget}
    if not args.reference_budget:
        del budgets["no-spill"]
    variants = [(mode, b) for b in budgets for mode in MODES]
    sessions: dict[tuple[int, str], hs.Session] = {}
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", hs.ConfigWarning)
            for slots in args.slots:
                for b, size in budgets.items():
                    config = session_config(args.parallelism, size, args.buffer_size)
                    sessions[slots, b] = hs.Session(config, slots=slots)
            for slots in args.slots:
                runs[str(slots)] = {_key(m, b): [] for m, b in variants}
                for mode, b in variants:
                    warm = run_once(sessions[slots, b], paths, mode, want)
                    _log(f"warm-up, {slots} slots, {_key(mode, b)}: {warm['seconds']:.2f} s")
            for i in range(args.pairs):
                order = variants[i % len(variants) :] + variants[: i % len(variants)]
                for slots in args.slots:
                    mine = runs[str(slots)]
                    for mode, b in order:
                        mine[_key(mode, b)].append(run_once(sessions[slots, b], paths, mode, want))
                    _log(
                        f"round {i + 1}/{args.pairs}, {slots} slots: "
                        + ", ".join(f"{k} {r[-1]['seconds']:.2f} s" for k, r in mine.items())
                        + f", load {os.getloadavg()[0]:.1f}"
                    )
    finally:
        for session in sessions.values():
            session.close()
        ray.shutdown()
    return {
        "scale": args.scale,
        "data": str(folder),
        "rows": {"lineitem": _rows(paths["lineitem"]), "orders": _rows(paths["orders"])},
        "parallelism": args.parallelism,
        "memory_budget": args.budget,
        "reference_budget": args.reference_budget,
        "buffer_size": args.buffer_size,
        "pairs": args.pairs,
        "timing": "warm-up per (slots, variant), then rounds running every variant once, "
        "their order rotating from round to round",
        "target": TARGET,
        "by_slots": {s: _summary(r) for s, r in runs.items()},
        "runs": runs,
    }


def _key(mode: str, budget: str) -> str:
    """A variant's name: the mode, with ``, no spill`` for the reference budget's session."""
    return mode if budget == "spill" else f"{mode}, no spill"


def _rows(path: str) -> int:
    import pyarrow.parquet as pq

    return int(pq.ParquetFile(path).metadata.num_rows)


def _median(values: list[float | None]) -> float | None:
    have = [v for v in values if v is not None]
    return statistics.median(have) if have else None


def _summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per variant: medians, each edge's median spill, the round ratios to ``blocking``."""
    out: dict[str, Any] = {}
    base = runs["blocking"]
    for key, rs in runs.items():
        wall = statistics.median(r["seconds"] for r in rs)
        nearest = min(rs, key=lambda r: abs(r["seconds"] - wall))
        ratios = [r["seconds"] / b["seconds"] for r, b in zip(rs, base, strict=True)]
        out[key] = {
            "median_seconds": wall,
            "min_max_seconds": [min(r["seconds"] for r in rs), max(r["seconds"] for r in rs)],
            "pair_ratios": ratios,
            "median_pair_ratio": statistics.median(ratios),
            "own_cpu_seconds": _median([r["own_cpu_seconds"] for r in rs]),
            "own_busy_share": _median([r["own_busy_share"] for r in rs]),
            "task_cpu_seconds": _median([r["task_cpu_seconds"] for r in rs]),
            "machine_busy": _median([r["machine_busy"] for r in rs]),
            "spilled_bytes": _median([r["spilled_bytes"] for r in rs]),
            "edges": {
                name: {
                    "bytes": e["bytes"],
                    "spilled_bytes": _median([r["edges"][name]["spilled_bytes"] for r in rs]),
                    "overlapped_runs": sum(
                        r["edges"][name]["consumed_before_produced"] for r in rs
                    ),
                }
                for name, e in rs[0]["edges"].items()
            },
            "median_run_vertex_spans": nearest["vertex_spans"],
        }
    hybrid = out["hybrid-selective"]
    out["ratio_of_medians"] = hybrid["median_seconds"] / out["blocking"]["median_seconds"]
    out["status"] = "met" if hybrid["median_pair_ratio"] <= TARGET else "missed"
    return out


def report(s: dict[str, Any]) -> list[str]:
    rows = s["rows"]
    reference = (
        f"; the no-spill sessions' budget is {s['reference_budget']}"
        if s["reference_budget"]
        else ""
    )
    lines = [
        f"Hybrid where blocking spills (issue 36, point 3): TPC-H SF{s['scale']:g} lineitem "
        f"({rows['lineitem']:,} rows) hash-joined with orders ({rows['orders']:,}), then "
        f"aggregated per o_custkey without a combiner",
        f"parallelism {s['parallelism']}, 2 Ray CPUs, shuffle.memory_budget {s['memory_budget']} "
        f"for the session (split over its slots){reference}, buffer_size {s['buffer_size']}; "
        "every run checked against DuckDB",
        f"{s['pairs']} rounds per slot count after a warm-up, each running every variant once "
        "in an order rotating from round to round; medians. x blocking: the median of the "
        "rounds' ratios to blocking's run of the same round. own CPU: this process tree's "
        "(driver, Ray, executors); own busy: that over 2 cores x wall; machine: every "
        "process's busy share",
    ]
    for slots, b in s["by_slots"].items():
        variants = [k for k in b if isinstance(b[k], dict)]
        lines.append(f"\n{slots} slots")
        lines.append(
            f"  {'variant':<27} {'median s':>8} {'min-max s':>12} {'x blocking':>10} "
            f"{'own CPU s':>9} {'own busy':>8} {'task CPU s':>10} {'machine':>7} "
            f"{'spilled MiB':>11}"
        )
        for key in variants:
            m = b[key]
            lines.append(
                f"  {key:<27} {m['median_seconds']:8.2f} "
                f"{m['min_max_seconds'][0]:5.2f}-{m['min_max_seconds'][1]:<6.2f} "
                f"{m['median_pair_ratio']:9.2f}x "
                f"{_f(m['own_cpu_seconds'], 9, 1)} {_p(m['own_busy_share']):>8} "
                f"{_f(m['task_cpu_seconds'], 10, 1)} {_p(m['machine_busy']):>7} "
                f"{m['spilled_bytes'] / MIB:11.0f}"
            )
        for key in variants:
            edges = b[key]["edges"]
            lines.append(
                f"  {key}: edges (MiB moved / spilled, runs where a consumer read a running "
                "producer): "
                + "; ".join(
                    f"{n} {e['bytes'] / MIB:.0f} / {e['spilled_bytes'] / MIB:.0f}, "
                    f"{e['overlapped_runs']}"
                    for n, e in edges.items()
                )
            )
            spans = b[key]["median_run_vertex_spans"]
            lines.append(
                f"  {key}: timeline of the median run (vertex: start-end s): "
                + ", ".join(f"{v} {a:.1f}-{z:.1f}" for v, (a, z) in spans.items())
            )
        hybrid = b["hybrid-selective"]
        lines.append(
            f"  hybrid-selective / blocking: {hybrid['median_pair_ratio']:.2f}x (median of the "
            f"rounds' ratios), {b['ratio_of_medians']:.2f}x (ratio of medians); target <= "
            f"{s['target']:.1f}x: {b['status']}"
        )
        lines.append("  rounds' ratios: " + ", ".join(f"{r:.2f}" for r in hybrid["pair_ratios"]))
    return lines


def _f(v: float | None, width: int, places: int) -> str:
    return f"{v:{width}.{places}f}" if v is not None else f"{'-':>{width}}"


def _p(v: float | None) -> str:
    return f"{v:.0%}" if v is not None else "-"
