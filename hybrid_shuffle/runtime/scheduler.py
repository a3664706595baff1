"""Region scheduling of one job onto the session's executor slots, with region failover.

Regions (from the planner) deploy all-or-nothing, in topological order, first
in first out: a region deploys only when every region before it has deployed,
when enough slots are free, when its restart delay has passed, and when the
producers of its blocking inputs have finished.  Hybrid inputs add no
condition.  Deploying in that order is what makes scarce slots safe: a task
waiting for data only ever waits for producers that are already running, never
for one that needs its slot.

An adaptive vertex (``partitions: auto``) gets its parallelism when its region
comes up and all its producers have finished: from the bytes their reports say
they wrote (``AdaptiveParallelism.decide``, at most the session's slots).  The
regions not yet deployed are then computed again, with the new subtask count.  A
shuffled join's held probe producer is decided the same way when its region comes
up and its build side's producer has finished (``runtime.join_switch``).

Failover (``runtime.failover`` decides *what*, this loop *does* it): a failed
task, an executor Ray reports dead (the pool's watch refs wake the loop at
once), or a partition a service reports lost restarts the affected regions.  A
reader that found a partition's spill file corrupted (``PartitionCorruptedError``)
makes that partition lost too, so its producer runs again; the corruption counts
as a failure of the producer attempt that wrote it.
A lost partition of a cache the job reads is the exception: no region of the
job can produce it, so the loop raises ``CacheLostError`` and ``Job.run`` fills
the cache from its lineage and runs the job again.
Their running attempts are cancelled (they become *zombies*: their slots stay
taken until they report, and an executor whose zombie ignores the cancel for
``_ZOMBIE_GRACE`` seconds is replaced), their old partitions are released, and
they go back into the queue with the next attempt number after a backoff.  A
task that failed ``max_attempts`` times, or a failure no retry can mend, fails
the job: every task is cancelled, the other tasks get ``_FAILURE_GRACE``
seconds to report, executors still stuck in a task are replaced, and the root
cause is raised.  A job past its deadline fails the same way with a
``JobTimeoutError``.  Ctrl-C cancels the same way and re-raises
``KeyboardInterrupt``.

Speculation (``failover.speculation``, Flink's FLIP-168; ``plan.speculation`` decides
*which*, ``runtime.speculation`` *when*): after each turn, a slow running task of an eligible
vertex gets a second attempt (the next attempt number) on another executor's free
slot, whose partitions the tracker keeps apart from the consumers'.  The first of the
two to finish wins: the other becomes a zombie that reports nothing that counts (no
failure toward ``max_attempts``, no failover), and the tracker hands consumers the
winner's partitions only.  A copy that fails, loses its executor, or whose task's
hybrid-full consumer deploys meanwhile is dropped, not counted; a restart of the
task's region cancels both attempts.

The loop is plain state; its collaborators are injected: the ``Deployer``
builds descriptors, the ``PartitionTracker`` owns partitions and their release,
the ``ExecutorPool`` the executors (and their replacement), and the
``TaskTransport`` is the only way to an executor (tests fake both).
"""

from __future__ import annotations

import logging
import time
import traceback
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from hybrid_shuffle._words import plural
from hybrid_shuffle.config import FailoverConfig
from hybrid_shuffle.errors import (
    CacheLostError,
    ExecutorLostError,
    HybridShuffleError,
    JobFailedError,
    JobTimeoutError,
    PartitionCorruptedError,
    WaitTimeoutError,
    summary,
)
from hybrid_shuffle.plan.graph import JobVertex, VertexId
from hybrid_shuffle.plan.planner import Plan
from hybrid_shuffle.plan.regions import Region, TaskKey, pipelined_regions, vertex_regions
from hybrid_shuffle.plan.speculation import eligibility
from hybrid_shuffle.runtime.deployment import Deployer, producers_of
from hybrid_shuffle.runtime.failover import (
    FailoverTopology,
    FailureKind,
    backoff_delay,
    classify,
)
from hybrid_shuffle.runtime.failures import TaskFailure, first_line, root_cause, to_error
from hybrid_shuffle.runtime.join_switch import decide_joins, held
from hybrid_shuffle.runtime.locality import Holder, Weight, input_weights, subpartition_bytes
from hybrid_shuffle.runtime.partition_tracker import PartitionTracker
from hybrid_shuffle.runtime.placement import place, prefer_nodes
from hybrid_shuffle.runtime.progress import JobProgress, NoProgress
from hybrid_shuffle.runtime.slot_pool import ExecutorPool, SlotAllocation
from hybrid_shuffle.runtime.speculation import slow_tasks
from hybrid_shuffle.runtime.task import TaskReport, TaskState, attempt_key
from hybrid_shuffle.runtime.transport import TaskRef, TaskTransport
from hybrid_shuffle.shuffle.api import PartitionId, ProducerDescriptor

