"""The in-memory share of an executor's result partitions.

A plain limiter with no I/O, so it is unit-tested without a cluster.  Writers
``try_reserve`` before they keep a buffer in the object store; when that fails a
spilling partition writes the buffer to disk instead, and a bounded one waits
for credit (it never asks the budget).  ``peak`` is what the metrics report.
"""

from __future__ import annotations

import threading

__all__ = ["MemoryBudget"]


class MemoryBudget:
    def __init__(self, limit: int) -> None:
        if limit <= 0:
            raise ValueError(f"memory budget must be positive, got {limit}")
        self.limit = limit
        self._used = 0
        self._peak = 0
        self._lock = threading.Lock()

    def try_reserve(self, nbytes: int) -> bool:
        """Reserve ``nbytes`` if they fit; a buffer larger than the whole limit never fits."""
        with self._lock:
            if self._used + nbytes > self.limit:
                return False
            self._used += nbytes
            self._peak = max(self._peak, self._used)
            return True

    def force_reserve(self, nbytes: int) -> None:
        """Account for bytes that must stay in memory whatever the limit (pipelined data)."""
        with self._lock:
            self._used += nbytes
            self._peak = max(self._peak, self._used)

    def release(self, nbytes: int) -> None:
        with self._lock:
            self._used -= nbytes
            if self._used < 0:  # a bookkeeping bug, not a user error
                raise AssertionError(f"memory budget released {-self._used} bytes too many")

    @property
    def used(self) -> int:
        return self._used

    @property
    def peak(self) -> int:
        return self._peak
