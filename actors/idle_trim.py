"""glibc's free pages given back to the OS once an executor has been idle a moment.

NumPy's arrays (a hash exchange's row hashes and ids, sort orders) come from glibc's
malloc.  Freed, their pages stay in the process's arenas, where the next task reuses
them, until ``malloc_trim`` hands them back to the OS; a page handed back costs a
page fault the next time it is touched.  Trimming after every task (and a fixed
1 MiB mmap threshold, so that every large array was its own mapping, unmapped when
freed) kept an executor's memory at its baseline between tasks, but made each task
fault its scratch memory in afresh: TPC-H Q18 at SF1 took 207,000-369,000 minor faults
a run and 0.41-1.30 s of the executors' system CPU, against 59,000-232,000 faults and
0.25-0.65 s with the pages kept while tasks follow one another (1.13-1.46 s a run
against 1.17-1.90 s); the 22 TPC-H queries at SF1 ran in 0.96x the time
(``BENCHMARKS.md``, issue 34).

So glibc keeps its default, growing mmap threshold, and an executor trims when it has
run no task for ``IDLE_SECONDS``: an idle executor still holds only what it uses (the
high-water mark of its largest task is given back), and tasks that follow one
another, as a job's and a session's queries do, reuse the pages.  Arrow's own
allocator is not concerned: its freed memory is handed back by the task's thread as
the task ends (``Executor.run_task``): keeping that too changed little.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["IDLE_SECONDS", "IdleTrim", "trim_malloc"]

#: an executor that ran no task for this many seconds gives glibc's free pages back
IDLE_SECONDS = 1.0


def _load_libc() -> Any:
    """glibc, or None where there is none (musl, macOS)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim  # noqa: B018 -- must exist
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _load_libc()


def trim_malloc() -> None:
    """Hand the pages glibc's malloc holds free back to the OS (every arena; callable
    from any thread)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


class IdleTrim:
    """Calls ``trim`` once the process has been idle for ``delay`` seconds: ``busy``
    when a task starts, ``idle`` when the last running task ended.  One daemon thread
    waits for the moment; a task that starts before it comes puts the trim off until
    the next idle spell.  ``now`` trims at once if idle (the leak probes ask for the
    idle figure without waiting)."""

    def __init__(self, delay: float = IDLE_SECONDS, trim: Callable[[], None] = trim_malloc) -> None:
        self._delay = delay
        self._trim = trim
        self._cond = threading.Condition()
        #: monotonic seconds since which no task ran (None: busy, or trimmed since)
        self._idle_since: float | None = None
        self._busy = False
        self._closed = False
        self._thread = threading.Thread(target=self._wait, name="idle-trim", daemon=True)
        self._thread.start()

    def busy(self) -> None:
        with self._cond:
            self._busy = True
            self._idle_since = None

    def idle(self) -> None:
        with self._cond:
            self._busy = False
            self._idle_since = time.monotonic()
            self._cond.notify()

    def now(self) -> None:
        """Trim at once unless a task is running."""
        with self._cond:
            if self._busy:
                return
            self._idle_since = None
        self._trim()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _wait(self) -> None:
        with self._cond:
            while not self._closed:
                if self._idle_since is None:
                    self._cond.wait()
                    continue
                left = self._idle_since + self._delay - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                self._idle_since = None
                self._cond.release()
                try:
                    self._trim()
                finally:
                    self._cond.acquire()
