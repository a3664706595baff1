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