__all__ = ["Scheduler"]

log = logging.getLogger(__name__)

_SLICE = 0.5  # seconds between looks at the running tasks
_FAILURE_GRACE = 2.0  # seconds the other tasks of a failed job get to report
_ZOMBIE_GRACE = 5.0  # seconds a cancelled attempt may take to stop before its executor goes


@dataclass
class _Running:
    task: TaskKey
    executor: int
    name: str
    attempt: int
    #: a cancelled attempt (its region restarted): its report only counts its own failure
    zombie: bool = False
    cancelled_at: float = 0.0
    #: when it was deployed (monotonic seconds): speculation measures runtimes from it
    started: float = 0.0
    #: a speculative copy of the task's current attempt
    speculative: bool = False
    #: the loser of a speculation (a zombie whose report counts for nothing)
    loser: bool = False


class Scheduler:
    def __init__(
        self,
        plan: Plan,
        job_id: str,
        tracker: PartitionTracker,
        pool: ExecutorPool,
        transport: TaskTransport,
        buffer_size: int,
        wait_timeout: float,
        failover: FailoverConfig | None = None,
        timeout: float | None = None,
        result_service: str = "executor-local",
        progress: JobProgress | None = None,
    ) -> None:
        self.plan = plan
        self.graph = plan.graph
        self.job_id = job_id
        self.tracker = tracker
        self.pool = pool
        self.transport = transport
        self.wait_timeout = wait_timeout
        self.failover = failover or FailoverConfig()
        self.timeout = timeout
        #: told of tasks' ends, restarts and adaptive counts (``runtime.progress``)
        self.progress = progress or NoProgress()
        self.deployer = Deployer(
            plan.graph,
            job_id,
            tracker,
            buffer_size,
            wait_timeout,
            result_service,
            plan.config.operators,
            plan.collect,
        )
        self.slots = SlotAllocation(len(pool.executors))
        self.finished: set[TaskKey] = set()
        #: how many times regions were restarted (one failover, however many regions)
        self.restarts = 0
        self._reports: dict[TaskKey, TaskReport] = {}
        self._running: dict[TaskRef, _Running] = {}
        #: task -> the ref of its current attempt, while that runs
        self._current: dict[TaskKey, TaskRef] = {}
        self._deployed: set[TaskKey] = set()
        self._pending: list[Region] = []
        #: task -> when its next attempt may start (monotonic seconds)
        self._not_before: dict[TaskKey, float] = {}
        #: task -> (attempt, first line of the error) of each of its own failures
        self._failures: dict[TaskKey, list[tuple[int, str]]] = defaultdict(list)
        self._topology = FailoverTopology(self.graph, plan.regions)
        self._deadline = None if timeout is None else time.monotonic() + timeout
        #: (co-location key, subtask) -> the executor its first task ran on: its partners
        #: in later regions run there too
        self._pinned: dict[tuple[str, int], int] = {}
        #: task -> the node its last deployed attempt's partitions live on: consumers
        #: deployed later prefer it (``runtime.locality``)
        self._nodes: dict[TaskKey, str] = {}
        #: speculative attempts launched (``JobResult.speculative_attempts``)
        self.speculative_attempts = 0
        #: task -> the ref of its running speculative copy
        self._copies: dict[TaskKey, TaskRef] = {}
        #: task -> the highest attempt number it has used (a copy takes the next one)
        self._highest: dict[TaskKey, int] = {}
        #: task -> the runtime (seconds) of its finished attempt, for ``slow_tasks``
        self._runtimes: dict[TaskKey, float] = {}
        #: (task, attempt) already copied once: never copied again
        self._speculated: set[tuple[TaskKey, int]] = set()
        #: vertex -> why it cannot be speculated (None: it can); empty with speculation off
        speculation = self.failover.speculation.enabled
        self._why_not = eligibility(self.graph) if speculation else {}

    @property
    def reports(self) -> list[TaskReport]:
        """The report of every task's successful attempt."""
        return list(self._reports.values())

    def run(self) -> list[TaskReport]:
        """Run every region to its end; raises the root cause if the job failed."""
        regions = len(self.plan.regions)
        log.info("job %s: started, %d %s", self.job_id, regions, plural(regions, "region"))
        self._pending = list(self.plan.regions)
        self.progress.started(self.plan)
        return self._complete()

    def recover(self, error: BaseException) -> list[TaskReport]:
        """After ``run``: the driver lost part of the result (``error``: the holder of a
        sink's partition died while it read).  Once Ray reports the death (bounded),
        the lost partitions' producers run again as in any failover."""
        if isinstance(error, PartitionCorruptedError):
            self._lost_to_corruption(error, "the driver")
        deadline = time.monotonic() + self.wait_timeout
        while not self._pending:  # the losses put the sinks' regions back in the queue
            if time.monotonic() > deadline:
                raise error
            self._handle_losses()
            if not self._pending:
                time.sleep(_SLICE / 5)
        log.warning("job %s: the result was lost while read; recomputing it", self.job_id)
        return self._complete()

    def _complete(self) -> list[TaskReport]:
        try:
            self._schedule()
        except BaseException as e:
            # the error outlives the job (the caller holds it): its frames must not keep
            # task reports, whose buffer refs pin the job's objects
            traceback.clear_frames(e.__traceback__)
            self._fail(e)
        # cancelled attempts get a moment to stop (those that do not would run on in the
        # next job: their executors are replaced)
        self._wind_down()
        log.info(
            "job %s: finished, %d %s, %d %s",
            self.job_id,
            len(self._reports),
            plural(len(self._reports), "task"),
            self.restarts,
            plural(self.restarts, "restart"),
        )
        return self.reports

    # -- the loop ----------------------------------------------------------------------------

    def _schedule(self) -> None:
        while True:
            self._run_regions()
            self._handle_losses()  # a sink's executor that died after it finished
            if not (self._pending or self._current):
                return

    def _run_regions(self) -> None:
        while self._pending or self._current:
            self._check_deadline()
            self._handle_losses()
            while self._pending:
                if self._switched(self._pending[0]) or self._adapted(self._pending[0]):
                    continue  # the regions were computed again: look at the first one anew
                if not self._can_deploy(self._pending[0]):
                    break
                self._deploy(self._pending.pop(0))
            if not self._running and self._pending and not self._backing_off():
                raise WaitTimeoutError(  # plan.deployable refuses such a plan; never hang on it
                    f"job '{self.graph.job_name}': region {self._pending[0].id} can never deploy"
                )
            for ref in self._wait():
                if ref in self._running:
                    self._finished(ref)
            self._reap_zombies()
            self._speculate()

    def _wait(self) -> list[TaskRef]:
        """The refs that are ready within a slice: task reports, and executors' watches
        (a death wakes the loop at once).  With no task running, the loop only waits
        for a restart's backoff to pass."""
        refs = [*self._running, *self.pool.watches()]
        timeout = _SLICE
        if not self._running:
            starts = [t - time.monotonic() for t in self._not_before.values()]
            timeout = min(max(min(starts, default=_SLICE), 0.01), _SLICE)
        if not refs:
            time.sleep(timeout)
            return []
        return self.transport.wait(refs, timeout)

    def _check_deadline(self) -> None:
        if self._deadline is None or time.monotonic() < self._deadline:
            return
        running = sorted(self._running[r].name for r in self._current.values())
        raise JobTimeoutError(
            f"job '{self.graph.job_name}' did not finish within {self.timeout:g} s; still "
            f"running: {', '.join(running) or 'none (waiting for slots)'}; they were cancelled, "
            "so raise collect(timeout=) or failover.job_timeout, or fix the stuck function"
        )

    def _backing_off(self) -> bool:
        """Some restarted task is still to deploy (its delay may have just passed: the
        next turn deploys it)."""
        return bool(self._not_before)

    def _adapted(self, region: Region) -> bool:
        """Whether ``region``'s adaptive vertices just got their parallelism (they get it
        once their producers all finished)."""
        undecided = {vid for vid, _ in region.tasks if self.graph.vertices[vid].awaits_parallelism}
        vertices = [self.graph.vertices[vid] for vid in sorted(undecided)]
        if not vertices or not all(self._inputs_finished(v) for v in vertices):
            return False
        self._decide(vertices)
        return True

    def _switched(self, region: Region) -> bool:
        """Whether a join holding ``region`` was just decided (``runtime.join_switch``):
        the regions not yet deployed are then computed again."""
        done, reports = self.finished, self._reports.values()
        changes = decide_joins(self.graph, region, done, reports, self.job_id, self.tracker)
        if changes:
            self._recompute_regions()
            self.plan.vertex_region = vertex_regions(self.graph)  # the join's vertex is gone
        return bool(changes)

    def _can_deploy(self, region: Region) -> bool:
        if held(self.graph, region):  # a probe producer waits for its join's build side
            return False
        if any(self.graph.vertices[vid].awaits_parallelism for vid, _ in region.tasks):
            return False
        if region.slots > self.slots.free:
            return False
        if not all(self.slots.is_free(e) for e in self._pins(region).values()):
            return False  # a co-located partner's executor is still busy: wait for it
        now = time.monotonic()
        if any(self._not_before.get(t, 0.0) > now for t in region.tasks):
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
            vertex.parallelism = vertex.adaptive.decide(written, len(self.pool.executors))
            for edge in vertex.inputs:
                if edge.partitioner.shares_one_subpartition():
                    self.tracker.readers_decided(self.job_id, edge.name, vertex.parallelism)
            log.info(
                "job %s: '%s' runs %d %s (%d bytes in)",
                self.job_id,
                vertex.name,
                vertex.parallelism,
                plural(vertex.parallelism, "subtask"),
                written,
            )
            self.progress.parallelism_decided(vertex.name, vertex.parallelism)
        self._recompute_regions()

    def _recompute_regions(self) -> None:
        regions = pipelined_regions(self.graph)
        self.plan.regions = regions
        self._topology = FailoverTopology(self.graph, regions)
        self._pending = [r for r in regions if not any(t in self._deployed for t in r.tasks)]

    def _pins(self, region: Region) -> dict[TaskKey, int]:
        """The region's co-located tasks whose partners ran already: task -> executor."""
        pins = {}
        for vid, subtask in region.tasks:
            key = self.graph.vertices[vid].co_location
            if key is not None and (key, subtask) in self._pinned:
                pins[(vid, subtask)] = self._pinned[(key, subtask)]
        return pins

    def _deploy(self, region: Region) -> None:
        pins = self._pins(region)
        free = self.slots.candidates(later=self.pool.starting(), required=set(pins.values()))
        # slot sharing, balanced: groups apart, at most one subtask of a vertex per slot,
        # no slot with more than its share of the region's tasks (``runtime.placement``);
        # then each slot on the node holding most of its tasks' input (``runtime.locality``)
        vertices = self.graph.vertices
        units = {v: vertices[v].co_location for v, _ in region.tasks if vertices[v].co_location}
        placed = place(region.tasks, free[: region.slots], region.groups, units, pins)
        weights = self._input_weights(region)
        placed = prefer_nodes(placed, free, self.pool.nodes, weights, set(pins.values()))
        slots = sorted(set(placed.values()))
        self.slots.take(slots)
        for (vid, subtask), executor in placed.items():
            key = vertices[vid].co_location
            if key is not None:
                self._pinned.setdefault((key, subtask), executor)
        # register every partition of the region first: its consumers need the descriptors
        for task, executor in placed.items():
            producer = ProducerDescriptor(
                executor, self.pool.executors[executor], self.pool.nodes[executor]
            )
            for partition in self.deployer.output_partitions(task):
                self.tracker.register(task, partition, producer)
        for task in placed:  # a copy's partitions are never read: its consumer is here
            for edge in vertices[task[0]].inputs:
                for upstream in producers_of(self.graph, edge, task[1]):
                    if upstream in self._copies:
                        self._drop_copy(upstream, "a consumer of its task deployed")
        now = time.monotonic()
        for task, executor in placed.items():
            deployment = self.deployer.deployment(task)
            ref = self.transport.submit(self.pool.executors[executor], deployment)
            self._running[ref] = _Running(
                task, executor, deployment.name, deployment.attempt, started=now
            )
            self._highest[task] = max(self._highest.get(task, 0), deployment.attempt)
            self._current[task] = ref
            self._deployed.add(task)
            self._not_before.pop(task, None)
            self._nodes[task] = self.pool.nodes[executor]
            self.slots.task_started(executor)
        log.debug("job %s: deployed region %d on slots %s", self.job_id, region.id, slots)

    def _input_weights(self, region: Region) -> dict[TaskKey, dict[str, Weight]]:
        """Per task of ``region``, what each node holds of its input: over the deployed
        producers it reads, with the bytes of those that finished."""
        holders: dict[TaskKey, Holder] = {}
        for vid, subtask in region.tasks:
            for edge in self.graph.vertices[vid].inputs:
                for producer in producers_of(self.graph, edge, subtask):
                    if producer in self._deployed and producer not in holders:
                        holders[producer] = self._holder(producer)
        return {task: input_weights(self.graph, task, holders) for task in region.tasks}

    def _holder(self, producer: TaskKey) -> Holder:
        """Where a deployed producer's partitions live and, once it finished, their bytes
        per subpartition: exact while the tracker keeps what it handed over, else its
        report's bytes per edge split evenly (``locality.subpartition_bytes``)."""
        report = self._reports.get(producer)
        if report is None:  # still running
            return Holder(self._nodes[producer])
        edges = {e.name for e in self.graph.vertices[producer[0]].outputs}
        written = {w.edge: w.bytes for w in report.writes if w.edge in edges}
        sizes = {
            p.edge: subpartition_bytes(
                written[p.edge],
                p.num_subpartitions,
                self.tracker.handed_over(self.job_id, p.edge, producer[1]),
            )
            for p in self.deployer.output_partitions(producer)
            if p.edge in written
        }
        return Holder(self._nodes[producer], sizes)

    def _finished(self, ref: TaskRef) -> None:
        info = self._running.pop(ref)
        self.slots.task_finished(info.executor)
        try:
            report: TaskReport | None = self.transport.report(
                ref, self.wait_timeout, info.executor, info.name
            )
            error: HybridShuffleError | None = None
        except ExecutorLostError as e:  # its executor died under it: its own failure
            report, error = None, e
        if report is not None:
            self._lost_to_corruption(_library_error(report), info.name)
        if info.loser:  # lost a speculation: cancelled, whatever it reports
            return
        if info.speculative:
            self._copy_finished(info, report)
            return
        if info.zombie:
            if report is None:
                self._count(info, str(error))
            elif _failed_on_its_own(report):
                self._count(info, _line(report))
            return
        del self._current[info.task]
        if report is not None and report.state is TaskState.FINISHED:
            if info.task in self._copies:
                self._drop_copy(info.task, "the first attempt finished first")
            self._succeeded(info, report)
            return
        if report is None:
            assert error is not None
            self._count(info, str(error))
            cause = str(error)
        elif report.state is TaskState.FAILED and report.failure is not None:
            kind = classify(report.failure)
            if kind is FailureKind.FATAL:
                raise self._fatal(info, report.failure)
            if kind is FailureKind.OWN:
                self._count(info, _line(report))
            cause = _line(report)
        else:  # cancelled without our asking (cannot happen in a running job): run it again
            cause = "cancelled"
        self._restart({self._topology.region_of[info.task]}, f"task '{info.name}': {cause}")

    def _succeeded(self, info: _Running, report: TaskReport) -> None:
        report.executor_index = info.executor
        self.tracker.producer_finished(self.job_id, info.task, report.ready_buffers)
        report.ready_buffers = {}  # the job's reports must not pin its buffers
        self.tracker.consumer_finished(self.job_id, info.task)
        self._reports[info.task] = report
        self.finished.add(info.task)
        self._runtimes[info.task] = time.monotonic() - info.started
        self.progress.task_finished(report)

    # -- speculation -------------------------------------------------------------------------

    def _speculate(self) -> None:
        """Give each slow running task of an eligible vertex a second attempt (see the
        module docstring), while another executor has a free slot."""
        config = self.failover.speculation
        if not config.enabled:
            return
        now = time.monotonic()
        running: dict[VertexId, dict[TaskKey, float]] = defaultdict(dict)
        for task, ref in self._current.items():
            info = self._running[ref]
            eligible = task[0] in self._why_not and self._why_not[task[0]] is None
            if eligible and (task, info.attempt) not in self._speculated:
                running[task[0]][task] = now - info.started
        for vid, tasks in running.items():
            vertex = self.graph.vertices[vid]
            finished = [t for k, t in self._runtimes.items() if k[0] == vid]
            for task in slow_tasks(finished, tasks, vertex.parallelism, config):
                if not self._launch_copy(task):
                    return  # no free slot left

    def _launch_copy(self, task: TaskKey) -> bool:
        """Start a speculative attempt of ``task`` if it can run now; False when no
        other executor has a free slot."""
        info = self._running[self._current[task]]
        vertex = self.graph.vertices[task[0]]
        for edge in vertex.inputs:  # the copy reads its inputs whole, from the start
            if any(p not in self.finished for p in producers_of(self.graph, edge, task[1])):
                return True
        for edge in vertex.outputs:  # a consumer already reads the first attempt's
            target = self.graph.vertices[edge.target]
            if any((target.id, i) in self._deployed for i in range(target.parallelism)):
                return True
        starting = self.pool.starting()
        free = [e for e in self.slots.candidates() if e != info.executor and e not in starting]
        if not free:
            return False
        executor = free[0]
        attempt = self._highest.get(task, info.attempt) + 1
        self._highest[task] = attempt
        self._speculated.add((task, info.attempt))
        producer = ProducerDescriptor(
            executor, self.pool.executors[executor], self.pool.nodes[executor]
        )
        outputs = [
            self.tracker.register_speculative(task, partition, producer)
            for partition in self.deployer.output_partitions(task, attempt)
        ]
        deployment = self.deployer.deployment(task, attempt, outputs)
        self.slots.take([executor])
        ref = self.transport.submit(self.pool.executors[executor], deployment)
        self._running[ref] = _Running(
            task, executor, deployment.name, attempt, started=time.monotonic(), speculative=True
        )
        self._copies[task] = ref
        self.slots.task_started(executor)
        self.speculative_attempts += 1
        log.info(
            "job %s: task '%s' is slow (%.1f s); speculative attempt %d on executor %d",
            self.job_id,
            info.name,
            time.monotonic() - info.started,
            attempt,
            executor,
        )
        return True

    def _copy_finished(self, info: _Running, report: TaskReport | None) -> None:
        """A speculative copy reported: it wins if it finished, else it is dropped
        (its failure is not counted: the first attempt runs on)."""
        del self._copies[info.task]
        if report is None or report.state is not TaskState.FINISHED:
            self.tracker.speculation_dropped(self.job_id, info.task)
            log.info("job %s: speculative attempt of '%s' failed; dropped", self.job_id, info.name)
            return
        first = self._running[self._current.pop(info.task)]
        self._cancel_loser(first)
        self.tracker.speculation_won(self.job_id, info.task)
        self.deployer.attempts[info.task] = info.attempt
        self._nodes[info.task] = self.pool.nodes[info.executor]
        report.speculative = True
        log.info("job %s: speculative attempt of '%s' won", self.job_id, info.name)
        self._succeeded(info, report)

    def _drop_copy(self, task: TaskKey, why: str) -> None:
        """Cancel ``task``'s speculative copy and release its partitions."""
        copy = self._running[self._copies.pop(task)]
        self._cancel_loser(copy)
        self.tracker.speculation_dropped(self.job_id, task)
        log.info("job %s: speculative attempt of '%s' cancelled: %s", self.job_id, copy.name, why)

    def _cancel_loser(self, info: _Running) -> None:
        info.zombie, info.loser, info.cancelled_at = True, True, time.monotonic()
        key = attempt_key(self.job_id, info.name, info.attempt)
        self.transport.cancel_attempts(self.pool.executors[info.executor], [key])

    # -- failover ----------------------------------------------------------------------------

    def _fatal(self, info: _Running, failure: TaskFailure) -> HybridShuffleError:
        """The error of a task that failed in a way no retry mends (a SQL error on its
        rows, a Python function that raised): its operator, subtask and attempts, which
        count this one and the task's earlier failures of other kinds."""
        error = to_error(failure, info.name)
        if isinstance(error, JobFailedError):
            error.operator = self.graph.vertices[info.task[0]].name
            error.subtask = info.task[1]
            error.attempts = len(self._failures[info.task]) + 1
        return error

    def _count(self, info: _Running, line: str) -> None:
        """One more failure of ``info``'s task; fails the job at ``max_attempts``."""
        self._count_attempt(info.task, info.attempt, info.name, line)

    def _count_attempt(
        self, task: TaskKey, attempt: int, name: str, line: str, cause: Exception | None = None
    ) -> None:
        """One more failure of ``task`` (its attempt ``attempt``, named ``name``); fails
        the job at ``max_attempts`` (with ``cause``, the error of this failure, as the
        ``JobFailedError``'s ``__cause__`` if given)."""
        failures = self._failures[task]
        failures.append((attempt, line))
        if len(failures) < self.failover.max_attempts:
            return
        vertex, subtask = self.graph.vertices[task[0]].name, task[1]
        attempts = ", ".join(str(a) for a, _ in failures)
        raise JobFailedError(
            f"task '{name}' (operator '{vertex}', subtask {subtask}) failed in "
            f"attempt{'s' if len(failures) > 1 else ''} {attempts} (failover.max_attempts "
            f"{self.failover.max_attempts}): {failures[0][1]}",
            operator=vertex,
            subtask=subtask,
            attempts=len(failures),
        ) from cause

    def _lost_to_corruption(self, error: BaseException | None, reader: str) -> None:
        """``reader`` found a partition's spill file corrupted (``error``): the partition
        is lost, so its producer runs again (``_handle_losses``, or the restart closure
        of the reader's own region), and that counts as a failure of the producer
        attempt that wrote it: a disk that corrupts every attempt fails the job after
        ``max_attempts``, naming the file.  Counted once per partition, however many
        readers found it; a cache's partition is left to ``_check_cache_reads``."""
        if not isinstance(error, PartitionCorruptedError) or error.partition_id is None:
            return
        lost = self.tracker.corrupted(PartitionId(error.partition_id))
        if lost is None:
            return  # already lost (another reader told first) or released
        producer, partition = lost
        if partition.job_id != self.job_id or producer not in self._topology.region_of:
            return
        task: TaskKey = producer
        name = f"{self.graph.vertices[task[0]].name}[{task[1]}]"
        log.warning("job %s: %s (read by %s)", self.job_id, summary(error), reader)
        line = f"{type(error).__name__}: {summary(error)}"
        # the cause as a fresh value: the error's frames would pin what its reader held
        cause = PartitionCorruptedError(
            str(error), partition_id=error.partition_id, path=error.path
        )
        self._count_attempt(task, partition.attempt, name, line, cause)

    def _handle_losses(self) -> None:
        """Replace dead executors and restart the producers of partitions lost with them
        (or with a service's store) that are still to be read."""
        for index in self.pool.heal():
            log.warning("job %s: executor %d died; replaced", self.job_id, index)
            self.tracker.executor_lost(index)
        self.tracker.poll_lost()
        self._check_cache_reads()
        producers = self.tracker.lost_producers(self.job_id)
        region_of: dict[Any, int] = dict(self._topology.region_of)
        regions = {region_of[t] for t in producers if t in region_of}
        if regions:
            lost = plural(
                len(producers),
                "partition was lost with its holder",
                "partitions were lost with their holder",
            )
            self._restart(regions, f"{len(producers)} {lost}")

    def _check_cache_reads(self) -> None:
        """A cache this job reads lost a partition: no region of this job can produce it
        again, so the job stops here and ``Job.run`` fills the cache from its lineage
        and runs the job again (FLIP-205's fallback)."""
        for vertex in self.plan.cache_reads():
            cache = vertex.cache_read
            assert cache is not None
            pids = [d.partition.partition_id for d in cache.partitions]
            if not self.tracker.all_produced(pids):
                raise CacheLostError(
                    f"job '{self.graph.job_name}': a partition of cache '{cache.name}' was lost "
                    "with its holder"
                )

    def _restart(self, failed: set[int], cause: str) -> None:
        regions = self._topology.to_restart(
            failed,
            deployed=lambda r: any(t in self._deployed for t in self._topology.regions[r].tasks),
            available=lambda edge, producer: self.tracker.available(
                self.job_id, edge.name, producer[1]
            ),
        )
        tasks = [t for r in sorted(regions) for t in self._topology.regions[r].tasks]
        tasks = [t for t in tasks if t in self._deployed]
        if not tasks:
            return
        self.restarts += 1
        if self.restarts > self.failover.max_attempts * (len(self._topology.region_of) + 1):
            raise JobFailedError(
                f"job '{self.graph.job_name}' restarted {self.restarts - 1} "
                f"{plural(self.restarts - 1, 'time')} without "
                f"finishing (last: {cause}); the cluster keeps losing executors or partitions"
            )
        now = time.monotonic()
        cancel: dict[int, list[str]] = defaultdict(list)
        for task in tasks:
            for ref in (self._current.pop(task, None), self._copies.pop(task, None)):
                if ref is not None:
                    info = self._running[ref]
                    info.zombie, info.cancelled_at = True, now
                    info.loser = info.speculative  # a copy's report counts for nothing
                    cancel[info.executor].append(attempt_key(self.job_id, info.name, info.attempt))
            self._deployed.discard(task)
            self.finished.discard(task)
            self._reports.pop(task, None)
            self.tracker.task_restarted(self.job_id, task)
            self._runtimes.pop(task, None)
            self.progress.task_restarted(self.graph.vertices[task[0]].name, task[1])
            # past any speculative copy's attempt too: partition ids carry the attempt
            attempt = max(self.deployer.attempts.get(task, 0), self._highest.get(task, 0)) + 1
            self.deployer.attempts[task] = attempt
            self._not_before[task] = now + backoff_delay(self.failover.backoff, attempt)
        for executor, keys in cancel.items():
            self.transport.cancel_attempts(self.pool.executors[executor], keys)
        pending = {r.id for r in self._pending}
        self._pending.extend(self._topology.regions[r] for r in regions if r not in pending)
        self._pending = [r for r in self._pending if not any(t in self._deployed for t in r.tasks)]
        self._pending.sort(key=lambda r: r.id)
        log.warning(
            "job %s: restarting %d %s in %d %s (restart %d): %s",
            self.job_id,
            len(tasks),
            plural(len(tasks), "task"),
            len(regions),
            plural(len(regions), "region"),
            self.restarts,
            cause,
        )

    def _reap_zombies(self, grace: float = _ZOMBIE_GRACE) -> None:
        """Replace the executors of cancelled attempts that did not stop within ``grace``
        (a user function stuck in a loop or a sleep never sees the cancel)."""
        now = time.monotonic()
        stuck = {
            info.executor
            for info in self._running.values()
            if info.zombie and now - info.cancelled_at > grace
        }
        for index in stuck:
            log.warning("job %s: executor %d ignores a cancel; replacing it", self.job_id, index)
            self._replace_stuck(index)

    def _replace_stuck(self, index: int) -> None:
        """Replace a stuck executor: its tasks' refs are dropped (they will never report)
        and their slots freed, its partitions are lost, and the current attempts that
        ran beside the stuck one restart (not counted: they did not fail)."""
        beside: set[int] = set()
        for ref, info in list(self._running.items()):
            if info.executor == index:
                del self._running[ref]
                self.slots.task_finished(index)
                if info.speculative and not info.zombie:  # a copy: dropped, not restarted
                    del self._copies[info.task]
                    self.tracker.speculation_dropped(self.job_id, info.task)
                elif not info.zombie:
                    del self._current[info.task]
                    beside.add(self._topology.region_of[info.task])
        self.pool.replace(index)
        self.tracker.executor_lost(index)
        if beside:
            self._restart(beside, f"executor {index} was replaced (a cancelled task hung)")

    def _wind_down(self) -> list[BaseException]:
        """Collect the reports of the tasks still running for ``_FAILURE_GRACE`` seconds
        and return the errors they report; then replace the executors still running one
        (stuck in user code: a thread cannot be stopped, its process can)."""
        errors: list[BaseException] = []
        deadline = time.monotonic() + _FAILURE_GRACE
        while self._running and time.monotonic() < deadline:
            for ref in self.transport.wait(list(self._running), _SLICE / 5):
                info = self._running.pop(ref)
                self.slots.task_finished(info.executor)
                try:
                    report = self.transport.report(ref, self.wait_timeout, info.executor, info.name)
                except Exception as e:  # an executor died meanwhile
                    errors.append(e)
                    continue
                if report.state is TaskState.FAILED and report.failure is not None:
                    errors.append(to_error(report.failure, info.name))
        for index in {info.executor for info in self._running.values()}:
            self._replace_quietly(index)
        self._running.clear()
        self._current.clear()
        self._copies.clear()
        return errors

    def _replace_quietly(self, index: int) -> None:
        try:
            self.pool.replace(index)
        except HybridShuffleError as e:  # the next job fails with it if it matters
            log.warning("job %s: could not replace executor %d: %s", self.job_id, index, e)
        self.tracker.executor_lost(index)  # what it held (a cache's partitions) went with it

    # -- failing for good -------------------------------------------------------------------

    def _fail(self, error: BaseException) -> None:
        log.info("job %s: failed (%s), cancelling its tasks", self.job_id, type(error).__name__)
        self.transport.cancel_job(self.pool.executors, self.job_id)
        errors = [error, *self._wind_down()]
        if not isinstance(error, Exception):  # KeyboardInterrupt, SystemExit
            raise error
        raise root_cause(errors)


def _library_error(report: TaskReport) -> BaseException | None:
    """The library error a failed report carries, if any."""
    return None if report.failure is None else report.failure.library_error


def _failed_on_its_own(report: TaskReport) -> bool:
    failure = report.failure
    return (
        report.state is TaskState.FAILED
        and failure is not None
        and (classify(failure) is FailureKind.OWN)
    )


def _line(report: TaskReport) -> str:
    assert report.failure is not None
    return f"{report.failure.error_type}: {first_line(report.failure)}"
