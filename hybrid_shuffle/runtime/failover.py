"""Region failover: which regions a failure restarts, and which failures count.

Flink's ``RestartPipelinedRegionFailoverStrategy``, on this project's
subtask-level pipelined regions.  A failed task restarts its region; from there
the set grows until it is closed under two rules:

- a region that restarts produces new partitions (a new attempt), so every
  consumer region that already deployed restarts too (it read, or reads, the
  old attempt's rows: running on would duplicate or miss rows);
- a region that restarts re-reads its inputs, so the producer region of every
  input partition that is not ``available`` (not reconsumable, or lost, or
  released) restarts too; transitively, down to the sources, which are the
  driver's and always there.

Reconsumable partitions that still exist (blocking, hybrid-full) are re-read,
not recomputed: that is what keeping them is for.

Which failures count toward ``failover.max_attempts`` (``FailureKind``): a
task's *own* failure counts (a user exception, its executor dying under it); a
*collateral* one does not (it failed because a producer failed or vanished, or
because its attempt was cancelled: the producer's failure is counted where it
happened; a corrupted spill file, ``PartitionCorruptedError``, counts against
the producer attempt that wrote the partition); a *fatal* one is not retried at
all (a plan, config or schema error would fail the same way every time).  Plain
Python.
"""

from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Callable, Iterable

from hybrid_shuffle.errors import (
    ConfigError,
    DataConsumptionError,
    ExecutorLostError,
    JobCancelledError,
    PartitionCorruptedError,
    PartitionNotFoundError,
    PlanError,
    ProducerFailedError,
    PythonFunctionError,
    QueryFailedError,
    SchemaMismatchError,
)
from hybrid_shuffle.plan.graph import JobEdge, JobGraph
from hybrid_shuffle.plan.regions import Region, TaskKey
from hybrid_shuffle.runtime.deployment import producers_of
from hybrid_shuffle.runtime.failures import TaskFailure

__all__ = ["FailoverTopology", "FailureKind", "backoff_delay", "classify"]


class FailureKind(enum.Enum):
    OWN = "own"  # counts toward the task's attempts, restarts its region
    COLLATERAL = "collateral"  # restarts its region, counted where it started
    FATAL = "fatal"  # fails the job at once: a retry would fail the same way


_FATAL = (ConfigError, PlanError, PythonFunctionError, QueryFailedError, SchemaMismatchError)
_COLLATERAL = (
    JobCancelledError,
    ProducerFailedError,
    PartitionNotFoundError,
    PartitionCorruptedError,  # counted against the producer whose partition it was
    ExecutorLostError,
    DataConsumptionError,
)


def classify(failure: TaskFailure) -> FailureKind:
    """The kind of a failure a task reported (its executor's death is ``OWN``, decided
    by the caller: the task could not report it)."""
    library = failure.library_error
    if isinstance(library, _FATAL) or failure.error_type == "ModuleNotFoundError":
        return FailureKind.FATAL
    if isinstance(library, _COLLATERAL):
        return FailureKind.COLLATERAL
    return FailureKind.OWN


def backoff_delay(backoff: float, attempt: int) -> float:
    """Seconds before attempt ``attempt`` (>= 1) starts: ``backoff * 2**(attempt-1)``."""
    return backoff * float(2 ** max(attempt - 1, 0))


class FailoverTopology:
    """The regions of one job, indexed for the restart closure (see the module docstring)."""

    def __init__(self, graph: JobGraph, regions: list[Region]) -> None:
        self.graph = graph
        self.regions = {r.id: r for r in regions}
        self.region_of: dict[TaskKey, int] = {t: r.id for r in regions for t in r.tasks}
        #: region -> the regions reading its partitions over blocking or hybrid edges
        self._consumers: dict[int, set[int]] = defaultdict(set)
        #: region -> (edge, producer task) of every partition it reads from another region
        self._inputs: dict[int, list[tuple[JobEdge, TaskKey]]] = defaultdict(list)
        for region in regions:
            for vid, subtask in region.tasks:
                for edge in graph.vertices[vid].inputs:
                    if edge.partition_type.must_be_pipelined():
                        continue  # inside the region
                    for producer in producers_of(graph, edge, subtask):
                        self._inputs[region.id].append((edge, producer))
                        upstream = self.region_of.get(producer)
                        if upstream is not None:
                            self._consumers[upstream].add(region.id)

    def to_restart(
        self,
        failed: Iterable[int],
        deployed: Callable[[int], bool],
        available: Callable[[JobEdge, TaskKey], bool],
    ) -> set[int]:
        """Every region to restart when ``failed`` regions fail: the closure under the
        two rules of the module docstring; ``deployed(region)`` says whether a region
        has run, ``available(edge, producer)`` whether a partition can be re-read."""
        todo = list(failed)
        restart: set[int] = set()
        while todo:
            region = todo.pop()
            if region in restart:
                continue
            restart.add(region)
            todo.extend(c for c in self._consumers[region] if deployed(c))
            for edge, producer in self._inputs[region]:
                upstream = self.region_of.get(producer)
                if upstream is not None and not available(edge, producer):
                    todo.append(upstream)
        return restart
