"""The default shuffle service: partitions stay in the executor that produced them.

As in Flink's TaskExecutor-local partitions, a producer subtask runs in an
executor actor and ``ray.put``s its buffers there, so that actor owns them
(Ray >= 2.56 has no ``ray.put(_owner=)``): no extra copy, and a partition lives
exactly as long as its executor.  Consumers reach it by polling that actor.
The cost is the remote-shuffle trade-off in reverse: losing the executor loses
its partitions (docs/architecture.md, "Who owns what").
"""

from __future__ import annotations

import logging
import os
import threading
from collections import defaultdict
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any

import pyarrow as pa
import ray

from hybrid_shuffle.shuffle.api import (
    InputGate,
    InputGateDescriptor,
    PartitionDescriptor,
    PartitionId,
    PollRequest,
    PollResponse,
    ProducerDescriptor,
    ShuffleDescriptor,
    ShuffleEnvironmentContext,
    ShuffleMasterContext,
)
from hybrid_shuffle.shuffle.local.input_gate import PollingInputGate, read_gates
from hybrid_shuffle.shuffle.local.partition_holder import PartitionHolder
from hybrid_shuffle.shuffle.writer import ResultPartitionWriter

__all__ = [
    "ExecutorLocalShuffleEnvironment",
    "ExecutorLocalShuffleMaster",
    "ExecutorLocalShuffleServiceFactory",
]

log = logging.getLogger(__name__)


class ExecutorLocalShuffleMaster:
    """Partitions are registered where their producer runs; releasing one is a message
    to that executor."""

    def __init__(self, context: ShuffleMasterContext) -> None:
        self._context = context
        self._registry: dict[PartitionId, ShuffleDescriptor] = {}
        self._pending: list[Any] = []

    def register_partition_with_producer(
        self, partition: PartitionDescriptor, producer: ProducerDescriptor
    ) -> ShuffleDescriptor:
        descriptor = ShuffleDescriptor(
            partition,
            producer.executor,
            f"executor {producer.executor_index}",
            producer.executor_index,
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
            log.debug("releasing %d partitions on %s", len(ids), location)
            self._pending.append(location.release_partitions.remote(ids))

    def wait_for_releases(self, timeout: float) -> None:
        pending, self._pending = self._pending, []
        if pending:
            # a dead executor's partitions are gone anyway: do not fail on it
            ray.wait(pending, num_returns=len(pending), timeout=timeout)

    def lost_partitions(self) -> list[PartitionId]:
        """Nothing: the holders are executors, whose death the scheduler sees."""
        return []

    def close(self) -> None:
        self.release_partitions_externally(list(self._registry.values()))
        self.wait_for_releases(self._context.wait_timeout)


class ExecutorLocalShuffleEnvironment:
    """The executor's partitions are the ones its own tasks wrote (a ``PartitionHolder``
    under ``executor-<i>/`` with this executor's share of the memory budget)."""

    def __init__(
        self, context: ShuffleEnvironmentContext, put: Callable[[pa.Table], Any] = ray.put
    ) -> None:
        self._context = context
        self._holder = PartitionHolder(
            context, os.path.join(context.spill_dir, f"executor-{context.executor_index}"), put
        )

    def create_result_partition_writers(
        self, partitions: Sequence[ShuffleDescriptor], cancelled: threading.Event
    ) -> list[ResultPartitionWriter]:
        return [
            ResultPartitionWriter(
                self._holder.create(registered.partition, cancelled), self._context.buffer_size
            )
            for registered in partitions
        ]

    def create_input_gates(self, inputs: Sequence[InputGateDescriptor]) -> list[PollingInputGate]:
        max_buffers = max(self._context.credits, 1)
        return [PollingInputGate(spec, max_buffers, self._context.wait_timeout) for spec in inputs]

    def read(
        self, gates: Sequence[InputGate], cancelled: threading.Event
    ) -> Iterator[tuple[InputGateDescriptor, pa.Table | None]]:
        polling = [g for g in gates if isinstance(g, PollingInputGate)]
        if len(polling) != len(gates):
            raise TypeError("gates must come from this environment's create_input_gates")
        return read_gates(polling, cancelled)

    def poll_many(self, requests: Sequence[PollRequest], wait_seconds: float) -> list[PollResponse]:
        return self._holder.poll_many(requests, wait_seconds)

    def release_partitions_locally(self, partition_ids: Collection[PartitionId]) -> None:
        self._holder.release(partition_ids)

    def partitions_occupying_local_resources(self) -> set[PartitionId]:
        return self._holder.held()

    def close(self) -> None:
        self._holder.close()


class ExecutorLocalShuffleServiceFactory:
    name = "executor-local"

    def create_shuffle_master(self, context: ShuffleMasterContext) -> ExecutorLocalShuffleMaster:
        return ExecutorLocalShuffleMaster(context)

    def create_shuffle_environment(
        self, context: ShuffleEnvironmentContext
    ) -> ExecutorLocalShuffleEnvironment:
        return ExecutorLocalShuffleEnvironment(context)
