"""Issue 26: start-up. ``hs.Session()`` against a bare ``ray.init``, Spark's start phase by
phase on each backend, and a warm ``./dev main`` from outside.

**Why child processes**: a start-up is measured once per process (Ray, the JVMs and the
imports are warm after it), so every run is a fresh interpreter, and the parent only
starts children and reads the JSON line each prints.  Nothing runs in parallel: the
machine has 2 cores.  Children never inherit ``RAY_ADDRESS``: every start is an embedded
Ray.

* **(a) Ray against Session**: ``--runs`` pairs of children, in turn (ray, session, ray,
  session, ...), so a drift of the machine's speed hits both sides.  Each times from
  before its first import (``import ray``, or ``import hybrid_shuffle`` then
  ``hs.Session()``, which imports the engine and ``ray``) to the return of
  ``ray.init(num_cpus=2, object_store_memory=...)`` or ``hs.Session`` with the same
  ``ray:`` settings.  The session child also times what ``Session()`` no longer waits
  for: the executor actors answering (``session.executor_info``), after it returned.
  Printed: medians, min-max, the ratio of the medians and the median of the pairs'
  ratios.
* **(b) Spark's start** (``spark`` among ``--systems``): ``--runs`` children per
  virtualenv that has pyspark (``.venv``: RayDP on Spark 3.5; ``.venv-spark4``: local
  mode on Spark 4), each one
  ``hs.Session`` (the main job's ``configs/main.yaml`` settings for Spark: one executor
  of both cores) and then ``session.spark``, split into phases by wrapping the
  functions that do them: on RayDP the app master (a Ray actor that launches a JVM,
  which joins Ray through Ray's Java runtime), the driver's JVM and SparkContext
  (``spark-submit`` through py4j), the driver's JVM joining Ray (RayDP's
  ``fault_tolerant_mode``, off since issue 26), and after ``session.spark`` returned, the
  executors registering (Ray Java actors, a JVM each: the first job waits for them) and
  what ``spark.prewarm: true`` would add (``SparkBridge._prewarm``, off by default); on
  local mode the driver's JVM and SparkContext, and the prewarm.  Medians per phase.
* **(c) ``./dev main``** (``dev-main`` among ``--systems``): ``--runs`` timed runs after
  one untimed one, wall time from outside (``.venv`` must exist: warm means no
  install), with the phases the job prints on its ``wall time:`` line.

Every figure carries the load average it was taken under.  Run it under the benchmark
lock; results go to ``benchmarks/results/startup/``:

    flock /tmp/hs-bench.lock .venv/bin/python -m benchmarks run startup
    flock /tmp/hs-bench.lock .venv/bin/python -m benchmarks run startup --runs 7 \
        --systems engine,ray
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["measure", "report"]

ROOT = Path(__file__).resolve().parent.parent
CONFIG = str(ROOT / "configs" / "main.yaml")
#: the virtualenvs whose Spark is timed, and the backend each one gets by default
PYTHONS = {
    "raydp": ROOT / ".venv" / "bin" / "python",
    "local": ROOT / ".venv-spark4" / "bin" / "python",
}
#: the resources of both sides of (a), and of every child
CPUS = 2
OBJECT_STORE = 512 << 20
#: the line of a child's stdout that carries its result (Ray and Spark may print too)
MARK = "STARTUP-JSON "
#: the phases of (b), in the order they happen, with what each one is
PHASES = {
    "session": "hs.Session() (Ray, the engine's actors created)",
    "app_master": "RayDP app master: Ray actor, its JVM joins Ray",
    "driver": "driver JVM (spark-submit, py4j) and SparkContext",
    "driver_joins_ray": "driver JVM joins Ray (RayDP fault_tolerant_mode)",
    "executors": "executors registered (Ray Java actors, a JVM each; after)",
    "prewarm": "spark.prewarm: true (Arrow export x3, hand-back; after)",
}


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _log(message: str) -> None:
    print(f"[startup] {message}", file=sys.stderr, flush=True)


def _emit(result: dict[str, Any]) -> None:
    print(MARK + json.dumps(result), flush=True)


# -- children --------------------------------------------------------------------------


def child_ray() -> dict[str, Any]:
    """(a), bare side: ``import ray`` and ``ray.init`` as a user would call it."""
    started = time.perf_counter()
    import ray

    ray.init(
        address="local",  # a Ray of its own, as hs.Session() starts, whatever else runs here
        num_cpus=CPUS,
        object_store_memory=OBJECT_STORE,
        include_dashboard=False,
        log_to_driver=False,
    )
    up = time.perf_counter() - started
    ray.shutdown()
    return {"start": up, "total": time.perf_counter() - started}


def child_session() -> dict[str, Any]:
    """(a), engine side: ``hs.Session()`` with the same Ray resources; then how long the
    executors take to answer after it returned."""
    started = time.perf_counter()
    import hybrid_shuffle as hs

    session = hs.Session({"ray": {"num_cpus": CPUS, "object_store_memory": OBJECT_STORE}})
    up = time.perf_counter() - started
    session.executor_info  # noqa: B018 -- waits for every executor to answer
    executors = time.perf_counter() - started
    session.close()
    return {"start": up, "executors_up": executors, "total": time.perf_counter() - started}


class _Phases:
    """Wraps the functions that do Spark's start, recording when each ran."""

    def __init__(self) -> None:
        self.origin = time.perf_counter()
        self.spans: dict[str, list[float]] = {}

    @contextlib.contextmanager
    def span(self, name: str) -> Iterator[None]:
        began = time.perf_counter() - self.origin
        try:
            yield
        finally:
            self.spans[name] = [began, time.perf_counter() - self.origin]

    def wrap(self, owner: Any, attribute: str, name: str) -> None:
        original = getattr(owner, attribute)

        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.span(name):
                return original(*args, **kwargs)

        setattr(owner, attribute, timed)


