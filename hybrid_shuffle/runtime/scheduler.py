"""Region scheduling of one job onto the session's executor slots.

Regions (from the planner) deploy all-or-nothing, in topological order, first
in first out: a region deploys only when every region before it has deployed,
when enough slots are free, and when the producers of its blocking inputs have
finished.  Hybrid inputs add no condition.  Deploying in that order is what
makes scarce slots safe: a task waiting for data only ever waits for producers
that are already running, never for one that needs its slot.

A producer that finishes before its consumers deploy hands its partitions
over in its report (``ResultPartition.finished_buffers``): the consumers get
the buffer refs (and a range partition's sample) in their deployment and never
poll it, which saves a round trip per channel.  A partition is released as
soon as every task reading it finished (Flink's region release strategy), and
the rest of the job's partitions when the job ends.

Every wait is bounded.  The first failing task cancels the job on every
executor; the scheduler then reports the root cause (a user error before the
"producer failed" errors it caused downstream).
"""

from __future__ import annotations

import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from hybrid_shuffle.errors import (
    ExecutorLostError,
    HybridShuffleError,
    JobCancelledError,
    JobFailedError,
    ProducerFailedError,
    WaitTimeoutError,
)
from hybrid_shuffle.plan.graph import JobEdge, VertexId
from hybrid_shuffle.plan.planner import Plan, Region, TaskKey
from hybrid_shuffle.runtime.task import TaskDeployment, TaskReport
from hybrid_shuffle.shuffle.api import (
    HandedOver,
    PartitionDescriptor,
    PartitionId,
    ProducerDescriptor,
    ShuffleDescriptor,
    ShuffleMaster,
)
from hybrid_shuffle.shuffle.input_gate import (
    ChannelSpec,
    GateSpec,
    InputGate,
    RangeRead,
    read_gates,
)
from hybrid_shuffle.shuffle.partition_type import partition_type
from hybrid_shuffle.shuffle.routing import Partitioner, PartitionerKind

__all__ = ["RESULT_EDGE", "Scheduler"]

RESULT_EDGE = "result"
_SLICE = 0.5
_FAILURE_GRACE = 3.0  # seconds to let the other tasks report after a failure


@dataclass
class _Running:
    task: TaskKey
    executor: int
    name: str


