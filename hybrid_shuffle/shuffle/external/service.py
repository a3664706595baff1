"""The external partition store: the second FLIP-31 shuffle service ("external").

Partitions are held by dedicated store actors (``actors/partition_store.py``),
one per Ray node, not by the executors that run the producers: a producer sends
its buffers to the store of its node, which ``ray.put``s them again and so owns
them.  That costs one copy per buffer (the remote-shuffle-service trade-off),
and buys partitions that outlive their producer's executor: a consumer that
fails reads them again, and no producer runs again.

- ``ExternalShuffleMaster`` (driver) creates a node's store lazily, on the first
  registration of a partition produced there, and pins it to that node (hard
  node affinity, no CPU, ``max_restarts=0``).  It keeps one ``watch`` call of
  every store pending: that ref fails the moment Ray reports the store dead, and
  ``lost_partitions`` (which never blocks) reports the dead store's partitions
  once and forgets the store, so the next registration on its node starts a
  fresh one; the dead store's spill files are removed where the driver sees them.
- ``ExternalShuffleEnvironment`` (executor) writes through ``RemotePartition``
  proxies (routing and coalescing stay in the executor; the store receives
  whole buffers) and reads exactly as the executor-local service does: the
  store answers the same polls.
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import ray

from hybrid_shuffle.actor_process import NAMESPACE, start_pinned
from hybrid_shuffle.actors.partition_store import MAX_CONCURRENCY, PartitionStore, store_directory
from hybrid_shuffle.errors import ConfigError
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
from hybrid_shuffle.shuffle.external.remote_partition import RemotePartition
from hybrid_shuffle.shuffle.local.input_gate import PollingInputGate, read_gates
from hybrid_shuffle.shuffle.local.partition_holder import (
    RecentReleases,
    answer_absent_many,
)
from hybrid_shuffle.shuffle.writer import ResultPartitionWriter

__all__ = [
    "NAMESPACE",
    "ExternalShuffleEnvironment",
    "ExternalShuffleMaster",
    "ExternalShuffleServiceFactory",
    "store_name",
]

log = logging.getLogger(__name__)

#: seconds ``close`` waits for the stores to close before it kills them
_CLOSE_WAIT = 30.0


def store_name(session_id: str, node_id: str, generation: int = 0) -> str:
    """The Ray name of a node's store: ``<session>-store-<node8>``, and for the n-th
    replacement of a dead one ``-<n>`` after it (the dead one's name may not be free yet)."""
    base = f"{session_id}-store-{node_id[:8]}"
    return base if generation == 0 else f"{base}-{generation}"


@dataclass
class _Store:
    """One node's store as the master knows it."""

    node_id: str
    name: str
    handle: Any
    #: the pending ``watch()`` call: ready (failed) once the store died
    watch: Any
    partitions: set[PartitionId] = field(default_factory=set)

    @property
    def where(self) -> str:
        return f"partition store on node {self.node_id[:8]}"


class ExternalShuffleMaster:
    """Registry of the partitions in the session's stores, and the stores' lifecycle."""

    def __init__(self, context: ShuffleMasterContext) -> None:
        if context.environment is None:
            raise ConfigError(
                "shuffle.service: 'external' needs the storage settings of the session "
                "(ShuffleMasterContext.environment); create the master through hs.Session"
            )
        self._context = context
        self._environment: ShuffleEnvironmentContext = context.environment
        self._stores: dict[str, _Store] = {}
        #: node id -> stores started there so far (names the replacement of a dead one)
        self._generations: dict[str, int] = {}
        self._registry: dict[PartitionId, tuple[ShuffleDescriptor, str]] = {}
        self._lost: list[PartitionId] = []
        self._pending: list[Any] = []
        self._driver_node: str | None = None
        self._lock = threading.Lock()

    # -- ShuffleMaster -------------------------------------------------------------------

    def register_partition_with_producer(
        self, partition: PartitionDescriptor, producer: ProducerDescriptor
    ) -> ShuffleDescriptor:
        """The partition goes to the store of the producer's node (the driver's if the
        producer does not say), started now if that node has none."""
        node = producer.node_id or self._driver_node_id()
        with self._lock:
            self._reap()
            store = self._stores.get(node) or self._start_store(node)
            descriptor = ShuffleDescriptor(partition, store.handle, store.where, -1)
            store.partitions.add(partition.partition_id)
            self._registry[partition.partition_id] = (descriptor, node)
        return descriptor

    def release_partitions_externally(self, descriptors: Sequence[ShuffleDescriptor]) -> None:
        """One call per store, whatever the number of partitions (not waited for)."""
        by_node: dict[str, list[PartitionId]] = {}
        with self._lock:
            for d in descriptors:
                pid = d.partition.partition_id
                entry = self._registry.pop(pid, None)
                if entry is None:
                    continue
                node = entry[1]
                by_node.setdefault(node, []).append(pid)
                if node in self._stores:
                    self._stores[node].partitions.discard(pid)
            for node, ids in by_node.items():
                store = self._stores.get(node)
                if store is not None:  # a dead store's partitions went with it
                    log.debug("releasing %d partitions in %s", len(ids), store.where)
                    self._pending.append(store.handle.release_partitions.remote(ids))

    def wait_for_releases(self, timeout: float) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        if pending:
            # a dead store's partitions are gone anyway: do not fail on it
            ray.wait(pending, num_returns=len(pending), timeout=timeout, fetch_local=False)

    def lost_partitions(self) -> list[PartitionId]:
        """The partitions of stores that died since the last call, each reported once."""
        with self._lock:
            self._reap()
            lost, self._lost = self._lost, []
        return lost

    def close(self) -> None:
        """Release everything, then close and kill every store (bounded waits)."""
        wait = min(self._context.wait_timeout, _CLOSE_WAIT)
        with self._lock:
            registered = [d for d, _ in self._registry.values()]
        self.release_partitions_externally(registered)
        self.wait_for_releases(wait)
        with self._lock:
            stores, self._stores = list(self._stores.values()), {}
            self._registry.clear()
            self._lost.clear()
        refs = [s.handle.close.remote() for s in stores]
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=wait, fetch_local=False)
        for s in stores:
            ray.kill(s.handle, no_restart=True)

    # -- what the session's probes and tests ask -----------------------------------------

    def stores(self) -> list[tuple[str, Any]]:
        """``(name, handle)`` of every store alive as far as the master knows (leak probes
        ask each for ``partitions_occupying_local_resources`` and ``owned_objects``)."""
        with self._lock:
            return [(s.name, s.handle) for s in self._stores.values()]

    # -- helpers (called with the lock held) ---------------------------------------------

    def _driver_node_id(self) -> str:
        if self._driver_node is None:
            self._driver_node = str(ray.get_runtime_context().get_node_id())
        return self._driver_node

    def _start_store(self, node: str) -> _Store:
        generation = self._generations.get(node, 0)
        self._generations[node] = generation + 1
        name = store_name(self._context.session_id, node, generation)
        handle = start_pinned(PartitionStore, name, node, MAX_CONCURRENCY, self._environment, node)
        store = _Store(node, name, handle, handle.watch.remote())
        self._stores[node] = store
        log.info("started %s (%s)", store.where, name)
        return store

    def _reap(self) -> None:
        """Forget the stores whose watch ended (they died); their partitions become lost."""
        if not self._stores:
            return
        watches = {s.watch: s for s in self._stores.values()}
        ended, _ = ray.wait(list(watches), num_returns=len(watches), timeout=0, fetch_local=False)
        for ref in ended:
            store = watches[ref]
            log.warning(
                "%s died; %d partitions it held are lost", store.where, len(store.partitions)
            )
            del self._stores[store.node_id]
            for pid in sorted(store.partitions):
                self._registry.pop(pid, None)
                self._lost.append(pid)
            # its spill files are orphans: a replacement store removes its node's on
            # start, but a removed node gets none, and where the driver sees that node's
            # disk (a node of this machine, a shared spill_dir) they stayed until the
            # session closed.  Done under the lock, so before any successor starts.
            shutil.rmtree(
                store_directory(self._environment.spill_dir, store.node_id), ignore_errors=True
            )


