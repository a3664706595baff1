"""Issue 36: a global ``ORDER BY`` through ``Session.sql``, sorted in parallel over a range
edge against the single task it ran in before, and against Spark's own.

    RAY_ADDRESS=local .venv/bin/python -m benchmarks run order-by --scale 10 --runs 3

One Parquet dataset (``--scale`` million rows, 8 files: a unique ``id``, a double ``k`` with 1%
nulls, some NaN and many ties, a short string ``s`` and a long ``v``) and one query,
``SELECT id, k, s, v FROM o ORDER BY k DESC NULLS LAST, id``, the whole result brought
back to the driver as Arrow.  Each of the three runs it, in the same session and the
same run, one after the other within every round (Spark first, the engine's two in
turns):

* **spark**: ``spark.sql(query)`` collected as Arrow in Spark on Ray (one executor with
  both cores, AQE on);
* **parallel**: ``Session.sql(query).collect()``: Spark's ``rangepartitioning`` is a
  range edge into 2 consumer subtasks (parallelism 2, 2 CPUs), planning included;
* **single**: the same with ``edges: {exchange_<id>: {partitions: 1}}``: one consumer
  subtask sorts every row, as every global sort ran before issue 36 (the producers still
  compute the binary sort key, which the range edge needs and the old plan did not).

Every answer is checked against Spark's: ``id`` is unique, so the order is fully
decided, and the ``id`` columns must be equal element by element.  The engine's
profile of the last run of each (``JobResult.profile()``: the phases outside the tasks,
each vertex's wall and CPU) is printed, to say where the time went.
"""

from __future__ import annotations

import io
import re
import statistics
import time
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import hybrid_shuffle as hs
from benchmarks.harness import target

ROOT = Path(__file__).resolve().parent
DATA = ROOT / ".data"
CONFIG: dict[str, Any] = {
    "parallelism": 2,
    "ray": {"num_cpus": 2, "object_store_memory": "4 GiB"},
    "spark": {"executors": 1, "executor_cores": 2, "executor_memory": "4 GiB", "prewarm": True},
}
QUERY = "SELECT id, k, s, v FROM o ORDER BY k DESC NULLS LAST, id"
SYSTEMS = ("spark", "parallel", "single")


def dataset(rows: int, data: Path = DATA) -> Path:
    """``rows`` rows of ``id``, ``k``, ``s``, ``v`` as 8 Parquet files (made once)."""
    folder = data / f"order-by-{rows}"
    if not folder.exists():
        rng = np.random.default_rng(36)
        tmp = folder.with_suffix(".tmp")
        tmp.mkdir(parents=True, exist_ok=True)
        per = -(-rows // 8)
        for i in range(8):
            n = min(per, rows - i * per)
            k = np.round(rng.normal(0.0, 100.0, n), 2)  # about 60k distinct values: ties
            k[rng.random(n) < 0.001] = np.nan
            words = np.array([f"w{j:04d}" for j in range(1000)], dtype=object)
            table = pa.table(
                {
                    "id": np.arange(i * per, i * per + n, dtype=np.int64),
                    "k": pa.array(k, mask=rng.random(n) < 0.01),
                    "s": pa.array(words[rng.integers(0, 1000, n)], pa.string()),
                    "v": rng.integers(0, 1 << 40, n),
                }
            )
            pq.write_table(table, tmp / f"part-{i}.parquet", row_group_size=1 << 20)
        tmp.rename(folder)
    return folder


def _exchange_id(spark: Any) -> int:
    """The id ``explain(mode="formatted")`` gives the query's one exchange."""
    printed = io.StringIO()
    with redirect_stdout(printed):
        spark.sql(QUERY).explain(mode="formatted")
    (found,) = re.findall(r"^\((\d+)\) Exchange$", printed.getvalue(), re.M)
    return int(found)


def _ids(table: pa.Table) -> np.ndarray:
    return table.column("id").to_numpy()


def measure(rows: int, runs: int, data: Path = DATA) -> dict[str, Any]:
    """Every round (round 0 the warm-up) in one session; the figures."""
    path = dataset(rows, data)
    timings: dict[str, list[float]] = {s: [] for s in SYSTEMS}
    equal: dict[str, bool] = {"parallel": True, "single": True}
    profiles: dict[str, str] = {}
    subtasks: dict[str, int] = {}
    with hs.Session(CONFIG) as session:
        spark = session.spark
        spark.read.parquet(str(path)).createOrReplaceTempView("o")
        edge = f"exchange_{_exchange_id(spark)}"
        configs = {
            "parallel": hs.load_config(CONFIG),
            "single": hs.load_config({**CONFIG, "edges": {edge: {"partitions": 1}}}),
        }

        def run_spark() -> pa.Table:
            return pa.Table.from_batches(spark.sql(QUERY)._collect_as_arrow())

        def run_engine(system: str) -> pa.Table:
            session.config = configs[system]
            stream = session.sql(QUERY, name=f"order-by-{system}")
            fell_back = stream.explain_data()["spark_subtrees"]
            if fell_back:
                raise AssertionError(f"ran in Spark: {fell_back}")
            result = stream.collect()
            start = min(t.started_at for t in result.tasks)
            tasks = [
                f"  {t.vertex}[{t.subtask}] on executor {t.executor_index}: "
                f"{t.started_at - start:5.2f} s -> {t.finished_at - start:5.2f} s, "
                f"CPU {t.process_cpu_seconds or t.cpu_seconds:.2f} s"
                for t in sorted(result.tasks, key=lambda t: t.started_at)
            ]
            profiles[system] = "\n".join([str(result.profile()), "Tasks:", *tasks])
            subtasks[system] = result.vertices["result"].subtasks
            return result.table

        want: np.ndarray | None = None
        for round_ in range(runs + 1):  # round 0: the warm-up
            # Spark first in every round (its answer is the check); the engine's two in
            # turns, so that neither always follows the other's job
            engine = ["parallel", "single"] if round_ % 2 else ["single", "parallel"]
            for system in ["spark", *engine]:
                started = time.perf_counter()
                table = run_spark() if system == "spark" else run_engine(system)
                seconds = time.perf_counter() - started
                if system == "spark":
                    want = _ids(table)
                else:
                    assert want is not None
                    equal[system] = equal[system] and bool(np.array_equal(_ids(table), want))
                del table
                if round_:
                    timings[system].append(seconds)
                print(f"round {round_}: {system:>8} {seconds:7.2f} s", flush=True)
    medians = {s: statistics.median(timings[s] or [float("nan")]) for s in SYSTEMS}
    ratios = {
        "parallel_over_single": medians["parallel"] / medians["single"],
        "parallel_over_spark": medians["parallel"] / medians["spark"],
        "single_over_spark": medians["single"] / medians["spark"],
    }
    return {
        "rows": rows,
        "query": QUERY,
        "runs": runs,
        "seconds": timings,
        "median_seconds": medians,
        "ratios": ratios,
        "sorting_subtasks": subtasks,
        "equal_to_spark": equal,
        "profiles": profiles,
        "targets": [
            target("ORDER BY: parallel / single-task <= 0.6x", ratios["parallel_over_single"], 0.6)
        ],
    }