def child_spark(config: str) -> dict[str, Any]:
    """(b): the session and its Spark, phase by phase (see the module docstring)."""
    phases = _Phases()
    import hybrid_shuffle as hs

    with phases.span("session"):
        session = hs.Session(config)
    backend = session.bridge.backend.name
    if backend == "raydp":
        from raydp.spark import ray_cluster

        cluster = ray_cluster.SparkCluster
        phases.wrap(cluster, "_set_up_master", "app_master")
        phases.wrap(cluster, "get_spark_session", "driver")
        phases.wrap(cluster, "connect_spark_driver_to_ray", "driver_joins_ray")
    else:
        from pyspark.sql import SparkSession

        phases.wrap(SparkSession.Builder, "getOrCreate", "driver")
    began = time.perf_counter()
    try:
        spark = session.spark
        spark_seconds = time.perf_counter() - began
        if backend == "raydp":  # registering in the background: the first job waits for them
            with phases.span("executors"):
                status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus
                wanted = session.config.spark.executors + 1  # the driver counts as one
                while status().size() < wanted:
                    time.sleep(0.02)
        with phases.span("prewarm"):  # what spark.prewarm: true adds (off by default)
            session.bridge._prewarm(spark)
    finally:
        session.close()
    import pyspark

    return {
        "backend": backend,
        "pyspark": pyspark.__version__,
        "spans": phases.spans,
        "session_seconds": phases.spans["session"][1] - phases.spans["session"][0],
        "spark_seconds": spark_seconds,
        "total": time.perf_counter() - phases.origin,
    }


# -- the parent ------------------------------------------------------------------------


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)  # an embedded Ray, always
    return env


def _child(python: Path, *args: str, timeout: float = 600) -> dict[str, Any]:
    cmd = [str(python), "-m", "benchmarks.startup", "--child", *args]
    done = subprocess.run(
        cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, text=True, timeout=timeout
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {done.returncode}); see its stderr")
    result: dict[str, Any] = json.loads(lines[-1][len(MARK) :])
    result["load"] = _load()
    return result


