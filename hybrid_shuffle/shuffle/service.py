"""Choosing the shuffle service named by ``shuffle.service`` (or an edge's ``service``),
and the per-service composites the session and the executors hold.

A built-in name or a dotted path (``package.module:Factory`` or
``package.module.Factory``) to a class implementing the ``ShuffleServiceFactory``
protocol, so a second implementation plugs in without touching the scheduler
(FLIP-31).
"""

from __future__ import annotations

import importlib
import threading
from collections import defaultdict
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

import pyarrow as pa

from hybrid_shuffle.errors import ConfigError
from hybrid_shuffle.shuffle.api import (
    InputGate,
    InputGateDescriptor,
    PartitionDescriptor,
    PartitionId,
    PollRequest,
    PollResponse,
    ProducerDescriptor,
    ResultPartitionWriter,
    ShuffleDescriptor,
    ShuffleEnvironment,
    ShuffleEnvironmentContext,
    ShuffleMaster,
    ShuffleMasterContext,
    ShuffleServiceFactory,
)
from hybrid_shuffle.shuffle.external.service import ExternalShuffleServiceFactory
from hybrid_shuffle.shuffle.local.service import ExecutorLocalShuffleServiceFactory

__all__ = ["BUILTIN_SERVICES", "ShuffleEnvironments", "ShuffleMasters", "load_shuffle_service"]

BUILTIN_SERVICES: dict[str, Callable[[], ShuffleServiceFactory]] = {
    ExecutorLocalShuffleServiceFactory.name: ExecutorLocalShuffleServiceFactory,
    ExternalShuffleServiceFactory.name: ExternalShuffleServiceFactory,
}


def load_shuffle_service(name: str) -> ShuffleServiceFactory:
    if name in BUILTIN_SERVICES:
        return BUILTIN_SERVICES[name]()
    hint = (
        f"use one of: {', '.join(BUILTIN_SERVICES)}, or a dotted path 'package.module:Factory' "
        "to a class implementing the ShuffleServiceFactory protocol"
    )
    module_name, sep, attr = name.partition(":")
    if not sep:
        module_name, _, attr = name.rpartition(".")
    if not module_name or not attr:
        raise ConfigError(f"shuffle.service: '{name}' is not a shuffle service; {hint}")
    try:
        factory_class = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"shuffle.service: cannot import '{name}' ({e}); {hint}") from e
    factory = factory_class() if isinstance(factory_class, type) else None
    if not isinstance(factory, ShuffleServiceFactory):
        raise ConfigError(
            f"shuffle.service: '{name}' does not implement the ShuffleServiceFactory protocol; "
            f"{hint}"
        )
    return factory


@runtime_checkable
class HoldsStores(Protocol):
    """A master whose service keeps partitions in actors of its own."""

    def stores(self) -> list[tuple[str, Any]]: ...


class ShuffleMasters:
    """The session's masters, one per service its edges use, behind the ``ShuffleMaster``
    interface: each partition goes to the master of its descriptor's ``service``
    (``shuffle.service``, or ``edges.NAME.service`` for one edge).  A master is created
    on first use; the default one at once, so a bad ``shuffle.service`` fails early."""

    def __init__(self, context: ShuffleMasterContext, default: str) -> None:
        self._context = context
        self._masters: dict[str, ShuffleMaster] = {}
        self.master(default)

    def master(self, service: str) -> ShuffleMaster:
        if service not in self._masters:
            factory = load_shuffle_service(service)
            self._masters[service] = factory.create_shuffle_master(self._context)
        return self._masters[service]

    def register_partition_with_producer(
        self, partition: PartitionDescriptor, producer: ProducerDescriptor
    ) -> ShuffleDescriptor:
        return self.master(partition.service).register_partition_with_producer(partition, producer)

    def release_partitions_externally(self, descriptors: Sequence[ShuffleDescriptor]) -> None:
        by_service: dict[str, list[ShuffleDescriptor]] = defaultdict(list)
        for d in descriptors:
            by_service[d.partition.service].append(d)
        for service, group in by_service.items():
            self.master(service).release_partitions_externally(group)

    def wait_for_releases(self, timeout: float) -> None:
        for master in self._masters.values():
            master.wait_for_releases(timeout)

    def lost_partitions(self) -> list[PartitionId]:
        return [pid for m in self._masters.values() for pid in m.lost_partitions()]

    def stores(self) -> list[tuple[str, Any]]:
        """``(name, actor)`` of every partition store the services run beside the
        executors (the external service's), for the session's leak probes."""
        return [
            store
            for master in self._masters.values()
            if isinstance(master, HoldsStores)
            for store in master.stores()
        ]

    def close(self) -> None:
        for master in self._masters.values():
            master.close()


