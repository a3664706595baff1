"""Region scheduling of one job onto the session's executor slots: the run loop.

Regions (from the planner) deploy all-or-nothing, in topological order, first
in first out: a region deploys only when every region before it has deployed,
when enough slots are free, and when the producers of its blocking inputs have
finished.  Hybrid inputs add no condition.  Deploying in that order is what
makes scarce slots safe: a task waiting for data only ever waits for producers
that are already running, never for one that needs its slot.

An adaptive vertex (``partitions: auto``) gets its parallelism when its region
comes up and all its producers have finished: from the bytes their reports say
they wrote (``AdaptiveParallelism.decide``, at most the session's slots).  The
regions not yet deployed are then computed again, with the new subtask count.

The loop is plain state; its collaborators are injected: the ``Deployer``
builds descriptors, the ``PartitionTracker`` owns partitions and their release,
the ``SlotAllocation`` the slots, and the ``TaskTransport`` is the only way to
an executor (its tests fake it, and nothing else).

Every wait is bounded.  The first failing task cancels the job on every
executor; the loop then collects what the other tasks report for a short grace
period and raises the root cause (a user error before the "producer failed"
errors it caused downstream).  Ctrl-C cancels the same way and re-raises
``KeyboardInterrupt``.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hybrid_shuffle.errors import JobCancelledError, WaitTimeoutError
from hybrid_shuffle.plan.graph import JobVertex
from hybrid_shuffle.plan.planner import Plan
from hybrid_shuffle.plan.regions import Region, TaskKey, pipelined_regions
from hybrid_shuffle.runtime.deployment import Deployer, producers_of
from hybrid_shuffle.runtime.failures import root_cause, to_error
from hybrid_shuffle.runtime.partition_tracker import PartitionTracker
from hybrid_shuffle.runtime.slot_pool import SlotAllocation
from hybrid_shuffle.runtime.task import TaskReport, TaskState
from hybrid_shuffle.runtime.transport import TaskRef, TaskTransport
from hybrid_shuffle.shuffle.api import ProducerDescriptor

__all__ = ["Scheduler"]

log = logging.getLogger(__name__)

_SLICE = 0.5  # seconds between looks at the running tasks
_FAILURE_GRACE = 2.0  # seconds the other tasks of a failed job get to report


@dataclass
class _Running:
    task: TaskKey
    executor: int
    name: str


class Scheduler:
    def __init__(
        self,
        plan: Plan,
        job_id: str,
        tracker: PartitionTracker,
        executors: Sequence[Any],
        transport: TaskTransport,
        buffer_size: int,
        wait_timeout: float,
    ) -> None:
        self.plan = plan
        self.graph = plan.graph
        self.job_id = job_id
        self.tracker = tracker
        self.executors = list(executors)
        self.transport = transport
        self.wait_timeout = wait_timeout
        self.deployer = Deployer(plan.graph, job_id, tracker, buffer_size, wait_timeout)
        self.slots = SlotAllocation(len(self.executors))
        self.finished: set[TaskKey] = set()
        self.reports: list[TaskReport] = []
        self._running: dict[TaskRef, _Running] = {}
        self._deployed: set[TaskKey] = set()
        self._pending: list[Region] = []

    def run(self) -> list[TaskReport]:
        """Run every region to its end; raises the root cause if a task failed."""
        log.info("job %s: started, %d regions", self.job_id, len(self.plan.regions))
        try:
            self._schedule()
        except BaseException as e:
            # the error outlives the job (the caller holds it): its frames must not keep
            # task reports, whose buffer refs pin the job's objects
            traceback.clear_frames(e.__traceback__)
            self._fail(e)
        log.info("job %s: finished, %d tasks", self.job_id, len(self.reports))
        return self.reports

    def _schedule(self) -> None:
        self._pending = list(self.plan.regions)
        while self._pending or self._running:
            while self._pending:
                if self._adapted(self._pending[0]):
                    continue  # the regions were computed again: look at the first one anew
                if not self._can_deploy(self._pending[0]):
                    break
                self._deploy(self._pending.pop(0))
            if not self._running:
                raise WaitTimeoutError(  # cannot happen with a valid plan; never hang on it
                    f"job '{self.graph.job_name}': region {self._pending[0].id} can never deploy"
                )
            for ref in self.transport.wait(list(self._running), _SLICE):
                self._finished(ref)

    def _adapted(self, region: Region) -> bool:
        """Whether ``region``'s adaptive vertices just got their parallelism (they get it
        once their producers all finished)."""
        undecided = {vid for vid, _ in region.tasks if self.graph.vertices[vid].awaits_parallelism}
        vertices = [self.graph.vertices[vid] for vid in sorted(undecided)]
        if not vertices or not all(self._inputs_finished(v) for v in vertices):
            return False
        self._decide(vertices)
        return True

    def _can_deploy(self, region: Region) -> bool:
        if any(self.graph.vertices[vid].awaits_parallelism for vid, _ in region.tasks):
            return False
        if region.slots > self.slots.free:
            return False
        for vid, subtask in region.tasks:
            for edge in self.graph.vertices[vid].inputs:
                if not edge.partition_type.is_blocking():
                    continue
                if any(p not in self.finished for p in producers_of(self.graph, edge, subtask)):
                    return False
        return True

    def _inputs_finished(self, vertex: JobVertex) -> bool:
        return all(
            p in self.finished
            for edge in vertex.inputs
            for p in producers_of(self.graph, edge, 0)  # all-to-all: every producer
        )

    def _decide(self, vertices: list[JobVertex]) -> None:
        """Give adaptive ``vertices`` their parallelism, then recompute the regions that
        have not deployed (see the module docstring)."""
        for vertex in vertices:
            assert vertex.adaptive is not None
            edges = {e.name for e in vertex.inputs}
            written = sum(w.bytes for r in self.reports for w in r.writes if w.edge in edges)
            vertex.parallelism = vertex.adaptive.decide(written, len(self.executors))
            for edge in vertex.inputs:
                if edge.partitioner.shares_one_subpartition():
                    self.tracker.readers_decided(self.job_id, edge.name, vertex.parallelism)
            log.info(
                "job %s: '%s' runs %d subtasks (%d bytes in)",
                self.job_id,
                vertex.name,
                vertex.parallelism,
                written,
            )
        regions = pipelined_regions(self.graph)
        self.plan.regions = regions
        self._pending = [r for r in regions if not any(t in self._deployed for t in r.tasks)]

    def _deploy(self, region: Region) -> None:
        slots = self.slots.acquire(region.slots)
        # slot sharing: the n-th subtask of every vertex of the region goes to the n-th slot
        seen: dict[Any, int] = {}
        placed: dict[TaskKey, int] = {}
        for task in region.tasks:
            nth = seen.get(task[0], 0)
            seen[task[0]] = nth + 1
            placed[task] = slots[nth]
        # register every partition of the region first: its consumers need the descriptors
        for task, executor in placed.items():
            producer = ProducerDescriptor(executor, self.executors[executor])
            for partition in self.deployer.output_partitions(task):
                self.tracker.register(task, partition, producer)
        for task, executor in placed.items():
            deployment = self.deployer.deployment(task)
            ref = self.transport.submit(self.executors[executor], deployment)
            self._running[ref] = _Running(task, executor, deployment.name)
            self._deployed.add(task)
            self.slots.task_started(executor)
        log.debug("job %s: deployed region %d on slots %s", self.job_id, region.id, slots)

    def _finished(self, ref: TaskRef) -> None:
        info = self._running.pop(ref)
        report = self.transport.report(ref, self.wait_timeout, info.executor, info.name)
        if report.state is TaskState.FAILED:
            assert report.failure is not None
            raise to_error(report.failure, info.name)
        if report.state is TaskState.CANCELED:
            raise JobCancelledError(f"task '{info.name}' was cancelled")
        report.executor_index = info.executor
        self.tracker.producer_finished(self.job_id, info.task, report.ready_buffers)
        report.ready_buffers = {}  # the job's reports must not pin its buffers
        self.tracker.consumer_finished(self.job_id, info.task)
        self.reports.append(report)
        self.finished.add(info.task)
        self.slots.task_finished(info.executor)

    def _fail(self, error: BaseException) -> None:
        log.info("job %s: failed (%s), cancelling its tasks", self.job_id, type(error).__name__)
        self.transport.cancel_job(self.executors, self.job_id)
        errors = [error]
        deadline = time.monotonic() + _FAILURE_GRACE
        while self._running and time.monotonic() < deadline:
            for ref in self.transport.wait(list(self._running), _SLICE / 5):
                info = self._running.pop(ref)
                try:
                    report = self.transport.report(ref, self.wait_timeout, info.executor, info.name)
                except Exception as e:  # an executor died meanwhile
                    errors.append(e)
                    continue
                if report.state is TaskState.FAILED and report.failure is not None:
                    errors.append(to_error(report.failure, info.name))
        self._running.clear()  # tasks that outlived the grace period: drop their refs
        if not isinstance(error, Exception):  # KeyboardInterrupt, SystemExit
            raise error
        raise root_cause(errors)
