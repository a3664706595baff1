"""Where the engine's time goes: py-spy on every executor while the shuffle suite's hash
aggregation (blocking, uniform keys) loops ``--runs`` times after a warm-up; then, over
all processes, the functions that hold the most samples inclusively and by self time.
The driver is left out: it only waits for tasks, and py-spy attached to the process
that drives the job stalled it.  Samples, not seconds: with 10 executors on 2 cores
the shares are what matter.  Needs ``py-spy`` (the ``bench`` extra has it) and ptrace
permission on the machine's own processes.  Every run's answer is checked against
pyarrow."""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import hybrid_shuffle as hs
from benchmarks import systems
from benchmarks.data import blocks, make_table
from benchmarks.harness import Measurement
from benchmarks.suite import Context, Outcome, Suite, object_store
from benchmarks.suites.shuffle import _check_agg, checked

TOP = 25
RATE = 50  # py-spy samples per second


def run(ctx: Context) -> Outcome:
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not os.path.exists(spy):
        raise SystemExit("the profile suite needs py-spy: pip install py-spy")
    out = Path(tempfile.mkdtemp(prefix="hs-profile-"))
    rows = int(ctx.scale * 1e6)
    table = make_table(rows, "uniform")
    m = Measurement("hash-aggregation", "engine blocking, under py-spy", rows, "uniform")
    with hs.Session(
        systems.session_config(object_store=object_store(ctx.scale)), slots=systems.SLOTS
    ) as session:
        data = blocks(table, 8)
        job = checked(systems.engine_aggregate(session, "blocking"), _check_agg(table))
        job(data)  # warm-up: executors import and connect before sampling starts
        recorders = [
            subprocess.Popen(
                [
                    spy,
                    "record",
                    "--pid",
                    str(info["pid"]),
                    "--rate",
                    str(RATE),
                    "--format",
                    "raw",
                    "--nonblocking",
                    "--output",
                    str(out / f"{info['pid']}.txt"),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for info in session.executor_info
        ]
        time.sleep(1.0)  # py-spy attaches
        for _ in range(ctx.runs):
            started = time.perf_counter()
            job(data)
            m.seconds.append(time.perf_counter() - started)
        for r in recorders:
            r.send_signal(2)  # SIGINT: py-spy writes what it has and exits
        for r in recorders:
            r.wait(timeout=30)
    m.checked = True
    return Outcome([m], {}, _report(out))


def _report(folder: Path) -> list[str]:
    inclusive: collections.Counter[str] = collections.Counter()
    self_time: collections.Counter[str] = collections.Counter()
    total = 0
    for path in folder.glob("*.txt"):
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            frames = [_short(f) for f in stack.split(";")[1:]]  # first frame: the thread
            if not frames or frames[-1].startswith("Worker.main_loop"):
                continue  # an actor's main thread waiting in Ray's C++ loop for a call
            n = int(count)
            total += n
            for frame in set(frames):
                inclusive[frame] += n
            self_time[frames[-1]] += n
    lines = [f"\n{total} busy samples over the executors (idle threads not sampled)"]
    for title, counter in (("inclusive", inclusive), ("self", self_time)):
        lines.append(f"\ntop {TOP} by {title} samples:")
        lines += [f"  {n / max(total, 1):6.1%}  {frame}" for frame, n in counter.most_common(TOP)]
    return lines


def _short(frame: str) -> str:
    """``fn (path/to/module.py:12)`` -> ``fn (module.py)``."""
    name, _, where = frame.partition(" (")
    file = where.rsplit(":", 1)[0].rsplit("/", 1)[-1]
    return f"{name} ({file})" if file else name


SUITE = Suite(
    name="profile",
    description="py-spy on every executor while the hash aggregation loops",
    issue="issues 1-10",
    scale_unit="million rows",
    default_scale=10,
    tiny_scale=0.02,
    systems=("engine",),
    oracle="pyarrow (the aggregate's sums)",
    run=run,
    runs=10,
)
