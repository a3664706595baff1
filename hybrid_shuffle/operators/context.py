"""What a task gives each operator it opens: a memory budget, its DuckDB, metrics.

``operators.memory`` (YAML) is the memory one task may use for the state of
its sort, join, aggregate and co_group operators (and a map-side combiner);
a task whose chain holds several such operators splits it evenly between
them, as Flink splits a slot's managed memory by operator weights.

The budget is enforced on DuckDB (``operators.duck``, where every stateful operator runs):
an operator's queries run on the task's ``TaskDatabase`` (``database``), whose
``memory_limit`` is the task's memory and whose ``temp_directory`` is the
task's private spill directory; DuckDB spills there and the operator reports
DuckDB's own peaks (``peak_memory_bytes``, ``spilled_bytes``).  The steps that
run on Arrow (the map-side combiner, a local aggregate, co_group's aligned pools)
compute in memory: they report the bytes they hold with ``hold`` (the largest
value becomes the operator's ``peak_memory_bytes``) and use the budget only to
size their steps (when to flush or re-reduce partials, how large an aligned
chunk is), never spill.

The held figure is the operator's own account of the Arrow buffers it
references, not the process's resident memory: a Ray executor runs several
tasks in one process and shares Arrow's pool between them, so a per-task
measure of the process would be no measure at all.

``OperatorContext.unbounded()`` (no budget) is what an operator opened without
a task gets: unit tests, and the driver.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import duckdb

from hybrid_shuffle.operators.duck.database import TaskDatabase
from hybrid_shuffle.operators.duck.streamed_query import StreamedQuery

__all__ = [
    "UNBOUNDED",
    "HeldBytes",
    "OperatorContext",
    "OperatorMetrics",
    "task_memory",
    "task_peak_memory",
]

#: the budget of an operator opened outside a task (no limit)
UNBOUNDED = 1 << 62


@dataclass
class OperatorMetrics:
    """What one operator of one task did (summed per vertex into ``VertexMetrics``)."""

    #: the memory it was given for its state
    memory: int = 0
    #: bytes it spilled (the peak of DuckDB's temp directory, summed over its queries)
    spilled_bytes: int = 0
    #: the most bytes it held at once (DuckDB's peak, or its own account on Arrow)
    peak_memory_bytes: int = 0
    #: the peak of the task's DuckDB while this operator's queries ran (0: it ran none).
    #: The task's DuckDB operators share one database, and each of them sees the whole
    #: database's peak, so a task counts this once (``task_peak_memory``)
    database_peak_bytes: int = 0
    #: its DuckDB queries that spilled
    spill_runs: int = 0
    #: CPU seconds of the threads its streamed DuckDB queries ran on (the task's own
    #: thread is counted by the task; ``TaskReport.cpu_seconds`` adds both)
    query_cpu_seconds: float = 0.0
    #: a sink (``write_parquet``): the rows, files and bytes it wrote out of the engine
    rows_written: int = 0
    files_written: int = 0
    bytes_written: int = 0


def task_memory(operators: Sequence[OperatorMetrics]) -> int:
    """The memory one task's stateful operators were given (``operators.memory`` in force:
    their shares summed), which ``task_peak_memory`` is held to."""
    return sum(op.memory for op in operators)


def task_peak_memory(operators: Sequence[OperatorMetrics]) -> int:
    """The most one task's stateful operators held at once: its DuckDB's peak, counted
    once however many of its operators ran queries on it, plus what the operators that
    ran none (the combiner on Arrow) held by their own account.  Summing every
    operator's ``peak_memory_bytes`` would count the shared database once per operator."""
    database = max((op.database_peak_bytes for op in operators), default=0)
    own = sum(op.peak_memory_bytes for op in operators if not op.database_peak_bytes)
    return database + own


class OperatorContext:
    """One operator's budget, DuckDB database and metrics in one task attempt."""

    def __init__(
        self,
        memory: int,
        subtask: int = 0,
        attempt: int = 0,
        database: TaskDatabase | None = None,
        wait_timeout: float = 300.0,
    ) -> None:
        self.memory = memory
        #: the task's DuckDB (one per task attempt, shared by its operators); an
        #: operator opened outside a task gets one of its own on first use
        self._database = database
        #: the longest a DuckDB operator waits for its query (``shuffle.wait_timeout``)
        self.wait_timeout = wait_timeout
        #: the task's subtask and attempt (a sink names its files by them)
        self.subtask = subtask
        self.attempt = attempt
        self.metrics = OperatorMetrics(memory=memory if memory < UNBOUNDED else 0)

    @classmethod
    def unbounded(cls) -> OperatorContext:
        """No budget (an operator opened outside a task)."""
        return cls(UNBOUNDED)

    @property
    def database(self) -> TaskDatabase:
        """The DuckDB database the operator's queries run on (see the module docstring)."""
        if self._database is None:
            self._database = TaskDatabase()
        return self._database

    def record_query(
        self, cursor: duckdb.DuckDBPyConnection, query: StreamedQuery | None = None
    ) -> int:
        """Count the spill of the cursor's finished query, and the CPU of ``query``'s
        thread if it was streamed; return its peak memory, which the operator reports
        through ``hold`` (or its ``HeldBytes``)."""
        profile = TaskDatabase.profile(cursor)
        self.metrics.database_peak_bytes = max(
            self.metrics.database_peak_bytes, profile.peak_memory_bytes
        )
        self.metrics.spilled_bytes += profile.spilled_bytes
        if profile.spilled_bytes:
            self.metrics.spill_runs += 1
        if query is not None:
            self.metrics.query_cpu_seconds += query.cpu_seconds
        return profile.peak_memory_bytes

    def hold(self, held_bytes: int) -> None:
        """The operator now holds ``held_bytes`` (records the peak)."""
        if held_bytes > self.metrics.peak_memory_bytes:
            self.metrics.peak_memory_bytes = held_bytes

    def fits(self, held_bytes: int) -> bool:
        """``held_bytes`` is within the budget."""
        return held_bytes <= self.memory


class HeldBytes:
    """The bytes the parts of one operator hold (its sorters, its pools), reported to the
    context as their sum so ``peak_memory_bytes`` is the operator's, not one part's."""

    def __init__(self, context: OperatorContext) -> None:
        self.context = context
        self._parts: dict[Hashable, int] = {}

    def set(self, part: Hashable, nbytes: int) -> None:
        """``part`` now holds ``nbytes``."""
        self._parts[part] = nbytes
        self.context.hold(sum(self._parts.values()))