class ExternalShuffleEnvironment:
    """An executor's side of the external service: writers are proxies of partitions in
    a store; gates and reads are the polling ones; the executor itself holds nothing."""

    def __init__(self, context: ShuffleEnvironmentContext) -> None:
        self._context = context
        self._released = RecentReleases()

    def create_result_partition_writers(
        self, partitions: Sequence[ShuffleDescriptor], cancelled: threading.Event
    ) -> list[ResultPartitionWriter]:
        return [
            ResultPartitionWriter(
                RemotePartition(registered, self._context.wait_timeout, cancelled),
                self._context.buffer_size,
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
        """An executor holds no external partition, so no consumer asks one here.  A
        request that does arrive is for partitions of another service that this executor
        has not created yet or has released (``ShuffleEnvironments`` sends requests for
        ids it does not know to the default environment: this one when
        ``shuffle.service`` is external), and is answered as the executor-local service
        would: "nothing yet", or ``NOT_FOUND`` for an id released here lately."""
        return answer_absent_many(requests, wait_seconds, self._released.__contains__)

    def release_partitions_locally(self, partition_ids: Collection[PartitionId]) -> None:
        """Nothing is held here (the master releases in the stores); the ids are only
        remembered, for ``poll``."""
        self._released.add(partition_ids)

    def partitions_occupying_local_resources(self) -> set[PartitionId]:
        return set()

    def close(self) -> None:
        """Nothing to close: the stores belong to the master."""


class ExternalShuffleServiceFactory:
    name = "external"

    def create_shuffle_master(self, context: ShuffleMasterContext) -> ExternalShuffleMaster:
        return ExternalShuffleMaster(context)

    def create_shuffle_environment(
        self, context: ShuffleEnvironmentContext
    ) -> ExternalShuffleEnvironment:
        return ExternalShuffleEnvironment(context)
