"""Test implementations of the runtime's injected parts: a shuffle master that records,
and a task transport that "runs" tasks by answering with reports (no Ray)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hybrid_shuffle.runtime.task import TaskDeployment, TaskReport, TaskState
from hybrid_shuffle.shuffle.api import (
    PartitionDescriptor,
    PartitionId,
    ProducerDescriptor,
    ShuffleDescriptor,
)


@dataclass
class RecordingMaster:
    """A ``ShuffleMaster`` that registers in memory and records releases."""

    registered: dict[PartitionId, ShuffleDescriptor] = field(default_factory=dict)
    released: list[PartitionId] = field(default_factory=list)
    #: what the next ``lost_partitions`` reports
    lost: list[PartitionId] = field(default_factory=list)

    def register_partition_with_producer(
        self, partition: PartitionDescriptor, producer: ProducerDescriptor
    ) -> ShuffleDescriptor:
        descriptor = ShuffleDescriptor(
            partition,
            producer.executor,
            f"executor {producer.executor_index}",
            producer.executor_index,
        )
        self.registered[partition.partition_id] = descriptor
        return descriptor

    def release_partitions_externally(self, descriptors: Sequence[ShuffleDescriptor]) -> None:
        self.released.extend(d.partition.partition_id for d in descriptors)

    def wait_for_releases(self, timeout: float) -> None:
        pass

    def lost_partitions(self) -> list[PartitionId]:
        lost, self.lost = self.lost, []
        return lost

    def close(self) -> None:
        pass


@dataclass
class FakePool:
    """An ``ExecutorPool`` of plain names; ``die(i)`` makes the next ``dead()`` report it."""

    executors: list[Any]
    nodes: list[str] = field(default_factory=list)
    replaced: list[int] = field(default_factory=list)
    dying: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.nodes = self.nodes or ["node"] * len(self.executors)

    def watches(self) -> list[Any]:
        return []

    def dead(self) -> list[int]:
        dying, self.dying = self.dying, []
        return dying

    def starting(self) -> set[int]:
        return set()

    def heal(self) -> list[int]:
        dead = self.dead()
        for index in dead:
            self.replace(index)
        return dead

    def replace(self, index: int) -> Any:
        self.replaced.append(index)
        self.executors[index] = f"{self.executors[index]}'"
        return self.executors[index]


@dataclass
class _Submitted:
    executor: Any
    deployment: TaskDeployment


class FakeTransport:
    """Tasks finish in submission order, one per ``wait`` call; ``outcome`` decides a
    task's report state by its name and attempt (default: finished)."""

    def __init__(
        self,
        outcome: Callable[[str, int], TaskState] | None = None,
        error: Callable[[str], Exception] | None = None,
    ) -> None:
        self.outcome = outcome or (lambda name, attempt: TaskState.FINISHED)
        #: what a failed task raised (default: a ValueError naming it)
        self.error = error or (lambda name: ValueError(f"boom in {name}"))
        self.submitted: list[_Submitted] = []
        self.cancelled: list[str] = []
        self.cancelled_attempts: list[str] = []
        #: task name -> how many tasks were running when it was submitted
        self.concurrency: dict[str, int] = {}
        self._refs: dict[int, _Submitted] = {}
        self._next = 0

    def submit(self, executor: Any, deployment: TaskDeployment) -> int:
        ref = self._next
        self._next += 1
        self._refs[ref] = _Submitted(executor, deployment)
        self.submitted.append(self._refs[ref])
        self.concurrency[deployment.name] = len(self._refs)
        return ref

    def wait(self, refs: Sequence[int], timeout: float) -> list[int]:
        return [min(refs)] if refs else []

    def report(self, ref: int, timeout: float, executor: int, task: str) -> TaskReport:
        from hybrid_shuffle.runtime.failures import describe_failure

        submitted = self._refs.pop(ref)
        d = submitted.deployment
        state = self.outcome(d.name, d.attempt)
        report = TaskReport(d.name, d.vertex, d.subtask, executor, d.attempt, state=state)
        if state is TaskState.FAILED:
            try:
                raise self.error(d.name)
            except Exception as e:
                report.failure = describe_failure(e)
        return report

    def cancel_job(self, executors: Sequence[Any], job_id: str) -> None:
        self.cancelled.append(job_id)

    def cancel_attempts(self, executor: Any, keys: Sequence[str]) -> None:
        self.cancelled_attempts.extend(keys)

    def names(self) -> list[str]:
        return [s.deployment.name for s in self.submitted]

    def attempts(self) -> list[str]:
        return [f"{s.deployment.name}#{s.deployment.attempt}" for s in self.submitted]
