"""The result partitions one process holds: created, polled, released, spilled, closed.

Both places that keep partitions in Ray's object store need exactly this: the
executor-local service's environment (an executor holds what its own tasks
wrote) and the external service's partition store actor (a store holds what
the producers of its node sent it).  The holder owns the ``MemoryBudget`` its
partitions share and the spill directory they write to; ``put`` is the I/O
(``ray.put`` in the process that must own the buffers), so the class itself
needs no Ray.

Contract:
- ``create`` makes a partition readable at once (a poll may arrive before the
  producer wrote anything);
- ``poll_many`` serves every channel one consumer reads from this process in one
  call, answering as soon as any of them has news (see ``has_news``);
- ``poll`` of an id never created answers "nothing yet" after a short pause (the
  consumer was deployed together with its producer, which has not created the
  partition yet), and of a released id answers ``NOT_FOUND`` (the last
  ``_REMEMBERED_RELEASES`` releases are remembered);
- ``release`` drops buffers and spill files and is idempotent; ``close``
  releases everything and removes the spill directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

import pyarrow as pa

from hybrid_shuffle.errors import PartitionNotFoundError
from hybrid_shuffle.shuffle.api import (
    PartitionDescriptor,
    PartitionId,
    PollErrorKind,
    PollRequest,
    PollResponse,
    ShuffleEnvironmentContext,
)
from hybrid_shuffle.shuffle.memory_budget import MemoryBudget
from hybrid_shuffle.shuffle.partition_watch import PartitionWatch
from hybrid_shuffle.shuffle.result_partition import ResultPartition
from hybrid_shuffle.spill_dirs import make_private_dirs

__all__ = ["PartitionHolder", "RecentReleases", "answer_absent", "answer_absent_many", "has_news"]

#: released partition ids a holder remembers (to answer late polls "released" rather
#: than "not created yet"); older ones are forgotten
_REMEMBERED_RELEASES = 4096
#: how long a poll of a partition not created yet waits before answering "nothing yet"
_NOT_CREATED_PAUSE = 0.05
#: longest single sleep of a ``poll_many`` between looks (it wakes on any change anyway)
_WAIT_SLICE = 0.2


class RecentReleases:
    """The ids released here lately (the last ``_REMEMBERED_RELEASES``), so that a late
    poll is answered "released" rather than "not created yet"."""

    def __init__(self) -> None:
        self._ids: dict[PartitionId, None] = {}  # a dict as an ordered set, oldest first
        self._lock = threading.Lock()

    def add(self, partition_ids: Collection[PartitionId]) -> None:
        with self._lock:
            for pid in partition_ids:
                self._ids[pid] = None
            while len(self._ids) > _REMEMBERED_RELEASES:
                del self._ids[next(iter(self._ids))]

    def __contains__(self, partition_id: object) -> bool:
        with self._lock:
            return partition_id in self._ids


def answer_absent(request: PollRequest, released: bool) -> PollResponse:
    """The answer to a poll of a partition not held here: ``NOT_FOUND`` if it was
    released, else "nothing yet" after a short pause (the consumer was deployed
    together with its producer, which has not created the partition yet)."""
    if released:
        return PollResponse(
            error=f"partition {request.partition_id} was already released",
            error_kind=PollErrorKind.NOT_FOUND,
        )
    time.sleep(min(request.wait_seconds, _NOT_CREATED_PAUSE))
    return PollResponse(next_cursor=request.cursor)


def answer_absent_many(
    requests: Sequence[PollRequest], wait_seconds: float, released: Callable[[PartitionId], bool]
) -> list[PollResponse]:
    """``answer_absent`` for a batch: one short pause if any id is merely not created yet."""
    answers = [
        answer_absent(dataclasses.replace(r, wait_seconds=0.0), released(r.partition_id))
        for r in requests
    ]
    if any(a.error is None for a in answers):
        time.sleep(min(wait_seconds, _NOT_CREATED_PAUSE))
    return answers


def has_news(request: PollRequest, response: PollResponse) -> bool:
    """Whether ``response`` tells its consumer anything it did not know when it asked:
    buffers, a moved cursor (a range read skipped buffers), the end, the producer
    finished, a failure, or (a sampling request) the sample."""
    return bool(
        response.buffers
        or response.error is not None
        or response.end_of_partition
        or response.producer_finished_at is not None
        or response.next_cursor != request.cursor
        or (request.max_buffers == 0 and response.sample is not None)
    )


class PartitionHolder:
    """The partitions of one process under one budget and one spill directory."""

    def __init__(
        self,
        context: ShuffleEnvironmentContext,
        directory: str,
        put: Callable[[pa.Table], Any],
    ) -> None:
        self._context = context
        self._put = put
        self.budget = MemoryBudget(max(context.memory_budget, 1))
        #: where this holder's partitions spill (``<session spill dir>/<holder>``)
        self.directory = directory
        # the directory is this holder's alone: files already there are a dead
        # predecessor's (an executor or store replaced after it died), orphans now
        shutil.rmtree(directory, ignore_errors=True)
        self._partitions: dict[PartitionId, ResultPartition] = {}
        self._released = RecentReleases()
        self._lock = threading.Lock()
        #: the ``poll_many`` calls waiting on partitions held (or not yet created) here
        self._watch = PartitionWatch()

    def create(
        self, descriptor: PartitionDescriptor, cancelled: threading.Event
    ) -> ResultPartition:
        """A new, empty partition, readable at once; its waits end once ``cancelled`` is set."""
        make_private_dirs(self.directory)  # on another node the session's directory is new
        name = descriptor.partition_id.replace("/", "_")
        partition = ResultPartition(
            descriptor,
            self.budget,
            os.path.join(self.directory, f"{name}.arrows"),
            self._put,
            self._context.credits,
            self._context.wait_timeout,
            cancelled,
            lambda: self._watch.changed(descriptor.partition_id),
            self._context.checksums,
        )
        with self._lock:
            released = descriptor.partition_id in self._released
            if not released:
                self._partitions[descriptor.partition_id] = partition
        if released:
            # a cancelled attempt that starts after the scheduler released its partitions
            # (a threaded actor may run the release first): never hold what is released
            partition.release()
            raise PartitionNotFoundError(
                f"partition {descriptor.partition_id} was released before its producer "
                "started (the attempt was cancelled)"
            )
        self._watch.changed(descriptor.partition_id)  # a consumer may wait for it to exist
        return partition

    def get(self, partition_id: PartitionId) -> ResultPartition | None:
        """The partition if it is held here (created and not released)."""
        with self._lock:
            return self._partitions.get(partition_id)

    def was_released(self, partition_id: PartitionId) -> bool:
        """Whether ``partition_id`` was released here recently."""
        return partition_id in self._released

    def poll(self, request: PollRequest) -> PollResponse:
        """Serve one consumer read (see the module docstring for unknown ids)."""
        with self._lock:
            partition = self._partitions.get(request.partition_id)
            released = request.partition_id in self._released
        if partition is not None:
            return partition.poll(request)
        return answer_absent(request, released)

    def poll_many(self, requests: Sequence[PollRequest], wait_seconds: float) -> list[PollResponse]:
        """Serve all the channels one consumer reads from this process in one call.

        Every request's cursor acknowledges what its consumer took at once (credit
        for bounded producers comes back for all channels in this one message).  The
        answer goes back as soon as any channel has news (``has_news``): a producer
        that adds a buffer wakes the waiting call, so data is pushed to a consumer
        that keeps one call open here, rather than found by its next poll.  With no
        news for ``wait_seconds``, every channel is answered "nothing yet"."""
        deadline = time.monotonic() + wait_seconds
        at_once = [dataclasses.replace(r, wait_seconds=0.0) for r in requests]
        watched = {r.partition_id for r in requests}
        wake = threading.Event()
        self._watch.subscribe(watched, wake)
        try:
            while True:
                wake.clear()
                answers = [self.poll(r) for r in at_once]
                remaining = deadline - time.monotonic()
                news = any(has_news(q, a) for q, a in zip(requests, answers, strict=True))
                if news or remaining <= 0:
                    return answers
                wake.wait(min(remaining, _WAIT_SLICE))
        finally:
            self._watch.unsubscribe(watched, wake)

    def release(self, partition_ids: Collection[PartitionId]) -> None:
        """Drop these partitions' buffers and spill files (unknown ids are remembered too)."""
        for pid in partition_ids:
            with self._lock:
                partition = self._partitions.pop(pid, None)
                self._released.add([pid])
            if partition is not None:
                partition.release()

    def held(self) -> set[PartitionId]:
        """The partitions held here now (empty once everything was released)."""
        with self._lock:
            return set(self._partitions)

    def close(self) -> None:
        """Release everything and remove the spill directory."""
        self.release(self.held())
        shutil.rmtree(self.directory, ignore_errors=True)
        # on a node other than the driver's the session directory has no owner marker
        # (the sweep would never remove it): take it away once it is empty
        with contextlib.suppress(OSError):
            os.rmdir(self._context.spill_dir)