class Scheduler:
    def __init__(self, plan: Plan, master: ShuffleMaster, executors: Sequence[Any]) -> None:
        self.plan = plan
        self.graph = plan.graph
        self.master = master
        self.executors = list(executors)
        self.config = plan.config.shuffle
        self.job_id = f"{plan.graph.job_name}-{uuid.uuid4().hex[:8]}"
        self._descriptors: dict[tuple[str, int], ShuffleDescriptor] = {}
        self._registered: dict[str, ShuffleDescriptor] = {}
        self._finished: set[TaskKey] = set()
        self._reports: list[TaskReport] = []
        #: partition id -> what its finished producer handed over, for consumers deployed
        #: later to read without polling; dropped once every reader has its channel
        self._ready: dict[str, HandedOver] = {}
        #: partition id -> channels made for it / its readers that finished
        self._channels: Counter[str] = Counter()
        self._readers_done: Counter[str] = Counter()
        #: consumer task -> the partitions it reads, released once all their readers finished
        self._reads: dict[TaskKey, list[ShuffleDescriptor]] = {}

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> list[TaskReport]:
        # the memory budgets of the executors are whole again before this job writes
        self.master.wait_for_releases(self.config.wait_timeout)
        running: dict[Any, _Running] = {}
        try:
            self._schedule(running)
        except BaseException as e:
            # the error outlives the job (the caller holds it): its frames must not keep
            # task results, whose buffer refs pin the job's objects
            traceback.clear_frames(e.__traceback__)
            self._fail(running, e)
        return self._reports

    def _schedule(self, running: dict[Any, _Running]) -> None:
        free = list(range(len(self.executors)))
        #: executor -> tasks of its region still running there; the slot frees at zero
        occupied: dict[int, int] = {}
        pending: list[Region] = list(self.plan.regions)
        while pending or running:
            while pending and self._can_deploy(pending[0], len(free)):
                deployed = self._deploy(pending.pop(0), free)
                for info in deployed.values():
                    occupied[info.executor] = occupied.get(info.executor, 0) + 1
                running.update(deployed)
            if not running:
                raise WaitTimeoutError(  # cannot happen with a valid plan; never hang on it
                    f"job '{self.graph.job_name}': region {pending[0].id} can never deploy"
                )
            ready, _ = ray.wait(list(running), num_returns=1, timeout=_SLICE)
            for ref in ready:
                info = running.pop(ref)
                report = self._result(ref, info)
                report.executor_index = info.executor
                for pid, handed in report.ready_buffers.items():
                    if self._channels[pid] < _readers(self._registered[pid]):
                        self._ready[pid] = handed
                report.ready_buffers = {}  # the job's reports must not pin its buffers
                self._release_read(info.task)
                self._reports.append(report)
                self._finished.add(info.task)
                occupied[info.executor] -= 1
                if occupied[info.executor] == 0:
                    del occupied[info.executor]
                    free.append(info.executor)

    def _release_read(self, task: TaskKey) -> None:
        """Release the partitions ``task`` read that no other task still reads (as Flink's
        region release strategy does: a consumed partition is not needed any more)."""
        done = []
        for descriptor in self._reads.pop(task, []):
            pid = descriptor.partition.partition_id
            self._readers_done[pid] += 1
            if self._readers_done[pid] == _readers(descriptor):
                done.append(descriptor)
        if done:
            self.master.release_partitions_externally(done)

    def _can_deploy(self, region: Region, free_slots: int) -> bool:
        if region.slots > free_slots:
            return False
        for vid, subtask in region.tasks:
            for edge in self.graph.vertices[vid].inputs:
                if not edge.partition_type.is_blocking():
                    continue
                if any(p not in self._finished for p in self._producers_of(edge, subtask)):
                    return False
        return True

    def _producers_of(self, edge: JobEdge, consumer: int) -> list[TaskKey]:
        producer = self.graph.vertices[edge.source]
        if edge.partitioner.is_all_to_all():
            return [(producer.id, i) for i in range(producer.parallelism)]
        return [(producer.id, consumer)]

    # -- deployment ------------------------------------------------------------------------

    def _deploy(self, region: Region, free: list[int]) -> dict[Any, _Running]:
        slots = [free.pop(0) for _ in range(region.slots)]
        # slot sharing: the n-th subtask of every vertex of the region goes to the n-th slot
        seen: dict[VertexId, int] = {}
        placed: dict[TaskKey, int] = {}
        for task in region.tasks:
            nth = seen.get(task[0], 0)
            seen[task[0]] = nth + 1
            placed[task] = slots[nth]
        # register every partition of the region first: its consumers need the descriptors
        for task, executor in placed.items():
            for descriptor in self._output_partitions(task):
                registered = self.master.register_partition_with_producer(
                    descriptor, ProducerDescriptor(executor, self.executors[executor])
                )
                self._descriptors[(descriptor.edge, task[1])] = registered
                self._registered[descriptor.partition_id] = registered
        refs = {}
        for task, executor in placed.items():
            deployment = self._deployment(task)
            ref = self.executors[executor].run_task.remote(deployment)
            refs[ref] = _Running(task, executor, deployment.name)
        return refs

    def _output_partitions(self, task: TaskKey) -> list[PartitionDescriptor]:
        vid, subtask = task
        vertex = self.graph.vertices[vid]
        out = [self._partition(edge, subtask) for edge in vertex.outputs]
        if vid == self.graph.sink:
            out.append(
                PartitionDescriptor(
                    PartitionId(f"{self.job_id}/{RESULT_EDGE}/{subtask}"),
                    self.job_id,
                    RESULT_EDGE,
                    subtask,
                    1,
                    1,
                    partition_type("blocking"),
                    Partitioner(PartitionerKind.FORWARD),
                )
            )
        return out

    def _partition(self, edge: JobEdge, subtask: int) -> PartitionDescriptor:
        consumers = self.graph.vertices[edge.target].parallelism
        shared = edge.partitioner.shares_one_subpartition()
        forward = not edge.partitioner.is_all_to_all()
        return PartitionDescriptor(
            PartitionId(f"{self.job_id}/{edge.name}/{subtask}"),
            self.job_id,
            edge.name,
            subtask,
            num_subpartitions=1 if (shared or forward) else consumers,
            readers_per_subpartition=consumers if shared else 1,
            partition_type=edge.partition_type,
            partitioner=edge.partitioner,
        )

    def _deployment(self, task: TaskKey) -> TaskDeployment:
        vid, subtask = task
        vertex = self.graph.vertices[vid]
        gates = [self._gate(edge, subtask) for edge in vertex.inputs]
        self._reads[task] = [c.descriptor for g in gates for c in g.channels]
        outputs = [self._descriptors[(e.name, subtask)].partition for e in vertex.outputs]
        combiners = [e.combiner for e in vertex.outputs]
        if vid == self.graph.sink:
            outputs.append(self._descriptors[(RESULT_EDGE, subtask)].partition)
            combiners.append(None)
        return TaskDeployment(
            job_id=self.job_id,
            vertex=vertex.name,
            subtask=subtask,
            operators=vertex.operators,
            gates=gates,
            outputs=outputs,
            combiners=combiners,
            source_refs=None if vertex.source_splits is None else vertex.source_splits[subtask],
            buffer_size=self.config.buffer_size,
            wait_timeout=self.config.wait_timeout,
        )

    def _gate(self, edge: JobEdge, consumer: int) -> GateSpec:
        shared = edge.partitioner.shares_one_subpartition()
        channels = []
        for _, producer in self._producers_of(edge, consumer):
            descriptor = self._descriptors[(edge.name, producer)]
            if shared:
                subpartition, reader = 0, consumer
            elif edge.partitioner.is_all_to_all():
                subpartition, reader = consumer, 0
            else:
                subpartition, reader = 0, 0
            channels.append(self._channel(descriptor, producer, subpartition, reader))
        range_read = None
        if edge.partitioner.kind is PartitionerKind.RANGE:
            range_read = RangeRead(
                consumer,
                self.graph.vertices[edge.target].parallelism,
                edge.partitioner.keys[0],
                edge.partitioner.descending,
            )
        return GateSpec(edge.target_input, edge.name, consumer, tuple(channels), range_read)

    def _channel(
        self,
        descriptor: ShuffleDescriptor,
        producer: int,
        subpartition: int,
        reader: int,
    ) -> ChannelSpec:
        """A channel that reads handed-over buffers if its producer left them, else polls."""
        pid = descriptor.partition.partition_id
        self._channels[pid] += 1
        ready = self._ready.get(pid)
        if self._channels[pid] == _readers(descriptor):
            self._ready.pop(pid, None)  # every reader has its channel now
        if ready is None:
            return ChannelSpec(descriptor, producer, subpartition, reader)
        return ChannelSpec(
            descriptor,
            producer,
            subpartition,
            reader,
            tuple(ready.buffers[subpartition]),
            ready.finished_at,
            ready.sample,
        )

    # -- results and failures --------------------------------------------------------------

    def _result(self, ref: Any, info: _Running) -> TaskReport:
        try:
            report: TaskReport = ray.get(ref, timeout=self.config.wait_timeout)
        except RayActorError as e:
            raise ExecutorLostError(
                f"executor {info.executor} died while running task '{info.name}'; the "
                "partitions it held are lost, so rerun the job"
            ) from e
        except RayTaskError as e:
            raise _translate(e, info.name) from e
        return report

    def _fail(self, running: dict[Any, _Running], error: BaseException) -> None:
        for executor in self.executors:
            executor.cancel_job.remote(self.job_id)
        errors = [error]
        deadline = time.monotonic() + _FAILURE_GRACE
        while running and time.monotonic() < deadline:
            ready, _ = ray.wait(list(running), num_returns=len(running), timeout=_SLICE)
            for ref in ready:
                info = running.pop(ref)
                try:
                    self._result(ref, info)
                except BaseException as e:
                    errors.append(e)
        running.clear()  # tasks that outlived the grace period: drop their result refs
        self.release()
        raise _root_cause(errors)

    def read_result(self) -> pa.Table | None:
        """The sink's partitions, in subtask order, read by the driver."""
        sink = self.graph.vertices[self.graph.sink]
        tables: list[pa.Table] = []
        cancelled = threading.Event()
        for subtask in range(sink.parallelism):
            descriptor = self._descriptors[(RESULT_EDGE, subtask)]
            spec = GateSpec(0, RESULT_EDGE, -1, (self._channel(descriptor, subtask, 0, 0),))
            gate = InputGate(spec, max(self.config.credits, 8), self.config.wait_timeout)
            tables.extend(t for _, t in read_gates([gate], cancelled) if t is not None)
        if not tables:
            return None
        return _detach(pa.concat_tables(tables))

    def release(self) -> None:
        """Free every partition of this job, in the background: the job's result is
        already copied out, and the next job (or a leak check) waits for the releases
        first (``ShuffleMaster.wait_for_releases``)."""
        self._ready.clear()
        self.master.release_partitions_externally(self.master.registered_partitions(self.job_id))

    def edge_modes(self) -> dict[str, tuple[str, str]]:
        return {e.name: (e.mode, e.partitioner.describe()) for e in self.graph.edges}


