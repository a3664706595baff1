"""Issue 33: a corpus of Spark queries (the built-in functions' documented examples,
PySpark's docstring examples, our own queries over small views, the functions'
examples again with constant folding off), each answered by Spark and by the engine;
per case: equal, wrong, differs (names, types, order) or error, and whether it ran
fully in the engine; see ``benchmarks/spark_corpus.py``."""

from __future__ import annotations

from benchmarks import spark_corpus
from benchmarks.harness import Measurement, target
from benchmarks.suite import Context, Outcome, Suite

TIMEOUT = 60.0


def run(ctx: Context) -> Outcome:
    limit = int(ctx.scale * 1000)
    summary = spark_corpus.measure(spark_corpus.SOURCES, limit, TIMEOUT)
    cases = []
    for r in summary["records"]:
        if r["status"] in ("skipped", "spark rejects", "spark timeout"):
            continue
        equal = r["status"] == "equal"
        m = Measurement(r["name"], "engine", 0, r["source"], checked=equal,
                        error=None if equal else f"{r['status']}: "
                        f"{r.get('error') or r.get('problem')}")  # fmt: skip
        if r.get("engine_seconds") is not None:
            m.seconds = [r["engine_seconds"]]
        cases.append(m)
    summary["targets"] = [
        target("cases Spark answers the engine gets wrong, %",
               100.0 * summary["wrong"] / max(summary["spark_answers"], 1), 0.0, "%")
    ]  # fmt: skip
    return Outcome(cases, summary, spark_corpus.report_lines(summary)[:7])


SUITE = Suite(
    name="spark-corpus",
    description="a corpus of Spark queries, each answered by Spark and by the engine",
    issue="issue 33",
    scale_unit="thousand cases",
    default_scale=10,
    tiny_scale=0.005,
    systems=("engine", "spark"),
    oracle="Spark (names, Spark types, rows; in order under a global sort)",
    run=run,
    runs=1,
)
