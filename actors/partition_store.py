"""The partition store actor: one per Ray node, holding the external service's partitions.

Producers run in executor actors but send every buffer here (``add``); the store
``ray.put``s it again, so the store, not the executor, owns the buffers (Ray >=
2.56 has no ``ray.put(_owner=)``).  That is one extra copy per buffer, the
remote-shuffle-service trade-off: in exchange a partition outlives the executor
that produced it, so a consumer that fails can read it again without its
producer running again.  The partitions themselves are the same
``ResultPartition``s an executor would hold (credits, spilling past the memory
budget under ``<spill dir>/store-<node8>/``, consumption release, hand-over),
kept by a ``PartitionHolder``; consumers poll the store exactly as they poll an
executor.

Contract of the calls (each runs on its own thread of this threaded actor):
- ``create`` before any ``add`` of a partition; ``add`` carries the producer's
  sequence number, so adds sent back to back apply in the order they were sent
  even though a threaded actor may run them in any order;
- ``add`` of a bounded (pipelined) partition waits for credit inside the store,
  bounded by ``wait_timeout``, and ``fail`` (or ``release_partitions``) ends that
  wait at once;
- no call raises: failures come back as a library error *value* (a
  ``HybridShuffleError`` instance the caller re-raises), polls as a
  ``PollResponse`` with its ``error`` set, so the caller never sees Ray's
  wrapped traceback and Ray never prints "Unhandled error";
- ``watch`` returns only once the store closes: the master keeps that call
  pending as its death notification (the ref fails when the actor dies).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pyarrow as pa
import ray

from hybrid_shuffle.actor_process import ProcessProbes, freeze_imported_objects
from hybrid_shuffle.errors import (
    HybridShuffleError,
    PartitionCorruptedError,
    PartitionNotFoundError,
    WaitTimeoutError,
)
from hybrid_shuffle.shuffle.api import (
    HandedOver,
    KeyRange,
    PartitionDescriptor,
    PartitionId,
    PollErrorKind,
    PollRequest,
    PollResponse,
    ShuffleEnvironmentContext,
)
from hybrid_shuffle.shuffle.local.partition_holder import PartitionHolder
from hybrid_shuffle.shuffle.metrics import WriteMetrics
from hybrid_shuffle.shuffle.result_partition import ResultPartition

__all__ = ["MAX_CONCURRENCY", "PartitionStore", "store_directory"]

#: threads per store: adds waiting for credit, polls held open by consumers (up to 1 s
#: each), the master's watch and releases
MAX_CONCURRENCY = 256
_WAIT_SLICE = 0.2  # seconds between checks of a partition's cancel flag


def store_directory(spill_dir: str, node_id: str) -> str:
    """Where the store of ``node_id`` spills, inside the session's spill directory."""
    return os.path.join(spill_dir, f"store-{node_id[:8]}")