def _readers(descriptor: ShuffleDescriptor) -> int:
    """How many consumer channels read this partition in all."""
    partition = descriptor.partition
    return partition.num_subpartitions * partition.readers_per_subpartition


def _translate(e: RayTaskError, task: str) -> BaseException:
    cause = getattr(e, "cause", None)
    if isinstance(cause, HybridShuffleError):
        translated = type(cause)(f"task '{task}': {cause}")
        return translated
    if cause is None:
        return JobFailedError(f"task '{task}' failed: {_first_line(e)}")
    if isinstance(cause, ModuleNotFoundError) or "No module named" in str(cause):
        return JobFailedError(
            f"task '{task}' failed: the executor cannot import {_first_line(cause)!r}; install "
            "that module where Ray runs, or define the function in the pipeline file"
        )
    return JobFailedError(f"task '{task}' failed: {type(cause).__name__}: {_first_line(cause)}")


def _first_line(e: BaseException) -> str:
    """The message without the remote traceback Ray appends."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _root_cause(errors: list[BaseException]) -> BaseException:
    """The error that explains the others: the user's before what it caused downstream."""

    def rank(e: BaseException) -> int:
        if isinstance(e, JobCancelledError):
            return 4
        if isinstance(e, ProducerFailedError):
            return 3
        if isinstance(e, (WaitTimeoutError, GetTimeoutError)):
            return 2
        if isinstance(e, ExecutorLostError):
            return 1
        return 0

    return min(errors, key=rank)


def _detach(table: pa.Table) -> pa.Table:
    """Copy out of the object store so the result does not pin the job's objects."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return pa.ipc.open_stream(sink.getvalue()).read_all()
