"""Issue 36: the 22 TPC-H queries through ``Session.sql`` with hybrid exchange modes
against blocking ones, in one session, interleaved, answers checked against Spark's.

    RAY_ADDRESS=local flock /tmp/hs-bench.lock .venv/bin/python -m benchmarks run tpch-modes

**Configurations** (``shuffle.default_mode`` / ``shuffle.batch_mode``, swapped through
``session.config`` for each run: ``benchmarks.mode_runs.with_modes``):

* ``blocking``: blocking / blocking, every edge blocking;
* ``hybrid``: hybrid-selective / blocking, the shipped defaults: the edges a translated
  plan can stream on (a hash join's probe side, projections and filters) run
  hybrid-selective, those into an aggregate, a sort or a sort-merge join become
  ``batch_mode`` by the output-on-EOF rule;
* ``hybrid-all``: hybrid-selective / hybrid-selective, every edge hybrid.

**How**: one ``hs.Session`` of ``benchmarks.tpch``'s config (2 Ray CPUs, ``slots``
10, parallelism and ``spark.sql.shuffle.partitions`` 2, ``shuffle.memory_budget``
1 GiB), the eight tables of ``tpch_data.ensure(scale)`` as temporary views.  Spark
answers each query once (the reference; timed, for scale only).  Then per query,
``--runs`` + 1 rounds, each running ``session.sql(text).collect()`` once in every
configuration, the configurations' order rotating from round to round; the first round
is the warm-up (checked, not timed).  Timed: ``collect()`` alone (the run: planning the
engine job in the configuration's modes, running it, the result back to the driver);
``session.sql`` (Spark's planning and the translation, the same in every
configuration) is recorded apart.  The median of the timed rounds counts.

**Checked**: every run, warm-ups included, against Spark's answer (as
``benchmarks.tpch_sql`` checks: Spark's column names and types, rows in order where the
query orders, decimals exactly, doubles to 1e-9), so the configurations also agree with
each other.

**Reported** per query and configuration: the median run, its ratio to blocking, the
edges of the job and how many ran in a mode other than blocking (``JobResult.edges``),
how many of those had a consumer read a producer still running, and the bytes the
exchanges spilled; then the geomean ratios against issue 36's target (hybrid <= 1.0x
blocking).  Results go to ``benchmarks/results/<name>.txt`` and ``.json``.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import hybrid_shuffle as hs
from benchmarks import tpch_data
from benchmarks.mode_runs import (
    CpuSample,
    edge_facts,
    non_blocking_edges,
    with_modes,
)
from benchmarks.tpch import SLOTS, session_config
from benchmarks.tpch_sql import compare, has_order_by, schema_problem, spark_collect

__all__ = ["CONFIGS", "measure", "report"]

#: name -> (shuffle.default_mode, shuffle.batch_mode)
CONFIGS = {
    "blocking": ("blocking", "blocking"),
    "hybrid": ("hybrid-selective", "blocking"),
    "hybrid-all": ("hybrid-selective", "hybrid-selective"),
}
TARGET = 1.0
PARTITIONS = 2
MIB = 2**20


def _log(message: str) -> None:
    print(f"[tpch-modes] {message}", file=sys.stderr, flush=True)


def run_once(session: hs.Session, n: int, text: str, config: str, timeout: float) -> dict[str, Any]:
    default_mode, batch_mode = CONFIGS[config]
    with with_modes(session, default_mode, batch_mode):
        started = time.perf_counter()
        stream = session.sql(text, name=f"tpch-q{n}")
        planned = time.perf_counter()
        cpu = CpuSample().start()
        result = stream.collect(timeout=timeout)
        seconds = time.perf_counter() - planned
        cpu.stop()
    edges = edge_facts(result)
    return {
        "plan_seconds": planned - started,
        "seconds": seconds,
        "table": result.table,
        "restarts": result.restarts,
        "edges": edges,
        "non_blocking": non_blocking_edges(result),
        "overlapped": sum(
            1 for e in edges.values() if e["mode"] != "blocking" and e["consumed_before_produced"]
        ),
        "spilled_bytes": result.spilled_bytes,
        "task_cpu_seconds": sum(t.cpu_seconds for t in result.tasks),
        "own_cpu_seconds": cpu.own,
        "machine_busy": cpu.machine_busy,
    }


def run_query(
    session: hs.Session, n: int, text: str, want: dict[str, Any], repeat: int, timeout: float
) -> dict[str, Any]:
    names = list(CONFIGS)
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in names}
    problems: dict[str, str] = {}
    ordered = has_order_by(text)
    for r in range(repeat + 1):
        order = names[r % len(names) :] + names[: r % len(names)]
        for config in order:
            try:
                one = run_once(session, n, text, config, timeout)
            except Exception as e:  # a failed run is a result to report
                problems.setdefault(config, f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")
                continue
            table = one.pop("table")
            problem = schema_problem(table, want["schema"]) or compare(
                table, want["table"], ordered
            )
            if problem:
                problems.setdefault(config, problem)
            if r > 0:  # round 0 is the warm-up
                runs[config].append(one)
    out: dict[str, Any] = {"ordered": ordered, "spark_seconds": want["seconds"]}
    for config in names:
        rs = runs[config]
        if not rs:
            out[config] = {"error": problems.get(config, "no run")}
            continue
        last = rs[-1]
        out[config] = {
            "seconds": statistics.median(x["seconds"] for x in rs),
            "runs": [x["seconds"] for x in rs],
            "plan_seconds": statistics.median(x["plan_seconds"] for x in rs),
            "equal": config not in problems,
            "problem": problems.get(config),
            "edges": len(last["edges"]),
            "non_blocking": last["non_blocking"],
            "overlapped": max(x["overlapped"] for x in rs),
            "spilled_bytes": max(x["spilled_bytes"] for x in rs),
            "task_cpu_seconds": statistics.median(x["task_cpu_seconds"] for x in rs),
            "own_cpu_seconds": _median([x["own_cpu_seconds"] for x in rs]),
            "restarts": sum(x["restarts"] for x in rs),
            "edge_modes": {
                k: f"{e['mode']} ({e['mode_origin']})" for k, e in last["edges"].items()
            },
        }
    base = out["blocking"].get("seconds")
    for config in names[1:]:
        mine = out[config].get("seconds")
        ok = base and mine and out[config]["equal"] and out["blocking"]["equal"]
        out[config]["over_blocking"] = mine / base if ok else None
    return out


def _median(values: list[float | None]) -> float | None:
    have = [v for v in values if v is not None]
    return statistics.median(have) if have else None


def _geomean(values: list[float | None]) -> float | None:
    if not values or any(v is None for v in values):
        return None
    return math.exp(statistics.fmean(math.log(v) for v in values if v is not None))


def measure(args: Any) -> dict[str, Any]:
    folder = tpch_data.ensure(args.scale, Path(args.data), tables=tpch_data.ALL_TABLES)
    paths = tpch_data.table_paths(args.scale, Path(args.data), tables=tpch_data.ALL_TABLES)
    con = tpch_data.duckdb_connection(1)
    texts = {n: tpch_data.query(con, n) for n in args.queries}
    con.close()
    queries: dict[str, dict[str, Any]] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hs.ConfigWarning)
        with hs.Session(session_config(PARTITIONS, "3 GiB"), slots=SLOTS) as session:
            spark = session.spark
            spark.conf.set("spark.sql.shuffle.partitions", str(PARTITIONS))
            for table, path in paths.items():
                spark.read.parquet(path).createOrReplaceTempView(table)
            spark_collect(spark, texts[args.queries[0]])  # Spark's warm-up
            budget = session.config.shuffle.memory_budget
            for n, text in texts.items():
                started = time.perf_counter()
                table, df = spark_collect(spark, text)
                want = {
                    "table": table,
                    "schema": [(f.name, f.dataType.simpleString()) for f in df.schema.fields],
                    "seconds": time.perf_counter() - started,
                }
                queries[f"q{n}"] = q = run_query(session, n, text, want, args.repeat, args.timeout)
                _log(
                    f"q{n}: "
                    + ", ".join(
                        f"{c} {q[c]['seconds']:.2f} s ({q[c]['non_blocking']}/{q[c]['edges']} "
                        f"non-blocking{'' if q[c]['equal'] else ', WRONG'})"
                        if "seconds" in q[c]
                        else f"{c} {q[c]['error']}"
                        for c in CONFIGS
                    )
                    + f", load {os.getloadavg()[0]:.1f}"
                )
    geo = {c: _geomean([q[c].get("over_blocking") for q in queries.values()]) for c in CONFIGS}
    del geo["blocking"]
    targets = {
        c: {"value": g, "status": "no figure" if g is None else "met" if g <= TARGET else "missed"}
        for c, g in geo.items()
    }
    return {
        "scale": args.scale,
        "data": str(folder),
        "configs": {c: {"default_mode": d, "batch_mode": b} for c, (d, b) in CONFIGS.items()},
        "slots": SLOTS,
        "parallelism": PARTITIONS,
        "memory_budget_bytes": budget,
        "repeat": repeat_note(args.repeat),
        "queries": queries,
        "geomean_over_blocking": geo,
        "target": TARGET,
        "targets": targets,
    }


def repeat_note(repeat: int) -> str:
    return (
        f"per query, {repeat} timed rounds after a warm-up round; each round runs every "
        "configuration once, their order rotating; the median counts"
    )


def report(s: dict[str, Any]) -> list[str]:
    configs = ", ".join(f"{c} = {v['default_mode']} / {v['batch_mode']}"
                        for c, v in s["configs"].items())  # fmt: skip
    lines = [
        f"TPC-H SF{s['scale']:g} through Session.sql (issue 36): shuffle.default_mode / "
        f"batch_mode {configs}",
        f"one session: 2 Ray CPUs, {s['slots']} slots, parallelism {s['parallelism']}, "
        f"memory_budget {s['memory_budget_bytes'] / MIB:.0f} MiB; {s['repeat']}; every run "
        "checked against Spark's answer",
        "  nb: edges that ran non-blocking / all edges; ov: of those, edges where a consumer "
        "read a producer still running",
        f"  {'query':<5} {'blocking':>8} {'hybrid':>8} {'h/b':>6} {'nb':>5} {'ov':>3} "
        f"{'hyb-all':>8} {'ha/b':>6} {'nb':>5} {'ov':>3} {'plan':>6} {'equal':>6}",
    ]
    for name, q in s["queries"].items():
        b, h, a = q["blocking"], q["hybrid"], q["hybrid-all"]
        equal = all(q[c].get("equal") for c in CONFIGS)
        lines.append(
            f"  {name:<5} {_s(b)} {_s(h)} {_x(h.get('over_blocking'))} {_nb(h)} "
            f"{_s(a)} {_x(a.get('over_blocking'))} {_nb(a)} "
            f"{b.get('plan_seconds', float('nan')):6.2f} {'yes' if equal else 'NO':>6}"
        )
    g = s["geomean_over_blocking"]
    lines.append(
        f"  {'geomean':<5} {'':>8} {'':>8} {_x(g['hybrid'])} {'':>9} {'':>8} {_x(g['hybrid-all'])}"
    )
    for name, q in s["queries"].items():
        for c in CONFIGS:
            if q[c].get("problem") or q[c].get("error"):
                lines.append(f"  {name} {c}: {q[c].get('problem') or q[c].get('error')}")
            if q[c].get("spilled_bytes"):
                lines.append(f"  {name} {c}: spilled {q[c]['spilled_bytes'] / MIB:.1f} MiB")
    lines.append("\nissue 36 TPC-H targets")
    for c, t in s["targets"].items():
        value = f"{t['value']:.3f}x" if t["value"] is not None else "-"
        lines.append(f"  [{t['status']:>9}] {c} / blocking geomean <= {s['target']:.1f}x: {value}")
    return lines


def _s(r: dict[str, Any]) -> str:
    return f"{r['seconds']:8.3f}" if "seconds" in r else f"{'error':>8}"


def _x(v: float | None) -> str:
    return f"{v:5.2f}x" if v is not None else f"{'-':>6}"


def _nb(r: dict[str, Any]) -> str:
    if "seconds" not in r:
        return f"{'-':>5} {'-':>3}"
    return f"{r['non_blocking']:>2}/{r['edges']:<2} {r['overlapped']:>3}"