class _Writes:
    """One partition's producer side in the store: its cancel flag (set by ``fail`` and
    release, it ends a wait for credit) and the order its adds apply in."""

    def __init__(self, partition: ResultPartition, cancelled: threading.Event) -> None:
        self.partition = partition
        self.cancelled = cancelled
        self._next = 0
        self._cond = threading.Condition()

    def await_turn(self, seq: int, timeout: float) -> None:
        """Wait until every add sent before ``seq`` was applied (or the partition stopped
        being written: the add then fails on the partition's own state)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._next != seq and not self.cancelled.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    d = self.partition.descriptor
                    raise WaitTimeoutError(
                        f"edge '{d.edge}': buffer {seq} of producer subtask "
                        f"{d.producer_subtask} waited {timeout:.0f} s for buffer {self._next} "
                        "to reach its partition store; the producer's executor is overloaded, "
                        "so raise shuffle.wait_timeout"
                    )
                self._cond.wait(min(remaining, _WAIT_SLICE))

    def applied(self) -> None:
        with self._cond:
            self._next += 1
            self._cond.notify_all()

    def stop(self) -> None:
        self.cancelled.set()
        with self._cond:
            self._cond.notify_all()


class PartitionStore(ProcessProbes):
    """See the module docstring."""

    def __init__(self, context: ShuffleEnvironmentContext, node_id: str) -> None:
        #: how messages name this store ("partition store on node 1a2b3c4d")
        self.where = f"partition store on node {node_id[:8]}"
        self._wait_timeout = context.wait_timeout
        self._holder = PartitionHolder(
            context, store_directory(context.spill_dir, node_id), ray.put
        )
        self._writes: dict[PartitionId, _Writes] = {}
        self._lock = threading.Lock()
        self._closing = threading.Event()
        freeze_imported_objects()

    # -- the producer side ---------------------------------------------------------------

    def create(self, descriptor: PartitionDescriptor) -> HybridShuffleError | None:
        """Create an empty partition (readable at once); an error if it already exists."""
        pid = descriptor.partition_id
        try:
            with self._lock:
                if pid in self._writes or self._holder.get(pid) is not None:
                    return HybridShuffleError(
                        f"{self.where} already holds partition {pid}; a producer attempt "
                        "writes a partition of its own id only once"
                    )
                if self._closing.is_set():
                    return self._closed(pid)
                cancelled = threading.Event()  # ends the partition's waits for credit too
                self._writes[pid] = _Writes(self._holder.create(descriptor, cancelled), cancelled)
        except Exception as e:
            return self._as_error(e, f"create partition {pid}")
        return None

    def add(
        self,
        partition_id: PartitionId,
        seq: int,
        subpartition: int,
        table: pa.Table,
        key_range: KeyRange | None = None,
    ) -> HybridShuffleError | None:
        """Append the producer's ``seq``-th buffer (after every earlier one); waits for
        credit on a bounded partition."""
        writes = self._writes_of(partition_id)
        if writes is None:
            return self._gone(partition_id)
        try:
            writes.await_turn(seq, self._wait_timeout)
            try:
                writes.partition.add(subpartition, table, key_range)
            finally:
                writes.applied()
        except Exception as e:
            return self._as_error(e, f"add a buffer to partition {partition_id}")
        return None

    def publish_sample(self, partition_id: PartitionId, sample: Any) -> HybridShuffleError | None:
        writes = self._writes_of(partition_id)
        if writes is None:
            return self._gone(partition_id)
        writes.partition.publish_sample(sample)
        return None

    def finish(
        self, partition_id: PartitionId, schema: pa.Schema | None
    ) -> WriteMetrics | HybridShuffleError:
        """Complete the partition; returns its metrics (what the store held and spilled)."""
        writes = self._writes_of(partition_id)
        if writes is None:
            return self._gone(partition_id)
        try:
            writes.partition.finish(schema)
        except Exception as e:
            return self._as_error(e, f"finish partition {partition_id}")
        return writes.partition.metrics

    def fail(self, partition_id: PartitionId, reason: str) -> None:
        """Readers get ``reason``; an add waiting for credit or for its turn stops now."""
        writes = self._writes_of(partition_id)
        if writes is not None:
            writes.partition.fail(reason)  # first: a waiting add then fails on this state
            writes.stop()

    def finished_buffers(self, partition_id: PartitionId) -> HandedOver | None:
        """The finished partition for consumers to read without polling (refs owned by
        this store), or None: they poll (``ResultPartition.finished_buffers``)."""
        writes = self._writes_of(partition_id)
        return None if writes is None else writes.partition.finished_buffers()

    # -- the consumer side ---------------------------------------------------------------

    def poll_many(self, requests: list[PollRequest], wait_seconds: float) -> list[PollResponse]:
        """All the channels one consumer task reads from this store, in one call; a
        failure to serve them is each channel's answer."""
        try:
            return self._holder.poll_many(requests, wait_seconds)
        except Exception as e:
            return [self._poll_error(e, r) for r in requests]

    def _poll_error(self, e: Exception, request: PollRequest) -> PollResponse:
        kind = PollErrorKind.PRODUCER_FAILED
        if isinstance(e, PartitionNotFoundError):
            kind = PollErrorKind.NOT_FOUND
        elif isinstance(e, PartitionCorruptedError):
            kind = PollErrorKind.CORRUPTED
        return PollResponse(
            error=str(self._as_error(e, f"serve a poll of {request.partition_id}")),
            error_kind=kind,
        )

    # -- lifecycle -----------------------------------------------------------------------

    def release_partitions(self, partition_ids: list[PartitionId]) -> None:
        """Drop these partitions' buffers and spill files (a waiting add stops)."""
        with self._lock:
            stopped = [self._writes.pop(pid, None) for pid in partition_ids]
        self._holder.release(partition_ids)  # first: a waiting add then fails on this state
        for writes in stopped:
            if writes is not None:
                writes.stop()

    def partitions_occupying_local_resources(self) -> set[PartitionId]:
        return self._holder.held()

    def watch(self) -> None:
        """Returns only when the store closes: the master's death notification."""
        self._closing.wait()

    def close(self) -> None:
        """Release everything and remove the spill directory; later creates are refused."""
        self._closing.set()
        with self._lock:
            writes, self._writes = list(self._writes.values()), {}
        self._holder.close()
        for w in writes:
            w.stop()

    # -- helpers -------------------------------------------------------------------------

    def _writes_of(self, partition_id: PartitionId) -> _Writes | None:
        with self._lock:
            return self._writes.get(partition_id)

    def _gone(self, partition_id: PartitionId) -> PartitionNotFoundError:
        if self._closing.is_set():
            return self._closed(partition_id)
        state = "was released" if self._holder.was_released(partition_id) else "was never created"
        return PartitionNotFoundError(
            f"partition {partition_id} {state} in the {self.where}, so it cannot be written"
        )

    def _closed(self, partition_id: PartitionId) -> PartitionNotFoundError:
        return PartitionNotFoundError(
            f"the {self.where} is closing, so partition {partition_id} cannot be written"
        )

    def _as_error(self, error: Exception, what: str) -> HybridShuffleError:
        """A library error as it is; anything else as one named sentence."""
        if isinstance(error, HybridShuffleError):
            error.__traceback__ = None  # a value now: its frames would pin the buffers
            return error
        first = str(error).splitlines()[0] if str(error) else ""
        return HybridShuffleError(
            f"the {self.where} could not {what} ({type(error).__name__}: {first})"
        )
