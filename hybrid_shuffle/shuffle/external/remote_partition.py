"""The executor-side proxy of a partition held by a partition store.

``ResultPartitionWriter`` routes and coalesces rows in the executor exactly as
for a local partition and hands whole buffers to this proxy (the
``WritablePartition`` protocol); the proxy sends each to the store of the
partition (``actors/partition_store.py``), which keeps and owns it.

Contract:
- a bounded (pipelined) partition sends one buffer at a time and waits for the
  store to take it, so the store's credit wait is the producer's: credit-based
  backpressure holds across the hop.  Other partitions keep up to
  ``_IN_FLIGHT`` adds in flight (each carries its sequence number, so the
  store applies them in order) and collect their outcome before ``finish``;
- every wait is bounded by ``wait_timeout`` (plus a short grace, so the store's
  own, more precise, timeout arrives first), and checks the task's ``cancelled``
  flag every ``_WAIT_SLICE`` seconds;
- on a cancel, a timeout or ``fail`` the proxy sends the store ``fail``, which
  releases a store thread waiting for credit and tells readers why;
- errors the store returns are re-raised here as the library errors they are;
  a dead store is ``ExecutorLostError``, one sentence.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any

import pyarrow as pa
import ray
from ray.exceptions import RayError

from hybrid_shuffle.actor_process import ACTOR_GONE
from hybrid_shuffle.errors import (
    ExecutorLostError,
    HybridShuffleError,
    JobCancelledError,
    PartitionNotFoundError,
    WaitTimeoutError,
    summary,
)
from hybrid_shuffle.shuffle.api import (
    HandedOver,
    KeyRange,
    PartitionDescriptor,
    ShuffleDescriptor,
)
from hybrid_shuffle.shuffle.metrics import WriteMetrics

__all__ = ["RemotePartition"]

log = logging.getLogger(__name__)

#: adds of an unbounded partition that may be in flight to the store at once
_IN_FLIGHT = 4
#: seconds between checks of the task's cancel flag while waiting for the store
_WAIT_SLICE = 0.2
#: seconds a wait may run past ``wait_timeout``, so that the store's own timeout (which
#: names the consumer that gives no credit) reaches the producer first
_GRACE = 2.0


class RemotePartition:
    """A ``WritablePartition`` whose buffers live in a partition store (see the module
    docstring)."""

    def __init__(
        self, registered: ShuffleDescriptor, wait_timeout: float, cancelled: threading.Event
    ) -> None:
        self._descriptor = registered.partition
        self._store = registered.location
        self._where = registered.location_name
        self._wait_timeout = wait_timeout
        self._cancelled = cancelled
        self._window = 0 if self._descriptor.partition_type.bounded else _IN_FLIGHT
        self._in_flight: deque[Any] = deque()
        self._seq = 0
        self._finished = False
        self._failed = False
        self._metrics = WriteMetrics(self._descriptor.edge, self._descriptor.producer_subtask)
        self._metrics.started_at = time.time()
        self._wait(self._store.create.remote(self._descriptor), "create the partition")

    @property
    def descriptor(self) -> PartitionDescriptor:
        return self._descriptor

    @property
    def metrics(self) -> WriteMetrics:
        """The store's metrics once finished (what it held, spilled, waited for credit)."""
        return self._metrics

    def add(self, subpartition: int, table: pa.Table, key_range: KeyRange | None = None) -> None:
        if self._failed or self._finished:
            state = "failed" if self._failed else "finished"
            raise PartitionNotFoundError(
                f"edge '{self._descriptor.edge}': partition {self._descriptor.partition_id} is "
                f"{state}, so no more buffers can be added to it"
            )
        pid = self._descriptor.partition_id
        ref = self._store.add.remote(pid, self._seq, subpartition, table, key_range)
        self._in_flight.append(ref)
        self._seq += 1
        while len(self._in_flight) > self._window:
            self._wait(self._in_flight.popleft(), "take a buffer")

    def publish_sample(self, sample: Any) -> None:
        self._drain()
        pid = self._descriptor.partition_id
        self._wait(self._store.publish_sample.remote(pid, sample), "take the key sample")

    def finish(self, schema: pa.Schema | None = None) -> None:
        self._drain()
        pid = self._descriptor.partition_id
        metrics = self._wait(self._store.finish.remote(pid, schema), "finish the partition")
        self._metrics = metrics
        self._finished = True

    def fail(self, reason: str) -> None:
        """Readers get ``reason``; a store thread waiting for credit for us stops."""
        self._abandon(reason)

    def finished_buffers(self) -> HandedOver | None:
        if not self._finished or self._failed:
            return None
        pid = self._descriptor.partition_id
        handed: HandedOver | None = self._wait(
            self._store.finished_buffers.remote(pid), "hand the partition over"
        )
        return handed

    # -- waiting -------------------------------------------------------------------------

    def _drain(self) -> None:
        while self._in_flight:
            self._wait(self._in_flight.popleft(), "take a buffer")

    def _wait(self, ref: Any, what: str) -> Any:
        """The store's answer to one call, bounded and cancellable (module docstring)."""
        started = time.monotonic()
        while not ray.wait([ref], timeout=_WAIT_SLICE)[0]:
            if self._cancelled.is_set():
                self._abandon(f"producer task of edge '{self._descriptor.edge}' was cancelled")
                raise JobCancelledError(f"edge '{self._descriptor.edge}': job cancelled")
            waited = time.monotonic() - started
            if waited > self._wait_timeout + _GRACE:
                self._abandon(f"the {self._where} did not {what} within {waited:.0f} s")
                raise WaitTimeoutError(
                    f"edge '{self._descriptor.edge}': the {self._where} did not {what} of "
                    f"producer subtask {self._descriptor.producer_subtask} within "
                    f"{waited:.0f} s; it is overloaded or its consumers are stalled, so raise "
                    "shuffle.wait_timeout"
                )
        try:
            value = ray.get(ref)
        except ACTOR_GONE as e:
            self._abandon(f"the {self._where} died")
            raise ExecutorLostError(self._died(what)) from e
        except RayError as e:  # the store raised after all: a bug, named in one sentence
            self._abandon(f"the {self._where} failed")
            raise HybridShuffleError(
                f"edge '{self._descriptor.edge}': the {self._where} failed to {what} ({summary(e)})"
            ) from e
        if isinstance(value, HybridShuffleError):
            self._abandon(str(value))
            raise value
        return value

    def _died(self, what: str) -> str:
        d = self._descriptor
        return (
            f"{self._where} died while it was asked to {what} of edge '{d.edge}' (producer "
            f"subtask {d.producer_subtask}); the partitions it held are lost, so rerun the job"
        )

    def _abandon(self, reason: str) -> None:
        """Stop writing: forget the adds in flight and tell the store (fire and forget:
        a dead store needs no telling, and a live one answers nobody)."""
        self._in_flight.clear()
        if not self._failed and not self._finished:
            self._failed = True
            log.debug("edge %s: partition failed: %s", self._descriptor.edge, reason)
            self._store.fail.remote(self._descriptor.partition_id, reason)
