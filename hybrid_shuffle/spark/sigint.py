"""Ctrl-C after Spark: the main thread's SIGINT handler, kept across a Spark the session owns.

PySpark's ``SparkContext`` replaces the main thread's SIGINT handler with one that
cancels the context's jobs and raises ``KeyboardInterrupt``, and leaves it in place
when the context stops.  Once the session has stopped its Spark, that handler calls
into a stopped context: a Ctrl-C raises ``AttributeError`` instead of
``KeyboardInterrupt``, which a program's own ``except KeyboardInterrupt`` does not
catch (and a driver loop that treats errors as a job's may swallow it).  So the
session records the handler before it starts Spark and puts it back when it stops
that Spark, unless the user installed another one meanwhile.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

__all__ = ["current_sigint_handler", "restore_sigint_handler"]


def current_sigint_handler() -> Any:
    """The SIGINT handler now, or None off the main thread (only it may set one)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.getsignal(signal.SIGINT)


def restore_sigint_handler(previous: Any) -> None:
    """Put ``previous`` back if the handler now is PySpark's (a user's own stays)."""
    if previous is None or threading.current_thread() is not threading.main_thread():
        return
    now = signal.getsignal(signal.SIGINT)
    if now is not previous and _is_pysparks(now):
        signal.signal(signal.SIGINT, previous)


def _is_pysparks(handler: Any) -> bool:
    return callable(handler) and getattr(handler, "__module__", "").startswith("pyspark")