def _stats(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def ray_against_session(runs: int) -> dict[str, Any]:
    """(a): ``runs`` pairs, in turn."""
    pairs = []
    for i in range(runs):
        ray = _child(PYTHONS["raydp"], "ray")
        session = _child(PYTHONS["raydp"], "session")
        _log(
            f"pair {i + 1}/{runs}: ray.init {ray['start']:.2f} s, hs.Session() "
            f"{session['start']:.2f} s (executors up at {session['executors_up']:.2f} s), "
            f"load {session['load'][0]}"
        )
        pairs.append({"ray": ray, "session": session})
    ray_s = [p["ray"]["start"] for p in pairs]
    session_s = [p["session"]["start"] for p in pairs]
    return {
        "pairs": pairs,
        "ray_init": _stats(ray_s),
        "session": _stats(session_s),
        "executors_up": _stats([p["session"]["executors_up"] for p in pairs]),
        "ratio_of_medians": statistics.median(session_s) / statistics.median(ray_s),
        "median_pair_ratio": statistics.median(
            [s / r for s, r in zip(session_s, ray_s, strict=True)]
        ),
    }


def spark_phases(runs: int, config: str) -> dict[str, Any]:
    """(b): per virtualenv with a Spark, ``runs`` children one after the other."""
    out: dict[str, Any] = {}
    for name, python in PYTHONS.items():
        if not python.exists():
            _log(f"{python} does not exist: no {name} figures")
            continue
        results = []
        for i in range(runs):
            result = _child(python, "spark", "--config", config)
            _log(
                f"{result['backend']} {i + 1}/{runs}: session.spark "
                f"{result['spark_seconds']:.2f} s, load {result['load'][0]}"
            )
            results.append(result)
        durations: dict[str, list[float]] = {}
        for result in results:
            for phase, (began, ended) in result["spans"].items():
                durations.setdefault(phase, []).append(ended - began)
        out[results[0]["backend"]] = {
            "pyspark": results[0]["pyspark"],
            "runs": results,
            "phases": {p: _stats(v) for p, v in durations.items()},
            "spark": _stats([r["spark_seconds"] for r in results]),
        }
    return out


def dev_main(runs: int, warmup: int) -> dict[str, Any]:
    """(c): ``./dev main`` timed from outside; its printed phases kept."""
    walls: list[float] = []
    printed: list[str] = []
    for i in range(warmup + runs):
        began = time.perf_counter()
        done = subprocess.run(
            [str(ROOT / "dev"), "main"],
            cwd=ROOT,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=900,
        )
        wall = time.perf_counter() - began
        if done.returncode != 0:
            raise RuntimeError(f"./dev main failed (exit {done.returncode}):\n{done.stdout}")
        line = next((x for x in done.stdout.splitlines() if x.startswith("wall time")), "")
        which = "warm-up" if i < warmup else f"run {i + 1 - warmup}/{runs}"
        _log(f"./dev main {which}: {wall:.2f} s, load {_load()[0]}; {line}")
        if i >= warmup:
            walls.append(wall)
            printed.append(line)
    return {"wall": _stats(walls), "walls": walls, "printed": printed} if walls else {}


def _cell(stats: dict[str, float]) -> str:
    return f"{stats['median']:6.2f} s ({stats['min']:.2f}-{stats['max']:.2f})"


def report(summary: dict[str, Any]) -> list[str]:
    a = summary["ray_against_session"]
    lines = [
        f"Start-up (issue 26), {CPUS} Ray CPUs, object store {OBJECT_STORE >> 20} MiB, "
        f"load average {summary['load_before']} before, {summary['load_after']} after",
        f"(a) fresh process, imports included, median (min-max) of {len(a['pairs'])} pairs",
        f"  {'bare import ray + ray.init':<48} {_cell(a['ray_init'])}",
        f"  {'import hybrid_shuffle + hs.Session()':<48} {_cell(a['session'])}",
        f"  {'  ... and its executors answered':<48} {_cell(a['executors_up'])}",
        f"  Session / ray.init: {a['ratio_of_medians']:.2f}x (ratio of medians), "
        f"{a['median_pair_ratio']:.2f}x (median of the pairs' ratios)",
    ]
    for backend, b in summary.get("spark_phases", {}).items():
        lines.append(
            f"(b) Spark {b['pyspark']} ({backend}): session.spark {_cell(b['spark'])}, "
            f"median of {len(b['runs'])} runs"
        )
        for phase, label in PHASES.items():
            if phase in b["phases"]:
                lines.append(f"  {label:<60} {_cell(b['phases'][phase])}")
    c = summary.get("dev_main")
    if c:
        lines.append(f"(c) ./dev main, warm: wall {_cell(c['wall'])}, {len(c['walls'])} runs")
        lines.extend(f"  {line}" for line in c["printed"])
    return lines


def measure(runs: int, spark_runs: int, main_runs: int, config: str = CONFIG) -> dict[str, Any]:
    """(a), (b) and, unless ``main_runs`` is 0, (c): the summary."""
    started = time.time()
    summary: dict[str, Any] = {"load_before": _load()}
    summary["ray_against_session"] = ray_against_session(runs)
    if spark_runs > 0:
        summary["spark_phases"] = spark_phases(spark_runs, config)
    if main_runs > 0:
        summary["dev_main"] = dev_main(main_runs, 1)
    summary["load_after"] = _load()
    summary["seconds"] = time.time() - started
    return summary


if __name__ == "__main__" and sys.argv[1:2] == ["--child"]:  # a child of ``_child``
    which = sys.argv[2]
    config = sys.argv[4] if sys.argv[3:4] == ["--config"] else CONFIG
    _emit({"ray": child_ray, "session": child_session}[which]() if which != "spark"
          else child_spark(config))  # fmt: skip
