"""Issue 33: a corpus of Spark queries, each answered by Spark and by the engine.

**What it checks**: for every case of ``benchmarks.corpus_sources`` (the built-in
functions' documented examples from the running Spark's registry, PySpark's docstring
examples, ``benchmarks.corpus_own``'s queries over small views, and the functions'
examples again with Spark's constant folding off), Spark's answer
(``df._collect_as_arrow()``, else ``df.collect()``) against the engine's
(``session.sql(text)`` or ``session.from_dataframe(df)``, then ``collect``), judged by
``benchmarks.corpus_compare.verdict``.  Each case ends in one status:

* ``skipped``: a skip rule (``corpus_sources.SKIP_RULES``), or Spark's analysis says the
  plan is nondeterministic; ``spark rejects`` / ``spark timeout``: no answer to check;
* ``equal`` (and ``in engine`` when ``explain_data()`` lists no ``spark_subtrees``);
* ``wrong``: a row differs (listed in full: the worst bug); ``differs``: right rows
  with another column name or type, or in another order under an ORDER BY;
* ``error``: the engine raised (grouped by error class and first line).

Rows are compared as multisets unless the plan's root is a global sort; a LIMIT without
an ORDER BY compares only the row count.  Every case is bounded (60 seconds
for Spark's answer, for the engine's planning and for its run): a hang is reported and
the run goes on.  One session (the test config of ``tests/spark/conftest.py``) runs
everything; run it niced, so that it does not starve others:

    nice -n 10 .venv/bin/python -m benchmarks run spark-corpus [--scale N]

``--scale`` is the cases run in thousands (our own queries come first, so a small
scale runs those).  It writes
``benchmarks/results/spark-corpus/<label>.json``.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

import hybrid_shuffle as hs
from benchmarks import corpus_own
from benchmarks.corpus_compare import rows_of, spark_rows, verdict
from benchmarks.corpus_sources import (
    Case,
    docstring_cases,
    function_examples,
    restore_conf,
    skip_reason,
)

__all__ = ["CONFIG", "measure", "report_lines", "run_case"]

#: the test config of tests/spark/conftest.py: a small session beside the others' runs
CONFIG: dict[str, Any] = {
    "parallelism": 2,
    "ray": {"num_cpus": 4, "object_store_memory": "500 MiB"},
    "shuffle": {"buffer_size": "1 MiB", "memory_budget": "64 MiB"},
    "spark": {"executors": 1, "executor_cores": 1, "executor_memory": "1 GiB"},
}
SOURCES = ("own", "fn", "doc", "fnx")
SHUFFLE_PARTITIONS = 2


def _log(message: str) -> None:
    print(f"[corpus] {message}", file=sys.stderr, flush=True)


class Timeout(Exception):
    """A bounded step did not finish in time."""


def bounded(
    fn: Callable[[], Any], seconds: float, on_timeout: Callable[[], None] | None = None
) -> Any:
    """``fn()`` in a thread of its own; its result, its exception, or ``Timeout`` after
    ``seconds`` (``on_timeout`` is called first: cancel what can be cancelled)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # handed to the caller
            box["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        if on_timeout is not None:
            on_timeout()
        thread.join(5)
        raise Timeout(f"did not finish in {seconds:g} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def error_text(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0][:300] if lines else ''}"


def error_group(text: str) -> str:
    """An error's group: its text with names' numbers and literals blurred."""
    text = re.sub(r"\b(map|array|struct)<[^ ]*>", r"\1<...>", text)
    text = re.sub(r'Field "[^"]*" exists', 'Field "..." exists', text)
    text = re.sub(r"\binterval [a-z ]+?(?=,|$)", "interval ...", text)
    text = re.sub(r"\b([a-z_]*)\d+\b", r"\1N", text)
    text = re.sub(r"'[^']{20,}'", "'...'", text)
    return text[:200]


def fallback_group(fallback: dict[str, Any]) -> str:
    """A ``spark_subtrees`` entry's group: the operator without its plan id, the reason."""
    operator = re.sub(r"\s*\(\d+\)$", "", str(fallback.get("operator", "?")))
    return f"{operator}: {error_group(str(fallback.get('reason', '')))}"


# -- one case ------------------------------------------------------------------------------


def plan_shape(df: Any) -> tuple[bool, bool, bool]:
    """(ordered, limited without order, deterministic) from Spark's optimised plan."""
    qe = df._jdf.queryExecution()
    deterministic = bool(qe.analyzed().deterministic())
    node, limited = qe.optimizedPlan(), False
    while True:
        name = str(node.nodeName())
        if name == "Sort":
            return _is_global_sort(node), False, deterministic
        if name in ("GlobalLimit", "LocalLimit", "Tail", "Offset"):
            limited = True
        elif name not in ("Project", "Filter", "SubqueryAlias", "Window"):
            return False, limited, deterministic
        children = node.children()
        if children.size() != 1:
            return False, limited, deterministic
        node = children.apply(0)


def _is_global_sort(node: Any) -> bool:
    try:
        return bool(getattr(node, "global")())
    except Exception:
        return True


def spark_answer(spark: Any, df: Any, timeout: float) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Spark's column names and rows (as ``rows_of`` gives them), bounded in time."""
    group = f"corpus-{time.monotonic_ns()}"

    def collect() -> tuple[list[str], list[tuple[Any, ...]]]:
        spark.sparkContext.setJobGroup(group, "spark corpus", True)
        try:
            try:
                batches = df._collect_as_arrow()
            except Exception as e:
                if type(e).__name__ in ("AnalysisException", "ParseException"):
                    raise
                return list(df.columns), spark_rows(df.collect())
            if batches:
                return list(df.columns), rows_of(pa.Table.from_batches(batches))
            return list(df.columns), []
        finally:
            spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)

    return bounded(collect, timeout, lambda: spark.sparkContext.cancelJobGroup(group))


def run_case(session: hs.Session, spark: Any, case: Case, timeout: float) -> dict[str, Any]:
    """The record of one case: its status and what it found (see the module doc), with
    the case's Spark settings in force while it runs."""
    before = {k: spark.conf.get(k, None) for k in case.conf}
    for k, v in case.conf.items():
        spark.conf.set(k, v)
    try:
        return _run_case(session, spark, case, timeout)
    finally:
        restore_conf(spark, before)


def _run_case(session: hs.Session, spark: Any, case: Case, timeout: float) -> dict[str, Any]:
    r: dict[str, Any] = {"name": case.name, "source": case.source, "text": case.text}
    reason = skip_reason(case.text, is_sql=case.sql is not None)
    if reason is not None:
        return {**r, "status": "skipped", "why": reason}
    started = time.perf_counter()
    try:
        df = case.df if case.df is not None else spark.sql(case.sql)
        ordered, limited, deterministic = plan_shape(df)
        if not deterministic:
            return {**r, "status": "skipped", "why": "nondeterministic plan (Spark's analysis)"}
        names, want = spark_answer(spark, df, timeout)
        types = [f.dataType.simpleString() for f in df.schema.fields]
    except Timeout:
        return {**r, "status": "spark timeout"}
    except Exception as e:
        return {**r, "status": "spark rejects", "why": error_text(e)}
    r["spark_seconds"] = time.perf_counter() - started
    started = time.perf_counter()
    try:
        stream = bounded(
            lambda: (
                session.sql(case.sql, name="corpus")
                if case.sql is not None
                else session.from_dataframe(df, name="corpus")
            ),
            timeout,
        )
        subtrees = list(stream.explain_data().get("spark_subtrees", []))
        r["fallbacks"] = subtrees
        r["in_engine"] = not subtrees
        # collect's timeout does not cover the hand-over of a fallen-back subtree (its
        # Spark job runs before the job's clock starts), so the whole run is bounded too
        cancel = spark.sparkContext.cancelAllJobs
        table = bounded(lambda: stream.collect(timeout=timeout).table, timeout + 30, cancel)
    except Timeout as e:
        return {**r, "status": "error", "error": f"Timeout: {e}"}
    except Exception as e:
        return {**r, "status": "error", "error": error_text(e)}
    r["engine_seconds"] = time.perf_counter() - started
    # which rows a LIMIT keeps is not defined: count only
    if limited and not ordered and (table.num_rows, table.num_columns) == (len(want), len(names)):
        return {**r, "status": "equal", "note": "LIMIT without ORDER BY: row count only"}
    found = verdict(table, names, want, types, ordered)
    if found is None:
        return {**r, "status": "equal"}
    kind, what = found
    return {**r, "status": "wrong" if kind == "rows" else "differs", "kind": kind, "problem": what}


# -- the run -------------------------------------------------------------------------------


def cases(spark: Any, sources: tuple[str, ...], folder: Path) -> Iterator[Case]:
    """The cases of ``sources`` (of ``SOURCES``), in the order given."""
    for source in sources:
        if source == "own":
            corpus_own.create_views(spark, folder)
            for name, text in corpus_own.QUERIES:
                yield Case(f"own:{name}", "own queries", text, sql=text)
        elif source in ("fn", "fnx"):
            yield from function_examples(spark, unfolded=source == "fnx")
        elif source == "doc":
            yield from docstring_cases(spark)
        else:
            raise ValueError(f"--sources: {source!r} is not one of {', '.join(SOURCES)}")


def summary(records: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    status = Counter(r["status"] for r in records)
    answered = [r for r in records if r["status"] in ("equal", "wrong", "differs", "error")]
    n = len(answered)
    in_engine = sum(1 for r in answered if r.get("in_engine") and r["status"] != "error")
    fell_back = [r for r in answered if r.get("fallbacks")]
    reasons = Counter(fallback_group(f) for r in fell_back for f in r["fallbacks"])
    errors = Counter(error_group(r["error"]) for r in answered if r["status"] == "error")
    return {
        **meta,
        "cases": len(records),
        "statuses": dict(status),
        "spark_answers": n,
        "equal": status["equal"],
        "equal_pct": 100.0 * status["equal"] / n if n else 0.0,
        "in_engine": in_engine,
        "in_engine_pct": 100.0 * in_engine / n if n else 0.0,
        "fell_back": len(fell_back),
        "errors": status["error"],
        "wrong": status["wrong"],
        "differs": status["differs"],
        "fallback_reasons": reasons.most_common(),
        "error_groups": errors.most_common(),
        "skips": Counter(r["why"] for r in records if r["status"] == "skipped").most_common(),
        "by_source": {
            s: dict(Counter(r["status"] for r in records if r["source"] == s))
            for s in sorted({r["source"] for r in records})
        },
        "records": records,
    }


def report_lines(s: dict[str, Any]) -> list[str]:
    """The report, Markdown: figures, wrong results in full, errors and fallbacks grouped."""
    records = s["records"]
    out = [
        f"# Spark corpus (issue 33): {s['when']} UTC, commit {s['commit']}",
        "",
        f"{s['cases']} cases, {s['spark_answers']} answered by Spark; "
        f"equal {s['equal']} ({s['equal_pct']:.1f}%), fully in engine {s['in_engine']} "
        f"({s['in_engine_pct']:.1f}%), fell back {s['fell_back']}, engine errors "
        f"{s['errors']}, WRONG {s['wrong']}, differs (names/types/order) {s['differs']}.",
        f"Statuses: {s['statuses']}.  By source: {s['by_source']}.",
        f"Run: {s['seconds']:.0f} s{', partial' if s.get('partial') else ''}.",
        "",
        "## Wrong results (rows differ)",
    ]
    for r in records:
        if r["status"] == "wrong":
            out += [f"- `{r['name']}`: {r['problem']}", f"  `{r['text']}`"]
    out += ["", "## Differs (right rows; names, types or order)"]
    for r in records:
        if r["status"] == "differs":
            out += [f"- `{r['name']}` ({r['kind']}): {r['problem']}", f"  `{r['text']}`"]
    out += ["", "## Engine errors, grouped"]
    for text, count in s["error_groups"]:
        examples = [
            r for r in records if r["status"] == "error" and error_group(r["error"]) == text
        ]
        out.append(f"- {count} x {text}")
        for r in examples[:3]:
            out.append(f"    - `{r['name']}`: `{r['text'][:200]}`")
    out += ["", "## Fallback reasons, grouped (one query may count under several)"]
    for text, count in s["fallback_reasons"]:
        example = next(
            r["name"]
            for r in records
            if any(fallback_group(f) == text for f in r.get("fallbacks") or [])
        )
        out.append(f"- {count} x {text} (e.g. `{example}`)")
    out += ["", "## Skipped and not answered by Spark"]
    out += [f"- {count} x skipped: {why}" for why, count in s["skips"]]
    out.append(f"- {s['statuses'].get('spark rejects', 0)} x Spark rejects the query")
    out.append(f"- {s['statuses'].get('spark timeout', 0)} x Spark timed out")
    return out


def _commit() -> str:
    """The checkout's short commit, and whether the engine's code differs from it (others
    edit the same work tree while a run goes on)."""
    root = Path(__file__).resolve().parents[1]

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
        return done.stdout.strip()

    dirty = git("status", "--porcelain", "--untracked-files=no", "hybrid_shuffle")
    return (git("rev-parse", "--short", "HEAD") or "?") + (
        " (+ uncommitted edits)" if dirty else ""
    )


def measure(sources: tuple[str, ...], limit: int | None, timeout: float) -> dict[str, Any]:
    """Every case of ``sources`` (at most ``limit``) in one session: the summary."""
    meta = {"when": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "commit": _commit()}
    records: list[dict[str, Any]] = []
    started = time.time()
    had_warehouse = Path("spark-warehouse").exists()
    with warnings.catch_warnings(), tempfile.TemporaryDirectory(prefix="corpus-") as scratch:
        warnings.simplefilter("ignore")
        with hs.Session(CONFIG, slots=2) as session:
            spark = session.spark
            # tiny inputs: Spark's default of 200 shuffle partitions would make each
            # fallen-back subtree (planned with AQE off) 200 tasks on one core
            spark.conf.set("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
            for case in cases(spark, sources, Path(scratch)):
                if limit is not None and len(records) >= limit:
                    break
                record = run_case(session, spark, case, timeout)
                records.append(record)
                _log(f"{len(records)} {case.name}: {record['status']} "
                     f"{record.get('error') or record.get('problem') or ''}")  # fmt: skip
    warehouse = Path("spark-warehouse")  # made by Spark in the working directory, empty
    if not had_warehouse and warehouse.is_dir() and not any(warehouse.iterdir()):
        warehouse.rmdir()
    return summary(records, {**meta, "seconds": time.time() - started, "partial": False})
