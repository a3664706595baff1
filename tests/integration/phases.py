"""Phase gates for failure injection: a user function that stops at a named phase of a
running task until the test has done its damage, and a killer that waits for it.

Never a timer: the function writes its process id to a marker file when its task
reaches the phase, and waits (bounded) until the test released it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import ray

import hybrid_shuffle as hs

from .conftest import wait_until


def gate(marker: Path, release: Path, at_call: int) -> Callable[[pa.Table], pa.Table]:
    """A pass-through function that, in a task's ``at_call``-th batch and until the test
    released it, writes its process id to ``marker`` and waits (at most 60 s)."""
    marker_path, release_path = str(marker), str(release)
    calls = [0]

    def fn(table: pa.Table) -> pa.Table:
        calls[0] += 1
        if calls[0] == at_call and not os.path.exists(release_path):
            tmp = f"{marker_path}.{os.getpid()}.{threading.get_ident()}"
            with open(tmp, "w") as f:
                f.write(str(os.getpid()))
            os.replace(tmp, marker_path)
            deadline = time.monotonic() + 60
            while not os.path.exists(release_path) and time.monotonic() < deadline:
                time.sleep(0.01)
        return table

    return fn


def kill_at(session: hs.Session, marker: Path, release: Path) -> threading.Thread:
    """Once ``marker`` names a process, kill the executor running in it, then release
    the gate for everyone else."""

    def kill() -> None:
        try:
            wait_until(marker.exists, 60, f"phase marker {marker.name}")
            pid = int(marker.read_text())
            victims = [i for i, info in enumerate(session.executor_info) if info["pid"] == pid]
            for i in victims:
                ray.kill(session.executors[i])
        finally:
            release.touch()

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread
