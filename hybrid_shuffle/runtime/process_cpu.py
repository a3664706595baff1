"""The executor process's CPU time, shared out among the tasks it ran.

A task's own thread is only part of its work: DuckDB runs a query on threads of
its own, pyarrow decodes Parquet on its I/O and CPU pools, and neither is seen by
``time.thread_time()`` on the task's thread.  The process's CPU time
(``time.process_time()``: every thread of the executor) sees all of it, but an
executor runs one subtask of each vertex of a region at once (slot sharing), so
the process's time must be shared out.

``CpuLedger`` does that from the only two moments it is told of, a task's start
and its end: at each, the process CPU spent since the previous one is shared
among the tasks that were running over that interval.  Each gets its own
thread's CPU of the interval, and the rest (the pools' threads, the polls this
executor served) in proportion to it -- or evenly, when none of their threads ran
(or the platform cannot read another thread's clock).  A task that ran alone
thus gets exactly the process's CPU over its life; the figures of tasks that ran
together add up to the process's.  Intervals when no task runs are nobody's.

The contract: ``enter()`` on the task's thread when it starts, ``leave()`` with
what it returned once it has ended (whatever the way), which returns the task's
share in seconds.  One ledger per process (``LEDGER``); thread-safe.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

__all__ = ["LEDGER", "CpuLedger", "CpuShare"]


@dataclass
class CpuShare:
    """One running task's account."""

    #: the CPU clock of the task's thread (None: not readable from other threads here)
    clock: int | None
    #: that clock when the ledger last settled
    thread_seconds: float
    #: the process CPU shared to the task so far
    seconds: float = 0.0


def _thread_clock() -> int | None:
    getter = getattr(time, "pthread_getcpuclockid", None)
    if getter is None:  # not every Unix has it (macOS does not)
        return None
    try:
        return int(getter(threading.get_ident()))
    except OSError:
        return None


def _read(clock: int | None) -> float:
    if clock is None:
        return 0.0
    try:
        return time.clock_gettime(clock)
    except OSError:  # the thread is gone: it spends nothing more
        return 0.0


class CpuLedger:
    """See the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[int, CpuShare] = {}
        self._last = time.process_time()

    def enter(self) -> CpuShare:
        """A task starts on the calling thread: its account, to give to ``leave``."""
        clock = _thread_clock()
        with self._lock:
            self._settle()
            share = CpuShare(clock, _read(clock))
            self._running[id(share)] = share
            return share

    def leave(self, share: CpuShare) -> float:
        """The task of ``share`` has ended: the process CPU seconds that were its."""
        with self._lock:
            self._settle()
            self._running.pop(id(share), None)
            return share.seconds

    def _settle(self) -> None:
        """Share the process CPU spent since the last call among the running tasks."""
        now = time.process_time()
        spent, self._last = max(now - self._last, 0.0), now
        shares = list(self._running.values())
        if not shares:
            return
        own = []
        for share in shares:
            seconds = _read(share.clock)
            own.append(max(seconds - share.thread_seconds, 0.0))
            share.thread_seconds = seconds
        total = sum(own)
        rest = max(spent - total, 0.0)
        for share, mine in zip(shares, own, strict=True):
            weight = mine / total if total > 0 else 1 / len(shares)
            share.seconds += mine + rest * weight


#: the ledger of this process (an executor's tasks all report to it)
LEDGER = CpuLedger()