class ShuffleEnvironments:
    """An executor's environments, one per service its tasks write with, behind the
    ``ShuffleEnvironment`` interface.  Writers come from the environment of each
    partition's service; gates and reads from the default one (every built-in service
    serves consumers through the same polling data plane); a poll goes to the
    environment that created the partition."""

    def __init__(self, context: ShuffleEnvironmentContext, default: str) -> None:
        self._context = context
        self._default = default
        self._environments: dict[str, ShuffleEnvironment] = {}
        self._holder: dict[PartitionId, ShuffleEnvironment] = {}
        self._lock = threading.Lock()
        self.environment(default)

    def environment(self, service: str) -> ShuffleEnvironment:
        with self._lock:
            if service not in self._environments:
                factory = load_shuffle_service(service)
                self._environments[service] = factory.create_shuffle_environment(self._context)
            return self._environments[service]

    def create_result_partition_writers(
        self, partitions: Sequence[ShuffleDescriptor], cancelled: threading.Event
    ) -> list[ResultPartitionWriter]:
        writers: list[ResultPartitionWriter] = []
        for descriptor in partitions:
            env = self.environment(descriptor.partition.service)
            with self._lock:
                self._holder[descriptor.partition.partition_id] = env
            writers.extend(env.create_result_partition_writers([descriptor], cancelled))
        return writers

    def create_input_gates(self, inputs: Sequence[InputGateDescriptor]) -> Sequence[InputGate]:
        return self.environment(self._default).create_input_gates(inputs)

    def read(
        self, gates: Sequence[InputGate], cancelled: threading.Event
    ) -> Iterator[tuple[InputGateDescriptor, pa.Table | None]]:
        return self.environment(self._default).read(gates, cancelled)

    def poll_many(self, requests: Sequence[PollRequest], wait_seconds: float) -> list[PollResponse]:
        """One consumer's requests go to one process, whose partitions one environment
        holds; should they span two, each answers its share (only the first waits)."""
        with self._lock:
            envs = [
                self._holder.get(r.partition_id) or self._environments[self._default]
                for r in requests
            ]
        if all(env is envs[0] for env in envs):
            return envs[0].poll_many(requests, wait_seconds)
        answers: dict[int, PollResponse] = {}
        for env in dict.fromkeys(envs):
            mine = [i for i, e in enumerate(envs) if e is env]
            share = env.poll_many([requests[i] for i in mine], wait_seconds if not answers else 0.0)
            answers.update(zip(mine, share, strict=True))
        return [answers[i] for i in range(len(requests))]

    def release_partitions_locally(self, partition_ids: Collection[PartitionId]) -> None:
        with self._lock:
            for pid in partition_ids:
                self._holder.pop(pid, None)
            environments = list(self._environments.values())
        for env in environments:
            env.release_partitions_locally(partition_ids)

    def partitions_occupying_local_resources(self) -> set[PartitionId]:
        with self._lock:
            environments = list(self._environments.values())
        return set().union(*(e.partitions_occupying_local_resources() for e in environments))

    def close(self) -> None:
        with self._lock:
            environments = list(self._environments.values())
            self._holder.clear()
        for env in environments:
            env.close()
