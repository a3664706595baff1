"""Peak memory of a run: the machine's used memory above the level before it.

Covers the driver, every Ray worker and the object store (plasma lives in
shared memory), which per-process RSS alone would miss.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psutil


def _used() -> int:
    vm = psutil.virtual_memory()
    return int(vm.total - vm.available)


@contextmanager
def peak_memory() -> Iterator[dict[str, int]]:
    result = {"peak_bytes": 0}
    baseline = _used()
    stop = threading.Event()

    def sample() -> None:
        peak = 0
        while not stop.is_set():
            peak = max(peak, _used() - baseline)
            time.sleep(0.02)
        result["peak_bytes"] = max(peak, _used() - baseline, 0)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield result
    finally:
        stop.set()
        thread.join()


@contextmanager
def peak_rss(pids: list[int]) -> Iterator[dict[str, int]]:
    """The resident memory of processes ``pids`` (a session's executors,
    ``Session.executor_info``) at their peak during the block, above what each held
    before it: ``peak_bytes`` is the largest single process's rise, ``peak_sum_bytes``
    the largest rise of their sum.  What an operator's own account (DuckDB's buffer
    pool, Arrow's pool) leaves out is in it: allocator caches, queued batches, the
    Python heap."""
    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.Error:
            continue
    result = {"peak_bytes": 0, "peak_sum_bytes": 0}
    stop = threading.Event()

    def rss(p: psutil.Process) -> int:
        try:
            return int(p.memory_info().rss)
        except psutil.Error:
            return 0

    before = [rss(p) for p in procs]

    def sample() -> None:
        while True:
            rises = [rss(p) - b for p, b in zip(procs, before, strict=True)]
            result["peak_bytes"] = max(result["peak_bytes"], *rises, 0)
            result["peak_sum_bytes"] = max(result["peak_sum_bytes"], sum(rises))
            if stop.wait(0.02):
                return

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield result
    finally:
        stop.set()
        thread.join()
