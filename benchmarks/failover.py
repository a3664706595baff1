"""Issue 11: a 10M-row aggregation with one executor killed mid-job, per mode and service,
and what attempt tracking costs on the happy path against the engine before issue 11.

The job (both halves): a seeded table of ``rows`` rows (``k``: int64, 100,000
uniform keys; ``v``: int64 in [0, 1000); ``w``: float64), put once as ``blocks``
separately owned slices, read by ``from_arrow(refs, parallelism=2)``, a
pass-through ``map_batches`` (the kill gate, chained with the source), then
``key_by("k", mode=M)`` and ``aggregate({"v": "sum", "w": "count"},
combine=False)``.  ``combine=False`` ships every row through the exchange (24
bytes a row, 229 MiB at 10M rows): with the map-side combine the edge would
carry only partials emitted when each producer's input ends, so there would be
nothing to kill "mid-write" and next to nothing to re-read.  Every result,
killed or not, is compared row for row with single-process pyarrow
(``group_by`` on the same table); a wrong answer raises and fails the run.

**Failover matrix** (``run``): one embedded Ray (``num_cpus=2``, the
(3 GiB object store, 300 MiB under scale 1), the blocks put once, then per shuffle service a
session with ``SLOTS`` = 4 slots (``parallelism: 2``, ``failover: {backoff:
0.1 s}``; max_attempts stays 3).  4 slots, not 2: with 2, a slot takes a
hybrid consumer only once a producer has left it, so hybrid consumers would
start only when producers finish (as under blocking) and a kill would never
find them reading; with 4, the 2 producers and 2 consumers each run in an
executor of their own.  Per mode: a warm-up, then ``runs`` times a happy run,
a killed run and an untimed happy run (medians of each kind).  In a killed
run the gate of the first source subtask to reach its ``kill_batch``-th batch
(half of a subtask's batches) claims a marker file, writes its process id and
waits (at most 30 s); a driver thread kills that executor with ``ray.kill`` as
soon as the id appears.  So the kill lands halfway through one producer's
input, while it writes its partition, in every mode.  From the reports of the
successful attempts (``JobResult.tasks``):

* **recomputed**: bytes and rows written by tasks whose attempt is > 0 (on the
  exchange edge ``by_k`` and on the job's result), and the source rows the
  restarted source subtasks read again from the driver's blocks;
* **re-read**: bytes and rows that tasks at attempt > 0 read from partitions
  that were *not* written again, i.e. whose producers finished at attempt 0.
  ``ReadMetrics`` counts a consumer's bytes per edge, not per producer: where
  a restarted consumer read from attempt-0 and restarted producers alike, its
  bytes are split by the producers' shares of the bytes written on the edge
  (a hash of 100,000 uniform keys splits every producer's rows evenly over the
  consumers), and the row is marked estimated;
* the restarted tasks (``vertex[subtask]#attempt``), ``JobResult.restarts``,
  which executor was killed, and the seconds from the kill to a replacement
  executor being started (``session.pool.replaced`` going up; the scheduler does not wait
  for it to answer) and to the first
  restarted task's start.

The work a killed attempt did before it died is in no report: it shows only in
the time.

**Attempt tracking on the happy path** (``overhead``): the same job, happy
path, executor-local, each mode, on this tree and on the engine as it was
before issue 11 (commit ``BASELINE``), side by side in the same run.  The old
engine is checked out with ``git worktree add --detach`` into a temporary
folder (removed afterwards), with ``hybrid_shuffle/actors -> ../actors``
linked inside it (``pyproject.toml`` maps ``actors/`` to
``hybrid_shuffle.actors``; without the link the editable install's finder
would hand the old package today's actors).  Each side is a long-lived worker
process running this file with ``--serve`` (its own embedded Ray, session
config identical but for ``failover``, which the old engine does not know),
started with ``PYTHONPATH`` and the working directory at its tree; the worker
reports where ``hybrid_shuffle`` and ``hybrid_shuffle.actors`` were imported
from, in the driver and inside an executor, and that is checked before timing.
After one warm-up per mode on each side, the two run the job alternately,
``pairs`` times per mode, the side going first alternating too; the claim is
the median of the per-pair ratios new / old (target <= 1.05).  Both sides'
results must hash the same as pyarrow's.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
MODES = ("pipelined", "blocking", "hybrid-selective", "hybrid-full")
SERVICES = ("executor-local", "external")
#: the engine before issue 11 (the commit before its first change, 3da49ec)
BASELINE = "7c5ef4c"
SLOTS = 4
PARALLELISM = 2
KEYS = 100_000
SEED = 42
BACKOFF = "0.1 s"
NAMESPACE = "hybrid-shuffle"
SOURCE, GATE, EDGE, SINK = "table", "gate", "by_k", "totals"
AGGREGATE = {"v": "sum", "w": "count"}
RESULT_COLUMNS = ("k", "v_sum", "w_count")
#: the gate's longest wait for its own kill (the kill lands within milliseconds)
GATE_WAIT = 30.0
#: the workers' longest answer (a job, or a worker's start with its Ray)
WORKER_TIMEOUT = 600.0
WORKLOAD = "failover"
OVERHEAD = "attempt tracking vs baseline"
TARGET = 1.05


# -- data and the job (also run by the --serve workers, under either engine) ---------------


def make_table(rows: int, seed: int = SEED) -> pa.Table:
    """``k`` as ``benchmarks.data.make_table(rows, "uniform")`` draws it, plus an int64
    value (its sums are exact, so results compare row for row) and a float64 one."""
    rng = np.random.default_rng(seed)
    k = rng.integers(0, KEYS, rows, dtype=np.int64)
    v = rng.integers(0, 1000, rows, dtype=np.int64)
    return pa.table({"k": k, "v": v, "w": rng.random(rows)})


def blocks(table: pa.Table, count: int) -> list[pa.Table]:
    """``count`` contiguous, separately owned slices (``benchmarks.data.blocks``)."""
    rows = -(-table.num_rows // count)
    return [table.slice(i * rows, rows).combine_chunks() for i in range(count)]


def reference(table: pa.Table) -> pa.Table:
    """Single-process pyarrow: the answer every run is held to."""
    out = table.group_by("k").aggregate([("v", "sum"), ("w", "count")])
    return out.select(list(RESULT_COLUMNS)).sort_by("k")


def digest(table: pa.Table) -> str:
    """A hash of the result's values, sorted by key, each column as int64 (what the old
    and the new engine must agree on, and pyarrow with them)."""
    t = table.select(list(RESULT_COLUMNS)).sort_by("k")
    h = hashlib.sha256(str(t.num_rows).encode())
    for name in RESULT_COLUMNS:
        h.update(name.encode())
        h.update(t[name].cast(pa.int64()).to_numpy().tobytes())
    return h.hexdigest()


class Gate:
    """The pass-through ``map_batches`` function.  Armed (``directory`` set), the first
    task anywhere to reach its ``at_batch``-th batch claims ``directory/claim``, writes
    its process id to ``directory/pid`` and waits to be killed (at most ``GATE_WAIT``
    seconds, less if the driver writes ``directory/release``).  Later attempts find the
    claim taken and pass everything through.  Each task gets its own copy (deployments
    are pickled), so ``batches`` counts one task's batches."""

    def __init__(self, directory: str | None = None, at_batch: int = 0) -> None:
        self.directory = directory
        self.at_batch = at_batch
        self.batches = 0

    def __call__(self, table: pa.Table) -> pa.Table:
        if self.directory is None:
            return table
        self.batches += 1
        if self.batches == self.at_batch and self._claim():
            marker = os.path.join(self.directory, "pid")
            with open(marker + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.replace(marker + ".tmp", marker)
            release = os.path.join(self.directory, "release")
            deadline = time.monotonic() + GATE_WAIT
            while time.monotonic() < deadline and not os.path.exists(release):
                time.sleep(0.002)
        return table

    def _claim(self) -> bool:
        assert self.directory is not None
        try:
            os.close(os.open(os.path.join(self.directory, "claim"), os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return False
        return True


def build(session: Any, refs: Sequence[Any], mode: str, gate: Gate) -> Any:
    job = session.job(f"failover-{mode}")
    return (
        job.from_arrow(list(refs), name=SOURCE, parallelism=PARALLELISM)
        .map_batches(gate, name=GATE)
        .key_by("k", edge=EDGE, mode=mode)
        .aggregate(AGGREGATE, name=SINK, combine=False)
    )


def session_config(service: str, failover: bool = True) -> dict[str, Any]:
    config: dict[str, Any] = {"parallelism": PARALLELISM, "shuffle": {"service": service}}
    if failover:
        config["failover"] = {"backoff": BACKOFF}
    return config


def init_ray(object_store: int) -> None:
    """A Ray of our own (``address="local"``): with none given, ``ray.init`` joins a
    cluster another process on this machine started with ``ray start`` or
    ``cluster_utils``, if there is one."""
    import ray

    ray.init(
        address="local",
        namespace=NAMESPACE,
        num_cpus=2,
        object_store_memory=object_store,
        include_dashboard=False,
        logging_level="ERROR",
    )


# -- the failover matrix ---------------------------------------------------------------------


class WrongResultError(AssertionError):
    """A run's result differs from pyarrow's: the benchmark fails."""


def check(result_table: pa.Table, want: pa.Table, what: str) -> None:
    got = result_table.select(list(RESULT_COLUMNS)).sort_by("k")
    if got.num_rows != want.num_rows or not got.equals(want.cast(got.schema)):
        mismatch = "?"
        if got.num_rows == want.num_rows:
            for name in RESULT_COLUMNS:
                a, b = got[name].to_numpy(), want[name].cast(got[name].type).to_numpy()
                bad = np.flatnonzero(a != b)
                if len(bad):
                    i = int(bad[0])
                    mismatch = f"first differing row {i} in {name}: {a[i]} vs {b[i]}"
                    break
        raise WrongResultError(
            f"{what}: the result differs from pyarrow's group_by ({got.num_rows:,} rows vs "
            f"{want.num_rows:,}; {mismatch})"
        )


class Killer(threading.Thread):
    """Waits for the gate's process id and kills the executor running in that process."""

    def __init__(self, session: Any, directory: str) -> None:
        super().__init__(daemon=True)
        self.session, self.directory = session, directory
        self.index: int | None = None
        self.killed_at = 0.0  # epoch seconds, as the task reports
        #: when the session's pool started a replacement (epoch seconds; 0: never)
        self.replaced_at = 0.0
        self.error: str | None = None

    def run(self) -> None:
        import ray

        marker = os.path.join(self.directory, "pid")
        deadline = time.monotonic() + WORKER_TIMEOUT
        try:
            while not os.path.exists(marker):
                if time.monotonic() > deadline:
                    self.error = "the gate never fired"
                    return
                time.sleep(0.002)
            pid = int(Path(marker).read_text())
            victims = [i for i, x in enumerate(self.session.executor_info) if x["pid"] == pid]
            if not victims:
                self.error = f"no executor runs in process {pid}"
                return
            replaced = self.session.pool.replaced
            self.index = victims[0]
            self.killed_at = time.time()
            ray.kill(self.session.executors[self.index])
        finally:
            if self.index is None:
                Path(self.directory, "release").touch()
        deadline = time.monotonic() + 60  # the replacement answers within a second or two
        while time.monotonic() < deadline and self.session.pool.replaced == replaced:
            time.sleep(0.002)
        if self.session.pool.replaced != replaced:
            self.replaced_at = time.time()


def batches_per_subtask(parts: Sequence[pa.Table], buffer_size: int) -> list[int]:
    """How many batches each source subtask feeds its chain (``runtime/task.py``'s
    ``_read_source``: slices of about ``buffer_size`` bytes per block)."""
    counts = [0] * PARALLELISM
    for i, block in enumerate(parts):
        rows = max(1, block.num_rows * buffer_size // max(block.nbytes, 1))
        counts[i % PARALLELISM] += -(-block.num_rows // rows)
    return counts


def timeline(result: Any, started: float) -> list[dict[str, Any]]:
    """Each successful task: attempt, executor, start and end in seconds into the job."""
    return [
        {
            "task": f"{t.vertex}[{t.subtask}]",
            "attempt": t.attempt,
            "executor": t.executor_index,
            "start": round(t.started_at - started, 4),
            "end": round(t.finished_at - started, 4),
        }
        for t in sorted(result.tasks, key=lambda t: t.started_at)
    ]


def recovery(result: Any, killer: Killer, split_rows: Sequence[int]) -> dict[str, Any]:
    """What a killed run did again, from the successful attempts' reports."""
    tasks = list(result.tasks)
    again = [t for t in tasks if t.attempt > 0]
    written: dict[str, dict[str, int]] = {}
    for t in again:
        for w in t.writes:
            e = written.setdefault(w.edge, {"bytes": 0, "rows": 0})
            e["bytes"] += w.bytes
            e["rows"] += w.rows
    source_rows = sum(split_rows[t.subtask] for t in again if t.vertex.split("->")[0] == SOURCE)
    reread_bytes = reread_rows = 0.0
    estimated = False
    for t in again:
        for r in t.reads:
            producers = [(p.attempt, w.bytes) for p in tasks for w in p.writes if w.edge == r.edge]
            total = sum(b for _, b in producers)
            kept = sum(b for a, b in producers if a == 0)
            share = kept / total if total else 0.0
            estimated = estimated or 0.0 < share < 1.0
            reread_bytes += r.bytes * share
            reread_rows += r.rows * share
    first_restart = min((t.started_at for t in again), default=0.0)
    return {
        "restarts": result.restarts,
        "killed_executor": killer.index,
        "restarted_tasks": sorted(f"{t.vertex}[{t.subtask}]#{t.attempt}" for t in again),
        "recomputed_bytes": sum(e["bytes"] for e in written.values()),
        "recomputed_rows": sum(e["rows"] for e in written.values()),
        "recomputed_by_edge": written,
        "recomputed_source_rows": source_rows,
        "reread_bytes": round(reread_bytes),
        "reread_rows": round(reread_rows),
        "reread_estimated": estimated,
        "kill_to_restart_seconds": first_restart - killer.killed_at if again else None,
        "kill_to_replacement_seconds": (
            killer.replaced_at - killer.killed_at if killer.replaced_at else None
        ),
    }


def _job_seconds(
    session: Any, refs: Sequence[Any], mode: str, gate: Gate
) -> tuple[float, Any, float]:
    """Seconds, the result, and when the job started (epoch seconds)."""
    import gc

    gc.collect()
    epoch, started = time.time(), time.perf_counter()
    result = build(session, refs, mode, gate).collect()
    return time.perf_counter() - started, result, epoch


def _killed_run(
    session: Any, refs: Sequence[Any], mode: str, at_batch: int, split_rows: Sequence[int]
) -> tuple[float, Any, dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="hs-failover-") as directory:
        killer = Killer(session, directory)
        replaced = session.pool.replaced
        killer.start()
        try:
            seconds, result, started = _job_seconds(session, refs, mode, Gate(directory, at_batch))
        finally:
            Path(directory, "release").touch()
            killer.join(10)
    if killer.index is None:
        raise RuntimeError(f"{mode}: the kill did not happen ({killer.error})")
    info = recovery(result, killer, split_rows)
    info["kill_at_seconds"] = killer.killed_at - started  # into the job
    info["timeline"] = timeline(result, started)
    info["replaced_executors"] = session.pool.replaced - replaced
    if result.restarts < 1:
        raise RuntimeError(f"{mode}: an executor was killed mid-job but nothing restarted")
    return seconds, result, info


def run(
    rows: int,
    runs: int,
    modes: Sequence[str] = MODES,
    services: Sequence[str] = SERVICES,
    block_count: int = 8,
    object_store: int = 3 << 30,
    baseline: str | None = BASELINE,
    pairs: int = 9,
) -> tuple[list[Any], dict[str, Any]]:
    """The failover matrix, then (unless ``baseline`` is None) the overhead pairs.

    Must be called while no Ray is initialized in this process."""
    import ray

    import hybrid_shuffle as hs
    from benchmarks.harness import Measurement

    table = make_table(rows)
    parts = blocks(table, block_count)
    want = reference(table)
    split_rows = [sum(b.num_rows for b in parts[i::PARALLELISM]) for i in range(PARALLELISM)]
    measured: list[Measurement] = []
    matrix: list[dict[str, Any]] = []
    state = tree_state()
    init_ray(object_store)
    try:
        refs = [ray.put(b) for b in parts]
        for service in services:
            with hs.Session(session_config(service), slots=SLOTS) as session:
                per_subtask = batches_per_subtask(parts, session.config.shuffle.buffer_size)
                at_batch = max(1, min(per_subtask) // 2)
                for mode in modes:
                    happy, killed, row = _mode(
                        session, refs, mode, want, runs, at_batch, split_rows
                    )
                    row["batches_per_subtask"] = per_subtask
                    measured += [happy, killed]
                    matrix.append(row)
                    _log(row)
    finally:
        ray.shutdown()
    overhead: dict[str, Any] | None = None
    if baseline:
        overhead = run_overhead(
            rows, block_count, modes, pairs, object_store, baseline, digest(want)
        )
        for row in overhead["modes"]:
            for side, key in (("engine", "new_seconds"), (baseline, "old_seconds")):
                m = Measurement(OVERHEAD, f"{side} {row['mode']}", rows, "executor-local")
                m.seconds = list(row[key])
                m.note = "happy path, paired runs in two worker processes"
                measured.append(m)
    summary = {
        "rows": rows,
        "runs": runs,
        "blocks": block_count,
        "slots": SLOTS,
        "parallelism": PARALLELISM,
        "config": {s: session_config(s) for s in services},
        "job": (
            f"from_arrow({block_count} blocks, parallelism={PARALLELISM}) -> map_batches(gate)"
            f" -> key_by('k', mode) -> aggregate({AGGREGATE}, combine=False)"
        ),
        "matrix_tree": state,
        "matrix": matrix,
        "overhead": overhead,
    }
    return measured, summary


def _mode(
    session: Any,
    refs: Sequence[Any],
    mode: str,
    want: pa.Table,
    runs: int,
    at_batch: int,
    split_rows: Sequence[int],
) -> tuple[Any, Any, dict[str, Any]]:
    """One mode in one session: a warm-up, then ``runs`` times a happy run, a killed run
    and an untimed happy run (the killed executor's replacement runs its first job there,
    not in the next timed run).  Each killed run follows its happy run at once, so a
    burst of load from elsewhere on the machine tends to hit both."""
    from benchmarks.harness import Measurement
    from benchmarks.memory import peak_memory

    service = session.config.shuffle.service
    rows, what = sum(split_rows), f"{service} {mode}"
    happy = Measurement(WORKLOAD, f"engine {mode}: happy", rows, service)
    killed = Measurement(WORKLOAD, f"engine {mode}: killed", rows, service)
    load = os.getloadavg()[0]
    _, result, _ = _job_seconds(session, refs, mode, Gate())  # warm-up
    check(result.table, want, f"{what}, warm-up")
    details, happy_timeline = [], []
    for _ in range(runs):
        with peak_memory() as peak:
            seconds, result, started = _job_seconds(session, refs, mode, Gate())
        check(result.table, want, f"{what}, happy path")
        if result.restarts:
            raise RuntimeError(f"{what}: the happy path restarted")
        happy.seconds.append(seconds)
        happy.peak_bytes = max(happy.peak_bytes, peak["peak_bytes"])
        happy_timeline = timeline(result, started)
        with peak_memory() as peak:
            seconds, result, info = _killed_run(session, refs, mode, at_batch, split_rows)
        check(result.table, want, f"{what}, killed run")
        killed.seconds.append(seconds)
        killed.peak_bytes = max(killed.peak_bytes, peak["peak_bytes"])
        details.append({"seconds": seconds, **info})
        _, result, _ = _job_seconds(session, refs, mode, Gate())  # the replacement's first
        check(result.table, want, f"{what}, after a killed run")
    row = _matrix_row(service, mode, happy, killed, details, at_batch)
    row["happy_timeline"] = happy_timeline
    row["load_average_1min"] = [load, os.getloadavg()[0]]
    return happy, killed, row


def _matrix_row(
    service: str,
    mode: str,
    happy: Any,
    killed: Any,
    details: list[dict[str, Any]],
    at_batch: int,
) -> dict[str, Any]:
    h, k = happy.median, killed.median

    def med(key: str) -> float:
        values = [d[key] for d in details if d[key] is not None]
        return float(statistics.median(values)) if values else float("nan")

    return {
        "service": service,
        "mode": mode,
        "kill_batch": at_batch,
        "happy_seconds": happy.seconds,
        "killed_seconds": killed.seconds,
        "happy_median_seconds": h,
        "killed_median_seconds": k,
        "recovery_seconds": k - h,
        "killed_over_happy": k / h,
        "happy_peak_bytes": happy.peak_bytes,
        "killed_peak_bytes": killed.peak_bytes,
        "median_recomputed_bytes": med("recomputed_bytes"),
        "median_recomputed_source_rows": med("recomputed_source_rows"),
        "median_reread_bytes": med("reread_bytes"),
        "median_kill_to_restart_seconds": med("kill_to_restart_seconds"),
        "median_kill_to_replacement_seconds": med("kill_to_replacement_seconds"),
        "runs": details,
    }


def _log(row: dict[str, Any]) -> None:
    print(
        f"[bench] {WORKLOAD} | {row['service']} {row['mode']}: happy "
        f"{row['happy_median_seconds']:.3f} s, killed {row['killed_median_seconds']:.3f} s "
        f"({row['killed_over_happy']:.2f}x), restarts "
        f"{[d['restarts'] for d in row['runs']]}",
        file=sys.stderr,
        flush=True,
    )


# -- attempt tracking against the engine before issue 11 ----------------------------------


@contextmanager
def worktree(commit: str) -> Iterator[Path]:
    """``commit`` checked out in a temporary folder, importable as ``hybrid_shuffle``
    (with its ``actors/`` linked in as ``hybrid_shuffle/actors``); removed afterwards."""
    parent = Path(tempfile.mkdtemp(prefix="hs-base-"))
    tree = parent / "tree"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), commit],
        check=True,
        capture_output=True,
        text=True,
    )
    try:
        link = tree / "hybrid_shuffle" / "actors"
        if not link.exists():
            link.symlink_to(Path("..") / "actors", target_is_directory=True)
        yield tree
    finally:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
            check=False,
            capture_output=True,
        )
        shutil.rmtree(parent, ignore_errors=True)


class Worker:
    """One engine in a process of its own (this file with ``--serve``), asked to run the
    happy-path job one mode at a time."""

    def __init__(self, name: str, tree: Path, rows: int, block_count: int, object_store: int):
        self.name, self.tree = name, tree
        fd, self.log_path = tempfile.mkstemp(prefix=f"hs-{name}-", suffix=".log")
        self.log = os.fdopen(fd, "w")
        env = {**os.environ, "PYTHONPATH": str(tree)}
        env.pop("RAY_ADDRESS", None)
        cmd = [sys.executable, str(Path(__file__).resolve()), "--serve", str(rows)]
        cmd += [str(block_count), str(object_store)]
        self.proc = subprocess.Popen(
            cmd,
            cwd=tree,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        self.hello = self._answer()

    def run(self, mode: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"run {mode}\n")
        self.proc.stdin.flush()
        return self._answer()

    def _answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], WORKER_TIMEOUT)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.close()
            tail = Path(self.log_path).read_text(errors="replace")[-3000:]
            raise RuntimeError(f"worker {self.name} gave no answer; its log ends:\n{tail}")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"worker {self.name}: {answer['error']}")
        return answer

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        os.unlink(self.log_path)


def _check_origin(worker: Worker) -> None:
    """Both the driver and the executors of ``worker`` imported the engine from its tree."""
    tree = worker.tree.resolve()
    for where in ("driver", "executor"):
        for module in ("hybrid_shuffle", "hybrid_shuffle.actors"):
            path = worker.hello[where][module]
            if not Path(path).resolve().is_relative_to(tree):
                raise RuntimeError(
                    f"worker {worker.name}: {where} imported {module} from {path}, not {tree}"
                )


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
    ).stdout


def tree_state() -> dict[str, Any]:
    """The commit this tree is at and its modified tracked files (other people commit to
    it while a run goes on: each half of a run says what it ran)."""
    dirty = _git("status", "--porcelain", "--untracked-files=no").splitlines()
    return {
        "head": _git("rev-parse", "--short", "HEAD").strip(),
        "head_modified_files": sorted(line[3:] for line in dirty if line.strip()),
    }


def run_overhead(
    rows: int,
    block_count: int,
    modes: Sequence[str],
    pairs: int,
    object_store: int,
    commit: str,
    want: str,
) -> dict[str, Any]:
    """Paired happy-path runs, this tree against ``commit``, executor-local."""
    out: dict[str, Any] = {
        "baseline": commit,
        **tree_state(),
        "pairs": pairs,
        "target": TARGET,
        "modes": [],
    }
    with worktree(commit) as tree:
        workers: list[Worker] = []
        try:
            workers.append(Worker(f"old-{commit}", tree, rows, block_count, object_store))
            workers.append(Worker("new", ROOT, rows, block_count, object_store))
            for w in workers:
                _check_origin(w)
            out["imported_from"] = {w.name: w.hello for w in workers}
            old, new = workers
            for mode in modes:
                for w in workers:  # warm-up, and the first check of each side's answer
                    _check_answer(w, w.run(mode), want, mode)
                pairs_seen: list[dict[str, float]] = []
                load = [os.getloadavg()[0]]
                for i in range(pairs):
                    order = (old, new) if i % 2 == 0 else (new, old)
                    answers = {w.name: w.run(mode) for w in order}
                    for w in order:
                        _check_answer(w, answers[w.name], want, mode)
                    pairs_seen.append(
                        {
                            "old": answers[old.name]["seconds"],
                            "new": answers[new.name]["seconds"],
                            "first": order[0].name,
                        }
                    )
                ratios = [p["new"] / p["old"] for p in pairs_seen]
                load.append(os.getloadavg()[0])
                row = {
                    "mode": mode,
                    "old_seconds": [p["old"] for p in pairs_seen],
                    "new_seconds": [p["new"] for p in pairs_seen],
                    "pairs": pairs_seen,
                    "ratios": ratios,
                    "median_ratio": statistics.median(ratios),
                    "old_median_seconds": statistics.median(p["old"] for p in pairs_seen),
                    "new_median_seconds": statistics.median(p["new"] for p in pairs_seen),
                    "load_average_1min": load,
                }
                row["ratio_of_medians"] = row["new_median_seconds"] / row["old_median_seconds"]
                out["modes"].append(row)
                print(
                    f"[bench] {OVERHEAD} | {mode}: new {row['new_median_seconds']:.3f} s, old "
                    f"{row['old_median_seconds']:.3f} s, median pair ratio "
                    f"{row['median_ratio']:.3f}",
                    file=sys.stderr,
                    flush=True,
                )
        finally:
            for w in workers:
                w.close()
    return out


