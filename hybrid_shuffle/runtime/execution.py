"""One job's run, from a plan to the result table: schedule, read the result, release.

The driver reads the sink's result partitions through the shuffle service's own
input gates (a driver-side ``ShuffleEnvironment``), one subtask after another
so a sorted job's partitions come back in key order, then copies the table out
of the object store so the result pins nothing.  If a sink's partition is lost
while it is read (its holder died after the job ended, or its spill file is
corrupted), the scheduler recovers it like any failover and the read starts
again.  Whatever happens, every
partition of the job is released afterwards (in the background: the next job
and the leak checks wait for the releases), except, when the job succeeded, the
partitions of the caches it filled: those are promoted to outlive it, and
``Executed.cache_partitions`` says which they are.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from hybrid_shuffle.errors import (
    ExecutorLostError,
    PartitionCorruptedError,
    PartitionNotFoundError,
)
from hybrid_shuffle.plan.cache import cache_edge
from hybrid_shuffle.plan.graph import VertexId
from hybrid_shuffle.plan.planner import Plan
from hybrid_shuffle.runtime.deployment import RESULT_EDGE, Deployer
from hybrid_shuffle.runtime.partition_tracker import PartitionTracker
from hybrid_shuffle.runtime.progress import JobProgress
from hybrid_shuffle.runtime.scheduler import Scheduler
from hybrid_shuffle.runtime.slot_pool import ExecutorPool
from hybrid_shuffle.runtime.task import TaskReport
from hybrid_shuffle.runtime.transport import TaskTransport
from hybrid_shuffle.shuffle.api import (
    BufferRef,
    ShuffleDescriptor,
    ShuffleEnvironment,
    ShuffleMaster,
)

__all__ = ["Executed", "execute"]

log = logging.getLogger(__name__)


@dataclass
class Executed:
    job_id: str
    #: the result, or None when the sink produced no batch at all
    table: pa.Table | None
    reports: list[TaskReport]
    #: how many times regions were restarted (``JobResult.restarts``)
    restarts: int = 0
    #: the vertices that filled a cache -> the cache's partitions, one per subtask
    cache_partitions: dict[VertexId, list[ShuffleDescriptor]] = field(default_factory=dict)
    #: ``Plan.keep_blocks``: the result's buffers as refs, in subtask order (``table`` None)
    blocks: list[Any] | None = None
    #: speculative attempts launched (``JobResult.speculative_attempts``)
    speculative_attempts: int = 0
    #: epoch seconds of ``executed`` (entered), ``tasks_done``, ``result_read`` and
    #: ``returned``, for ``JobResult.profile()`` (``query_profile.RunTimes``)
    times: dict[str, float] = field(default_factory=dict)


def execute(
    plan: Plan,
    *,
    tracker: PartitionTracker,
    master: ShuffleMaster,
    pool: ExecutorPool,
    transport: TaskTransport,
    reader: ShuffleEnvironment,
    timeout: float | None = None,
    progress: JobProgress | None = None,
) -> Executed:
    """Run ``plan`` on the pool's executors and return its result (see the module
    docstring); ``timeout`` bounds the whole job (``JobTimeoutError``); ``progress``
    is told what the tasks do (``runtime.progress``: the scheduler calls it)."""
    times = {"executed": time.time()}
    shuffle = plan.config.shuffle
    job_id = f"{plan.graph.job_name}-{uuid.uuid4().hex[:8]}"
    # the memory budgets of the executors are whole again before this job writes
    master.wait_for_releases(shuffle.wait_timeout)
    scheduler = Scheduler(
        plan,
        job_id,
        tracker,
        pool,
        transport,
        shuffle.buffer_size,
        shuffle.wait_timeout,
        plan.config.failover,
        timeout,
        shuffle.service,
        progress,
    )
    table = None
    blocks = None
    try:
        reports = scheduler.run()
        times["tasks_done"] = time.time()
        if plan.collect and plan.keep_blocks:
            blocks = _result_blocks(tracker, job_id, plan, transport)
        for attempt in range(
            plan.config.failover.max_attempts if plan.collect and blocks is None else 0
        ):
            try:
                table = _read_result(reader, scheduler.deployer, plan)
                break
            except (ExecutorLostError, PartitionNotFoundError, PartitionCorruptedError) as e:
                # a sink's executor (or store) died after the job ended, or a spill file of
                # its result is corrupted: nothing is lost while the producers can run again
                if attempt + 1 == plan.config.failover.max_attempts:
                    raise
                reports = scheduler.recover(e)
        times["result_read"] = time.time()
        caches = _promote_caches(plan, job_id, tracker)
    finally:
        tracker.release_job(job_id)
    executed = Executed(
        job_id, table, reports, scheduler.restarts, caches, blocks, scheduler.speculative_attempts
    )
    executed.times = {**times, "returned": time.time()}
    return executed


def _result_blocks(
    tracker: PartitionTracker, job_id: str, plan: Plan, transport: TaskTransport
) -> list[Any] | None:
    """The refs of the sink's result buffers, in subtask order, as their holders handed
    them over (the driver borrows them: see ``hybrid_shuffle.ray_data``; a small buffer
    that came inline is put by the driver, which owns it); None when a partition was
    not handed over whole (it spilled), and must be read instead."""
    blocks: list[Any] = []
    for subtask in range(plan.graph.vertices[plan.graph.sink].parallelism):
        handed = tracker.handed_over(job_id, RESULT_EDGE, subtask)
        if handed is None:
            return None
        blocks.extend(_block(b, transport) for b in handed.buffers[0] if b.rows)
    return blocks


def _block(buffer: BufferRef, transport: TaskTransport) -> Any:
    return transport.put(buffer.ref.table) if buffer.inline else buffer.ref


def _promote_caches(
    plan: Plan, job_id: str, tracker: PartitionTracker
) -> dict[VertexId, list[ShuffleDescriptor]]:
    """The partitions of the caches the job filled, kept past its end."""
    filled = {}
    for vertex in plan.cache_fills():
        assert vertex.cache_fill is not None
        edge = cache_edge(vertex.cache_fill.name)
        descriptors = [tracker.descriptor(job_id, edge, i) for i in range(vertex.parallelism)]
        tracker.promote([d.partition.partition_id for d in descriptors])
        filled[vertex.id] = descriptors
    return filled


def _read_result(reader: ShuffleEnvironment, deployer: Deployer, plan: Plan) -> pa.Table | None:
    """The sink's partitions, in subtask order, copied out of the object store."""
    sink = plan.graph.vertices[plan.graph.sink]
    tables: list[pa.Table] = []
    never = threading.Event()
    for subtask in range(sink.parallelism):
        gates = reader.create_input_gates([deployer.result_gate(subtask)])
        tables.extend(t for _, t in reader.read(gates, never) if t is not None)
    if not tables:
        return None
    with_rows = [t for t in tables if t.num_rows]
    # a subtask without rows gives a zero-row table of its schema; it is only needed
    # when no subtask has rows (an empty result keeps its columns)
    return _detach(pa.concat_tables(with_rows or tables[:1]))


def _detach(table: pa.Table) -> pa.Table:
    """Copy out of the object store so the result does not pin the job's objects."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return pa.ipc.open_stream(sink.getvalue()).read_all()
