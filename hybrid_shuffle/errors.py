"""The exceptions a user of hybrid-shuffle can see.

One named exception per failure, as Flink does (partition not found, producer
failed, data consumption failed).  Every message is one sentence that names the
thing that went wrong and what to change; internal errors are translated at
phase boundaries with ``raise ... from e`` so the Ray traceback stays attached
for ``--debug`` but is not what the user reads first.
"""

from __future__ import annotations

__all__ = [
    "CacheLostError",
    "CacheSessionError",
    "ConfigError",
    "DataConsumptionError",
    "ExecutorLostError",
    "HybridShuffleError",
    "JobCancelledError",
    "JobFailedError",
    "JobTimeoutError",
    "PartitionCorruptedError",
    "PartitionNotFoundError",
    "PlanError",
    "ProducerFailedError",
    "PythonFunctionError",
    "QueryFailedError",
    "SchemaMismatchError",
    "SessionClosedError",
    "SlotsExceededError",
    "UnsupportedPlanError",
    "WaitTimeoutError",
    "summary",
]


def summary(error: BaseException) -> str:
    """The first line of ``error``'s message, or its type's name if it has none: what a
    one-sentence message quotes of an error it translates."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


class HybridShuffleError(Exception):
    """Base class of every error this library raises on purpose."""


class ConfigError(HybridShuffleError, ValueError):
    """A YAML or code setting is invalid; the message names the key path."""


class PlanError(HybridShuffleError, ValueError):
    """The job graph cannot be built: a missing column, a duplicate edge name, ..."""


class UnsupportedPlanError(PlanError):
    """A Spark plan has an operator or expression the engine does not translate and the
    caller asked for ``fallback="error"``; the message names it."""


class SchemaMismatchError(HybridShuffleError, TypeError):
    """A batch's columns differ from earlier batches of the same operator."""


class SessionClosedError(HybridShuffleError, RuntimeError):
    """A session, or a job or stream of it, was used after ``close()``."""


class CacheSessionError(PlanError):
    """A ``CachedStream`` was used in a job of another session: a cache's partitions live
    and die with the session that filled it."""


class CacheLostError(HybridShuffleError):
    """A job reading a cache lost one of its partitions with the partition's holder.
    A run recovers from it by itself (the cache is filled again from its lineage and
    the job runs again); it reaches the user only when that keeps failing."""


class SlotsExceededError(PlanError):
    """A pipelined region needs more slots at once than the session has."""


class WaitTimeoutError(HybridShuffleError, TimeoutError):
    """A bounded wait ran out; the message names what was waited for."""


class ExecutorLostError(HybridShuffleError):
    """An executor actor died; the partitions it owned are gone with it."""


class PartitionNotFoundError(HybridShuffleError):
    """A consumer asked for a result partition its owner no longer holds."""


class PartitionCorruptedError(HybridShuffleError):
    """A result partition's spill file failed its check when read back: a buffer whose
    checksum does not match, a file cut short, or a file deleted under the engine.  The
    message names the partition and the file.  The partition counts as lost: failover
    recomputes its producer, and only a job that keeps meeting it
    (``failover.max_attempts`` times) fails.  ``partition_id`` and ``path`` say the same
    as attributes when known (None otherwise)."""

    def __init__(
        self, message: str, *, partition_id: str | None = None, path: str | None = None
    ) -> None:
        super().__init__(message)
        self.partition_id = partition_id
        self.path = path


class ProducerFailedError(HybridShuffleError):
    """The task producing a partition failed, so its consumers cannot finish."""


class DataConsumptionError(HybridShuffleError):
    """A consumer could not fetch or decode a buffer it was promised."""


class JobFailedError(HybridShuffleError):
    """A task failed for good (``failover.max_attempts`` times, or with an error no retry
    can mend); the message names the operator, the subtask, the attempts and the first
    line of the user's exception.  ``operator``, ``subtask`` and ``attempts`` say the
    same as attributes when known (None otherwise)."""

    def __init__(
        self,
        message: str,
        *,
        operator: str | None = None,
        subtask: int | None = None,
        attempts: int | None = None,
    ) -> None:
        super().__init__(message)
        self.operator = operator
        self.subtask = subtask
        self.attempts = attempts


class QueryFailedError(JobFailedError):
    """A DuckDB query failed on the rows it was given (a cast that cannot be made, a
    division by zero in ``sql``): the message names the operator and carries DuckDB's.
    It is not retried: the same rows fail the same way."""


class PythonFunctionError(JobFailedError):
    """A Python function of a Spark plan (a UDF, ``mapInPandas``, ``applyInPandas``) raised,
    or returned what its declared type cannot hold: the message names the function
    (its ``__qualname__``), the task and the exception's type and message; the cause
    (``--debug``) holds the traceback's frames in the function's own file.  It is not
    retried: the same rows fail the same way (``attempts`` is 1)."""

    def __init__(
        self,
        message: str,
        *,
        function: str = "?",
        error_type: str = "Exception",
        user_traceback: str = "",
        operator: str | None = None,
        subtask: int | None = None,
        attempts: int | None = None,
    ) -> None:
        super().__init__(message, operator=operator, subtask=subtask, attempts=attempts)
        self.function = function
        self.error_type = error_type
        self.user_traceback = user_traceback

    def __reduce__(self) -> tuple[object, ...]:
        keywords = {
            "function": self.function,
            "error_type": self.error_type,
            "user_traceback": self.user_traceback,
            "operator": self.operator,
            "subtask": self.subtask,
            "attempts": self.attempts,
        }
        return (_rebuild_python_error, (str(self), keywords))


def _rebuild_python_error(message: str, keywords: dict[str, object]) -> PythonFunctionError:
    return PythonFunctionError(message, **keywords)  # type: ignore[arg-type]


class JobTimeoutError(WaitTimeoutError):
    """A job did not finish within ``collect(timeout=)`` (or ``failover.job_timeout``);
    the message names the job and the tasks still running, which were cancelled."""


class JobCancelledError(HybridShuffleError):
    """The job was cancelled (another task failed); raised inside the other tasks."""