def _check_answer(worker: Worker, answer: dict[str, Any], want: str, mode: str) -> None:
    if answer["digest"] != want:
        raise WrongResultError(
            f"worker {worker.name}, {mode}: the result ({answer['rows']:,} rows) differs from "
            "pyarrow's group_by"
        )


# -- the worker ----------------------------------------------------------------------------


def _origin(_: pa.Table) -> pa.Table:
    """Runs in an executor: where this process imported the engine from."""
    mods = sys.modules
    return pa.table(
        {
            "module": ["hybrid_shuffle", "hybrid_shuffle.actors"],
            "path": [mods["hybrid_shuffle"].__file__, mods["hybrid_shuffle.actors"].__file__],
        }
    )


def serve(rows: int, block_count: int, object_store: int) -> int:
    """``python benchmarks/failover.py --serve ROWS BLOCKS OBJECT_STORE``: one engine, the
    one ``PYTHONPATH`` names.  Reads ``run MODE`` / ``quit`` lines; answers one JSON line
    each on its stdout (anything else printed goes to stderr)."""
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    import ray

    import hybrid_shuffle as hs
    import hybrid_shuffle.actors

    def answer(payload: dict[str, Any]) -> None:
        answers.write(json.dumps(payload) + "\n")

    table = make_table(rows)
    parts = blocks(table, block_count)
    init_ray(object_store)
    try:
        refs = [ray.put(b) for b in parts]
        config = session_config("executor-local", failover=False)
        with hs.Session(config, slots=SLOTS) as session:
            job = session.job("origin")
            probe = job.from_arrow(pa.table({"x": [1]}), name="one", parallelism=1)
            seen = probe.map_batches(_origin, name="origin").collect().table.to_pylist()
            answer(
                {
                    "driver": {
                        "hybrid_shuffle": hs.__file__,
                        "hybrid_shuffle.actors": hybrid_shuffle.actors.__file__,
                    },
                    "executor": {r["module"]: r["path"] for r in seen},
                    "python": sys.version.split()[0],
                }
            )
            for line in sys.stdin:
                command = line.split()
                if not command or command[0] == "quit":
                    break
                try:
                    started = time.perf_counter()
                    result = build(session, refs, command[1], Gate()).collect()
                    seconds = time.perf_counter() - started
                    answer(
                        {
                            "seconds": seconds,
                            "wall_seconds": result.wall_seconds,
                            "rows": result.table.num_rows,
                            "digest": digest(result.table),
                        }
                    )
                except Exception as e:
                    answer({"error": f"{type(e).__name__}: {e}"})
    finally:
        ray.shutdown()
    return 0


# -- the printed table -----------------------------------------------------------------------


if __name__ == "__main__" and sys.argv[1:2] == ["--serve"]:
    # the script's own folder (benchmarks/) must not shadow anything (its profile.py
    # would shadow the standard library's), nor reach the workers' sys.path through Ray
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        sys.path.pop(0)
    sys.exit(serve(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))
