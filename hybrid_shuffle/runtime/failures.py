"""How a task's failure travels from the executor to the user, as one sentence.

The executor is the phase boundary: whatever a task raises is caught there and
described as a ``TaskFailure`` in its report (the library's own errors travel
as themselves; a user's exception as its type, first line and traceback text,
since its class may not exist on the driver).  No task ever ends in a Ray
error object, so Ray never prints "Unhandled error" for a cancelled job, and
the driver never shows a deep Ray traceback: ``to_error`` turns a failure into
one named ``HybridShuffleError`` whose ``__cause__`` carries the remote
traceback for ``--debug``.  ``root_cause`` picks, of all the errors a failing
job produced, the one that explains the others.
"""

from __future__ import annotations

import pickle
import traceback
from collections.abc import Sequence
from dataclasses import dataclass

from hybrid_shuffle.errors import (
    ExecutorLostError,
    HybridShuffleError,
    JobCancelledError,
    JobFailedError,
    ProducerFailedError,
    PythonFunctionError,
    WaitTimeoutError,
)

__all__ = [
    "RemoteTraceback",
    "TaskFailure",
    "describe_failure",
    "first_line",
    "root_cause",
    "to_error",
]


class RemoteTraceback(Exception):
    """The traceback of an exception raised in an executor (set as ``__cause__``)."""


@dataclass(frozen=True)
class TaskFailure:
    """What a failed task reports (plain data: always picklable)."""

    #: the exception's class name (``ValueError``, ``ProducerFailedError``, ...)
    error_type: str
    #: its message, whole (``to_error`` keeps the first line)
    message: str
    #: the formatted traceback, shown with ``--debug``
    traceback: str
    #: the library's own error, when it was one (these pickle by construction)
    library_error: HybridShuffleError | None = None


def describe_failure(error: BaseException) -> TaskFailure:
    """Executor side: a failure record of ``error`` (call inside the ``except``)."""
    text = "".join(traceback.format_exception(error))
    library = error if isinstance(error, HybridShuffleError) else None
    if library is not None:
        try:
            pickle.dumps(library)
        except Exception:  # a subclass with extra constructor arguments
            library = None
    return TaskFailure(type(error).__name__, str(error), text, library)


def to_error(failure: TaskFailure, task: str) -> HybridShuffleError:
    """Driver side: the error the user sees for a task that failed with ``failure``."""
    library = failure.library_error
    if isinstance(library, PythonFunctionError):
        # the user's own frames, not the executor's: the cause a user reads
        python = PythonFunctionError(
            f"task '{task}': {first_line(failure)}",
            function=library.function,
            error_type=library.error_type,
            user_traceback=library.user_traceback,
        )
        python.__cause__ = RemoteTraceback(library.user_traceback or failure.traceback)
        return python
    if library is not None:
        error: HybridShuffleError = type(library)(f"task '{task}': {first_line(failure)}")
    elif failure.error_type == "ModuleNotFoundError":
        error = JobFailedError(
            f"task '{task}' failed: the executor cannot import {first_line(failure)!r}; "
            "install that module where Ray runs, or define the function in the pipeline file"
        )
    else:
        error = JobFailedError(f"task '{task}' failed: {failure.error_type}: {first_line(failure)}")
    error.__cause__ = RemoteTraceback(failure.traceback)
    return error


def first_line(failure: TaskFailure) -> str:
    """The first line of the failure's message (its type if it has none)."""
    text = failure.message.strip()
    return text.splitlines()[0] if text else failure.error_type


def root_cause(errors: Sequence[BaseException]) -> BaseException:
    """The error that explains the others: the user's before what it caused downstream
    (producer failures, timeouts, cancellations); the first of equals."""

    def rank(e: BaseException) -> int:
        if isinstance(e, JobCancelledError):
            return 4
        if isinstance(e, ProducerFailedError):
            return 3
        if isinstance(e, (WaitTimeoutError, TimeoutError)):
            return 2
        if isinstance(e, ExecutorLostError):
            return 1
        return 0

    return min(errors, key=rank)
