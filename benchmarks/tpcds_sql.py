"""Issue 33: the 99 TPC-DS queries on Spark SQL and on ``Session.sql``, checked and timed.

**What it reports**, per query: whether Spark answers it (and in how long: ``spark.sql``
collected as Arrow), whether the engine's answer is Spark's (``corpus_compare.verdict``:
names, Spark types, rows exactly; in order under a top-level ORDER BY), whether it ran
fully in the engine (no ``explain_data()["spark_subtrees"]``) or which subtrees fell back
and why, the engine's error if it failed, and its time (planning: Spark plans and the
plan is translated; run: ``collect``).  Then the totals against issue 33's target
(TPC-DS: every query Spark runs equal, >= 95% fully in the engine).

With ``--systems engine,spark,duckdb`` (issue 34) it also times DuckDB with 2 threads on
the same files (views over the Parquet, the extension's own text), after the engine,
and reports the engine's run over DuckDB's per query and their geometric mean over the
queries that are equal and ran fully in the engine (issue 34's target: <= 4x at SF1).

**Data**: ``tpcgen-cli`` Parquet of the 24 tables at ``--scale``
(``tpcds_data.ensure``), each a temporary view of the session's Spark.  **Queries**:
the ``tpcds`` DuckDB extension's texts, made Spark SQL by ``tpcds_data.spark_dialect``.

**How**: one ``hs.Session`` (TPC-H's benchmark config: 2 CPUs, parallelism 2), each
query once in Spark then in the engine, each step bounded by 300 s:

    RAY_ADDRESS=local .venv/bin/python -m benchmarks run tpcds --scale 1 \
        --systems engine,spark,duckdb [--runs 2]

With ``--runs N`` (default 1) the engine and DuckDB each run every query ``N`` times
and the best is kept (the engine's by planning plus run, as ``tpch-sql`` keeps it;
DuckDB's after one untimed run), every engine answer checked: one run per query
measures a cold first run of each query against DuckDB's warm one, and one run alone
is noisy (BENCHMARKS.md, issue 34's thirty-fifth session).

It writes ``benchmarks/results/tpcds/<label>.json``.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import hybrid_shuffle as hs
from benchmarks import tpcds_data
from benchmarks.corpus_compare import verdict
from benchmarks.spark_corpus import (
    Timeout,
    _commit,
    bounded,
    error_group,
    error_text,
    fallback_group,
    plan_shape,
    spark_answer,
)
from benchmarks.tpch import SLOTS, session_config

__all__ = ["measure", "run_query"]

#: Spark's shuffle partitions: one per core
PARTITIONS = 2

#: issue 33's target: of the queries Spark answers, this share fully in the engine
IN_ENGINE_TARGET = 95.0
#: issue 34's target: the engine's run over DuckDB's, geomean of the queries in the engine
DUCKDB_TARGET = 4.0
#: DuckDB's threads: the cores the engine and Spark get
DUCKDB_THREADS = 2


def _log(message: str) -> None:
    print(f"[tpcds] {message}", file=sys.stderr, flush=True)


def run_query(
    session: hs.Session, spark: Any, n: int, text: str, timeout: float, repeat: int = 1
) -> dict[str, Any]:
    """One query's record: Spark's answer and time, then the engine's, best of
    ``repeat`` runs, each answer checked (see the doc)."""
    r: dict[str, Any] = {"query": f"q{n}"}
    started = time.perf_counter()
    try:
        df = spark.sql(text)
        ordered, _, _ = plan_shape(df)
        names, want = spark_answer(spark, df, timeout)
        types = [f.dataType.simpleString() for f in df.schema.fields]
    except Timeout:
        return {**r, "status": "spark timeout"}
    except Exception as e:
        return {**r, "status": "spark rejects", "why": error_text(e)}
    r.update(spark_seconds=time.perf_counter() - started, rows=len(want))
    for _ in range(max(repeat, 1)):
        started = time.perf_counter()
        try:
            stream = bounded(lambda: session.sql(text, name=f"tpcds-q{n}"), timeout)
            planned = time.perf_counter()
            subtrees = list(stream.explain_data().get("spark_subtrees", []))
            table = stream.collect(timeout=timeout).table
            ran = time.perf_counter() - planned
        except Timeout as e:
            return {**r, "status": "error", "error": f"Timeout: planning {e}"}
        except Exception as e:
            return {**r, "status": "error", "error": error_text(e)}
        found = verdict(table, names, want, types, ordered)
        if found is not None:
            kind, what = found
            status = "wrong" if kind == "rows" else "differs"
            return {**r, "status": status, "kind": kind, "problem": what}
        best = r.get("plan_seconds", math.inf) + r.get("run_seconds", math.inf)
        if planned - started + ran < best:
            r.update(plan_seconds=planned - started, run_seconds=ran)
        r.update(fallbacks=subtrees, in_engine=not subtrees)
    return {**r, "status": "equal"}


def duckdb_peer(scale: float, root: Path = tpcds_data.CACHE) -> Any:
    """DuckDB with ``DUCKDB_THREADS`` threads and a view per table over the same Parquet."""
    con = tpcds_data.duckdb_connection()
    con.execute(f"SET threads = {DUCKDB_THREADS}")
    for table, path in tpcds_data.table_paths(scale, root).items():
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{path}')")
    return con


def time_duckdb(con: Any, text: str, repeat: int = 1) -> float | None:
    """DuckDB's best time of ``repeat`` runs of ``text`` fetched as Arrow (``None`` if
    DuckDB cannot run it)."""
    best = math.inf
    for _ in range(max(repeat, 1)):
        started = time.perf_counter()
        try:
            con.execute(text).fetch_arrow_table()
        except Exception:
            return None
        best = min(best, time.perf_counter() - started)
    return best


def _over_duckdb(r: dict[str, Any]) -> float | None:
    run, duck = r.get("run_seconds"), r.get("duckdb_seconds")
    if r["status"] != "equal" or not r.get("in_engine") or not run or not duck:
        return None
    return float(run) / float(duck)


def report_lines(s: dict[str, Any]) -> list[str]:
    records = s["records"]
    out = [
        f"# TPC-DS SF{s['scale']:g} (issue 33): {s['when']} UTC, commit {s['commit']}",
        "",
        f"{len(records)} queries, {s['spark_answers']} answered by Spark; equal {s['equal']}, "
        f"fully in engine {s['in_engine']} ({s['in_engine_pct']:.1f}%, target >= "
        f"{IN_ENGINE_TARGET:g}%), fell back {s['fell_back']}, engine errors {s['errors']}, "
        f"WRONG {s['wrong']}, differs {s['differs']}.  Run: {s['seconds']:.0f} s.",
        "",
    ]
    if s.get("duckdb_geomean") is not None:
        out += [
            f"Engine run / DuckDB ({DUCKDB_THREADS} threads), geomean over the "
            f"{s['duckdb_compared']} queries equal and fully in the engine: "
            f"{s['duckdb_geomean']:.2f}x (target <= {DUCKDB_TARGET:g}x); sum of runs: "
            f"engine {s['engine_run_total']:.1f} s, DuckDB {s['duckdb_total']:.1f} s.",
            "",
        ]
    out += [
        "## Wrong results and differences",
    ]
    out += [f"- {r['query']} ({r['kind']}): {r['problem']}" for r in records
            if r["status"] in ("wrong", "differs")]  # fmt: skip
    out += ["", "## Engine errors, grouped"]
    for text, count in s["error_groups"]:
        which = [r["query"] for r in records if r.get("error") and error_group(r["error"]) == text]
        out.append(f"- {count} x {text} ({', '.join(which)})")
    out += ["", "## Fallback reasons, grouped"]
    for text, count in s["fallback_reasons"]:
        which = [r["query"] for r in records
                 if any(fallback_group(f) == text for f in r.get("fallbacks") or [])]  # fmt: skip
        out.append(f"- {count} x {text} ({', '.join(which)})")
    out += ["", "## Per query", ""]
    out += [
        "| query | status | in engine | Spark s | plan s | run s | DuckDB s | run/DuckDB | note |",
        "|---" * 9 + "|",
    ]
    for r in records:
        note = r.get("error") or r.get("problem") or r.get("why") or ""
        ratio = _over_duckdb(r)
        out.append(
            f"| {r['query']} | {r['status']} | {_yes(r.get('in_engine'))} | "
            f"{_num(r.get('spark_seconds'))} | {_num(r.get('plan_seconds'))} | "
            f"{_num(r.get('run_seconds'))} | {_num(r.get('duckdb_seconds'))} | "
            f"{'' if ratio is None else f'{ratio:.2f}x'} | {note[:120].replace('|', '/')} |"
        )
    return out


def _yes(v: Any) -> str:
    return "" if v is None else ("yes" if v else "no")


def _num(v: Any) -> str:
    return "" if v is None else f"{v:.2f}"


def summary(records: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    status = Counter(r["status"] for r in records)
    answered = [r for r in records if r["status"] in ("equal", "wrong", "differs", "error")]
    in_engine = sum(1 for r in answered if r.get("in_engine") and r["status"] != "error")
    ratios = [x for x in map(_over_duckdb, records) if x is not None]
    compared = [r for r in records if _over_duckdb(r) is not None]
    return {
        "duckdb_compared": len(ratios),
        "duckdb_geomean": math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None,
        "engine_run_total": sum(r["run_seconds"] for r in compared),
        "duckdb_total": sum(r["duckdb_seconds"] for r in compared),
        **meta,
        "spark_answers": len(answered),
        "equal": status["equal"],
        "in_engine": in_engine,
        "in_engine_pct": 100.0 * in_engine / len(answered) if answered else 0.0,
        "fell_back": sum(1 for r in answered if r.get("fallbacks")),
        "errors": status["error"],
        "wrong": status["wrong"],
        "differs": status["differs"],
        "fallback_reasons": Counter(
            fallback_group(f) for r in answered for f in r.get("fallbacks") or []
        ).most_common(),
        "error_groups": Counter(
            error_group(r["error"]) for r in answered if r["status"] == "error"
        ).most_common(),
        "records": records,
    }


def measure(
    scale: float,
    numbers: list[int],
    timeout: float,
    duckdb: bool,
    root: Path = tpcds_data.CACHE,
    repeat: int = 1,
) -> dict[str, Any]:
    """Each query in Spark, then in the engine (then, with ``duckdb``, in DuckDB), the
    engine and DuckDB best of ``repeat``: the summary, its ``records`` one per query."""
    folder = tpcds_data.ensure(scale, root)
    con = tpcds_data.duckdb_connection()
    texts = {n: tpcds_data.query(con, n) for n in numbers}
    # DuckDB's own text (``query`` makes it Spark's: back-quoted aliases DuckDB rejects)
    duck_texts = {n: tpcds_data.query(con, n, dialect="duckdb") for n in numbers}
    con.close()
    duck = duckdb_peer(scale, root) if duckdb else None
    when = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    meta = {"scale": scale, "config": "bench", "partitions": PARTITIONS, "runs": repeat,
            "folder": str(folder), "when": when, "commit": _commit()}  # fmt: skip
    records: list[dict[str, Any]] = []
    started = time.time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with hs.Session(session_config(2, "3 GiB"), slots=SLOTS) as session:
            spark = session.spark
            spark.conf.set("spark.sql.shuffle.partitions", str(PARTITIONS))
            for table, path in tpcds_data.table_paths(scale, root).items():
                spark.read.parquet(path).createOrReplaceTempView(table)
            for n, text in texts.items():
                record = run_query(session, spark, n, text, timeout, repeat)
                if duck is not None and record["status"] == "equal":
                    # one untimed run first: DuckDB's caches warm, as the engine's are
                    time_duckdb(duck, duck_texts[n])
                    record["duckdb_seconds"] = time_duckdb(duck, duck_texts[n], repeat)
                records.append(record)
                _log(
                    f"q{n}: {record['status']} {record.get('error') or record.get('problem') or ''}"
                )
    return summary(records, {**meta, "seconds": time.time() - started})
