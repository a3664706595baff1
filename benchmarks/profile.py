"""Where the engine's time goes: py-spy on every executor and the driver while a job loops.

    python -m benchmarks.profile --workload agg --rows 1e7 --distribution uniform

Samples each executor actor process with ``py-spy record`` (raw, collapsed
stacks, idle frames dropped) while the workload runs ``--runs`` times
after a warm-up, then prints, over all processes, the functions that hold the
most samples *inclusively* and *by self time*.  The driver is left out: it only
waits for tasks (cProfile of it shows ``ray.wait`` as 90% of its time), and
py-spy attached to the process that drives the job stalled it here.  Samples, not seconds: with 10
executors on 2 cores the shares are what matter.  Needs ``py-spy`` (``pip
install py-spy``; the ``bench`` extra has it) and ptrace permission on the
machine's own processes.
"""

from __future__ import annotations

import argparse
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

_RUNNERS = {
    "agg": systems.engine_aggregate,
    "repartition": systems.engine_repartition,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__)
    parser.add_argument("--workload", choices=sorted(_RUNNERS), default="agg")
    parser.add_argument("--rows", type=lambda s: int(float(s)), default=10_000_000)
    parser.add_argument("--distribution", default="uniform")
    parser.add_argument("--mode", default="blocking")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--rate", type=int, default=50, help="py-spy samples per second")
    args = parser.parse_args(argv)
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not os.path.exists(spy):
        print("python -m benchmarks.profile needs py-spy: pip install py-spy", file=sys.stderr)
        return 2
    out = Path(tempfile.mkdtemp(prefix="hs-profile-"))
    with hs.Session(systems.session_config(), slots=systems.SLOTS) as session:
        data = blocks(make_table(args.rows, args.distribution), 8)
        run = _RUNNERS[args.workload](session, args.mode)
        run(data)  # warm-up: executors import and connect before sampling starts
        pids = [info["pid"] for info in session.executor_info]
        recorders = [
            subprocess.Popen(
                [
                    spy,
                    "record",
                    "--pid",
                    str(pid),
                    "--rate",
                    str(args.rate),
                    "--format",
                    "raw",
                    "--nonblocking",
                    "--output",
                    str(out / f"{pid}.txt"),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for pid in pids
        ]
        time.sleep(1.0)  # py-spy attaches
        started = time.perf_counter()
        for _ in range(args.runs):
            run(data)
        seconds = (time.perf_counter() - started) / args.runs
        for r in recorders:
            r.send_signal(2)  # SIGINT: py-spy writes what it has and exits
        for r in recorders:
            r.wait(timeout=30)
    print(
        f"{args.workload} {args.rows:,} {args.distribution} {args.mode}: "
        f"{seconds:.3f} s per run ({args.runs} runs)"
    )
    _report(out, os.getpid(), args.top)
    return 0


def _report(folder: Path, driver: int, top: int) -> None:
    inclusive: collections.Counter[str] = collections.Counter()
    self_time: collections.Counter[str] = collections.Counter()
    total = 0
    for path in folder.glob("*.txt"):
        who = "driver" if path.stem == str(driver) else "executor"
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
                inclusive[f"{who}: {frame}"] += n
            self_time[f"{who}: {frames[-1]}"] += n
    print(f"\n{total} busy samples over all processes (idle threads not sampled)")
    for title, counter in (("inclusive", inclusive), ("self", self_time)):
        print(f"\ntop {top} by {title} samples:")
        for frame, n in counter.most_common(top):
            print(f"  {n / max(total, 1):6.1%}  {frame}")


def _short(frame: str) -> str:
    """``fn (path/to/module.py:12)`` -> ``fn (module.py)``."""
    name, _, where = frame.partition(" (")
    file = where.rsplit(":", 1)[0].rsplit("/", 1)[-1]
    return f"{name} ({file})" if file else name


if __name__ == "__main__":
    sys.exit(main())
