"""Ctrl-C during a job, taken where the scheduler can act on it.

Python's own SIGINT handler raises ``KeyboardInterrupt`` wherever the main thread
happens to be, and CPython drops an exception raised inside a finalizer
("Exception ignored in ... __del__"): a job's driver collects Ray's object
references all the time, so a Ctrl-C could vanish and the job simply ran on.
While a job runs on the main thread with Python's default handler in place,
``deferred_interrupts`` puts a handler there that only records the Ctrl-C; the
scheduler's loop calls ``raise_if_interrupted`` every turn (at most a slice, 0.5
s, later), raises ``KeyboardInterrupt`` from there, cancels the job's tasks and
re-raises it to the caller, as before.  A second Ctrl-C while the first waits is
raised at once, wherever it lands.  A Ctrl-C recorded after the loop's last turn is
raised when the job returns, so none is lost.  A handler someone else installed
(the user's own, or PySpark's while its context runs) is left alone.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

__all__ = ["deferred_interrupts", "raise_if_interrupted"]

_pending = threading.Event()


def _record(signum: int, frame: FrameType | None) -> None:
    if _pending.is_set():  # pressed again: the user means it now
        _pending.clear()
        raise KeyboardInterrupt
    _pending.set()


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Record Ctrl-C instead of raising it, for the duration (module docstring); a
    no-op off the main thread, inside another such block, or under a handler that
    is not Python's default."""
    main = threading.current_thread() is threading.main_thread()
    if not main or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    _pending.clear()
    signal.signal(signal.SIGINT, _record)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGINT) is _record:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    raise_if_interrupted()  # one that came after the loop's last look


def raise_if_interrupted() -> None:
    """Raise ``KeyboardInterrupt`` if a Ctrl-C was recorded (and forget it)."""
    if _pending.is_set():
        _pending.clear()
        raise KeyboardInterrupt
