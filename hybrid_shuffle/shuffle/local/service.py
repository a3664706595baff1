"""The default shuffle service: partitions stay in the executor that produced them.

As in Flink's TaskExecutor-local partitions, a producer subtask runs in an
executor actor and ``ray.put``s its buffers there, so that actor owns them
(Ray >= 2.56 has no ``ray.put(_owner=)``): no extra copy, and a partition lives
exactly as long as its executor.  Consumers reach it by polling that actor.
The cost is the remote-shuffle trade-off in reverse: losing the executor loses
its partitions (DESIGN.md, "Ownership").
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Sequence
from typing import Any

import pyarrow as pa
import ray

from hybrid_shuffle.config import ShuffleConfig
from hybrid_shuffle.shuffle.api import (
    PartitionDescriptor,
    PartitionId,
    PollRequest,
    PollResponse,
    ProducerDescriptor,
    ShuffleDescriptor,
    ShuffleEnvironment,
    ShuffleEnvironmentContext,
    ShuffleMaster,
    ShuffleServiceFactory,
)
from hybrid_shuffle.shuffle.input_gate import GateSpec, InputGate
from hybrid_shuffle.shuffle.memory_budget import MemoryBudget
from hybrid_shuffle.shuffle.result_partition import ResultPartition
from hybrid_shuffle.shuffle.writer import ResultPartitionWriter

__all__ = [
    "ExecutorLocalShuffleEnvironment",
    "ExecutorLocalShuffleMaster",
    "ExecutorLocalShuffleServiceFactory",
]


class ExecutorLocalShuffleMaster(ShuffleMaster):
    def __init__(self, config: ShuffleConfig) -> None:
        self._config = config
        self._registry: dict[PartitionId, ShuffleDescriptor] = {}
        self._pending: list[Any] = []

    def register_partition_with_producer(
        self, partition: PartitionDescriptor, producer: ProducerDescriptor
    ) -> ShuffleDescriptor:
        descriptor = ShuffleDescriptor(
            partition, producer.executor, f"executor {producer.executor_index}"
        )
        self._registry[partition.partition_id] = descriptor
        return descriptor

    def release_partitions_externally(self, descriptors: Sequence[ShuffleDescriptor]) -> None:
        """One call per executor, whatever the number of partitions."""
        by_location: dict[Any, list[PartitionId]] = defaultdict(list)
        for d in descriptors:
            if self._registry.pop(d.partition.partition_id, None) is not None:
                by_location[d.location].append(d.partition.partition_id)
        for location, ids in by_location.items():
            self._pending.append(location.release_partitions.remote(ids))

    def registered_partitions(self, job_id: str | None = None) -> list[ShuffleDescriptor]:
        return [
            d for d in self._registry.values() if job_id is None or d.partition.job_id == job_id
        ]

    def wait_for_releases(self, timeout: float) -> None:
        pending, self._pending = self._pending, []
        if pending:
            # a dead executor's partitions are gone anyway: do not fail on it
            ray.wait(pending, num_returns=len(pending), timeout=timeout)

    def close(self) -> None:
        self.release_partitions_externally(list(self._registry.values()))
        self.wait_for_releases(self._config.wait_timeout)


class ExecutorLocalShuffleEnvironment(ShuffleEnvironment):
    def __init__(
        self, context: ShuffleEnvironmentContext, put: Callable[[pa.Table], Any] = ray.put
    ) -> None:
        self._context = context
        self._config = context.config
        self._put = put
        self._budget = MemoryBudget(context.memory_budget)
        self._dir = os.path.join(
            context.spill_dir, context.session_id, f"executor-{context.executor_index}"
        )
        self._partitions: dict[PartitionId, ResultPartition] = {}
        self._released: set[PartitionId] = set()
        self._lock = threading.Lock()

    def create_result_partition_writers(
        self, partitions: Sequence[PartitionDescriptor], cancelled: threading.Event
    ) -> list[ResultPartitionWriter]:
        os.makedirs(self._dir, exist_ok=True)
        writers = []
        for descriptor in partitions:
            name = descriptor.partition_id.replace("/", "_")
            partition = ResultPartition(
                descriptor,
                self._budget,
                os.path.join(self._dir, f"{name}.arrows"),
                self._put,
                self._config.credits,
                self._config.wait_timeout,
                cancelled,
            )
            with self._lock:
                self._partitions[descriptor.partition_id] = partition
            writers.append(ResultPartitionWriter(partition, self._config.buffer_size))
        return writers

    def create_input_gates(self, inputs: Sequence[GateSpec]) -> list[InputGate]:
        max_buffers = max(self._config.credits, 1)
        return [InputGate(spec, max_buffers, self._config.wait_timeout) for spec in inputs]

    def poll(self, request: PollRequest) -> PollResponse:
        with self._lock:
            partition = self._partitions.get(request.partition_id)
            released = request.partition_id in self._released
        if partition is not None:
            return partition.poll(request)
        if released:
            return PollResponse(
                error=f"partition {request.partition_id} was already released",
                error_kind="not-found",
            )
        # deployed together with its producer, which has not created the partition yet
        time.sleep(min(request.wait_seconds, 0.05))
        return PollResponse(next_cursor=request.cursor)

    def release_partitions_locally(self, partition_ids: Collection[PartitionId]) -> None:
        for pid in partition_ids:
            with self._lock:
                partition = self._partitions.pop(pid, None)
                self._released.add(pid)
            if partition is not None:
                partition.release()

    def partitions_occupying_local_resources(self) -> set[PartitionId]:
        with self._lock:
            return set(self._partitions)

    def update_partition_info(self, consumer: str, descriptor: ShuffleDescriptor) -> bool:
        # partitions never move in this service: a consumer's descriptors stay valid
        return False

    def close(self) -> None:
        self.release_partitions_locally(list(self._partitions))
        shutil.rmtree(self._dir, ignore_errors=True)


class ExecutorLocalShuffleServiceFactory(ShuffleServiceFactory):
    name = "executor-local"

    def create_shuffle_master(self, config: ShuffleConfig) -> ExecutorLocalShuffleMaster:
        return ExecutorLocalShuffleMaster(config)

    def create_shuffle_environment(
        self, context: ShuffleEnvironmentContext
    ) -> ExecutorLocalShuffleEnvironment:
        return ExecutorLocalShuffleEnvironment(context)
