"""The executor actor: one slot that runs tasks and holds their result partitions.

It is Flink's TaskExecutor with one slot, rebuilt as a threaded Ray actor: one
thread runs the current task while other threads serve consumers' polls of the
partitions this actor owns (``max_concurrency``).  Because the actor
``ray.put``s its buffers, it owns them; they live as long as it does
(DESIGN.md, "Ownership").
"""

from __future__ import annotations

import gc
import os
import threading
from collections import OrderedDict
from typing import Any

import ray

from hybrid_shuffle.config import ShuffleConfig
from hybrid_shuffle.runtime.task import TaskDeployment, TaskReport, run_task
from hybrid_shuffle.shuffle.api import (
    PartitionId,
    PollRequest,
    PollResponse,
    ShuffleEnvironmentContext,
)
from hybrid_shuffle.shuffle.service import load_shuffle_service

__all__ = ["MAX_CONCURRENCY", "Executor"]

#: threads per executor: one task, plus polls held open by consumers (up to 1 s each)
MAX_CONCURRENCY = 64
#: cancel flags kept: a session runs its jobs one after another, older flags are dead
_REMEMBERED_JOBS = 64


class Executor:
    def __init__(
        self,
        index: int,
        session_id: str,
        service: str,
        config: ShuffleConfig,
        memory_budget: int,
    ) -> None:
        self.index = index
        context = ShuffleEnvironmentContext(
            executor_index=index,
            session_id=session_id,
            config=config,
            memory_budget=memory_budget,
            spill_dir=config.spill_dir,
        )
        self.env = load_shuffle_service(service).create_shuffle_environment(context)
        #: job id -> its cancel flag, for the most recent jobs only (no per-job cleanup call)
        self._cancelled: OrderedDict[str, threading.Event] = OrderedDict()
        self._lock = threading.Lock()

    def ready(self) -> dict[str, Any]:
        return {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}

    def _cancel_event(self, job_id: str) -> threading.Event:
        with self._lock:
            event = self._cancelled.setdefault(job_id, threading.Event())
            self._cancelled.move_to_end(job_id)
            while len(self._cancelled) > _REMEMBERED_JOBS:
                self._cancelled.popitem(last=False)
            return event

    def run_task(self, deployment: TaskDeployment) -> TaskReport:
        cancelled = self._cancel_event(deployment.job_id)
        writers = self.env.create_result_partition_writers(deployment.outputs, cancelled)
        gates = self.env.create_input_gates(deployment.gates)
        return run_task(deployment, gates, writers, cancelled, self.index)

    def poll(self, request: PollRequest) -> PollResponse:
        return self.env.poll(request)

    def cancel_job(self, job_id: str) -> None:
        self._cancel_event(job_id).set()

    def release_partitions(self, partition_ids: list[PartitionId]) -> None:
        self.env.release_partitions_locally(partition_ids)

    def partitions_occupying_local_resources(self) -> set[PartitionId]:
        return self.env.partitions_occupying_local_resources()

    def owned_objects(self) -> int:
        """ObjectRefs this process still holds a reference to (leak checks)."""
        gc.collect()  # refs in unreachable cycles are not held by anyone
        worker: Any = ray._private.worker.global_worker
        return len(worker.core_worker.get_all_reference_counts())

    def close(self) -> None:
        self.env.close()
