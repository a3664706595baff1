"""The producer-side result partition: subpartitions of buffers and their readers.

Lifecycle, as in Flink's ``io/network/partition``: a partition is *created*
when its producer task deploys, *written* (``add``) and *finished* by that task,
*consumed* by ``poll`` calls from consumer tasks (possibly while it is still
being written), and *released* by the scheduler or as its readers consume it.

The partition type's properties decide everything mode-specific:
- ``bounded``: ``add`` waits while a subpartition's slowest reader is ``credits``
  buffers behind (credit-based backpressure; never spills);
- ``spills``: a buffer that does not fit the executor's memory budget goes to
  the spill file instead of waiting;
- ``persist_all``: every buffer also goes to the spill file (hybrid-full);
- ``releases_on_consumption``: a buffer is dropped once all its readers passed it;
- ``reconsumable``: buffers stay readable until ``release()``.

Buffers in memory are ObjectRefs created by ``put`` in this (the owning)
process; consumers borrow them through poll responses.  I/O is passed in
(``put``), so this class is unit-tested with plain objects.

Small buffers are the exception (*inline* buffers, ``BufferRef.inline``): a buffer of
at most ``INLINE_BYTES`` stays in this process as Arrow IPC bytes (``InlineTable``),
and travels by value inside the poll response, or the task report and the consumer's
deployment when it is handed over, instead of as an object of its own (an object costs
a ``put``, an owner lookup and a ``get``: about a millisecond each, more than a partial
aggregate's few KiB cost to copy).  A partition inlines at most ``_INLINE_TOTAL``
bytes in all, so a report never carries much.  Everything else is the same: the
buffer counts in the memory budget, its metrics, its spill file (hybrid-full), and
it is lost with this process (the tracker says so, and its producer runs again).

A spilled buffer that fails its check when read back (``SpillFile.read``: a
checksum mismatch, a truncated or deleted file) is answered as a
``CORRUPTED`` poll error naming the edge, the partition and the file; the
consumer raises it as ``PartitionCorruptedError`` and the scheduler treats the
partition as lost.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from hybrid_shuffle.errors import (
    JobCancelledError,
    PartitionCorruptedError,
    PartitionNotFoundError,
    WaitTimeoutError,
)
from hybrid_shuffle.shuffle.api import (
    BufferRef,
    HandedOver,
    KeyRange,
    PartitionDescriptor,
    PollErrorKind,
    PollRequest,
    PollResponse,
)
from hybrid_shuffle.shuffle.inline_table import InlineTable
from hybrid_shuffle.shuffle.memory_budget import MemoryBudget
from hybrid_shuffle.shuffle.metrics import WriteMetrics
from hybrid_shuffle.shuffle.spill_file import SpillFile, SpillSegment

__all__ = ["INLINE_BYTES", "PartitionState", "ResultPartition"]

log = logging.getLogger(__name__)

_WAIT_SLICE = 0.2  # seconds between checks of the cancel flag while waiting
#: a buffer of at most this many bytes is kept inline (see the module docstring)
INLINE_BYTES = 64 << 10
#: the inline bytes of one partition, at most: the later small buffers are ``put``
_INLINE_TOTAL = 1 << 20


@dataclass
class _Buffer:
    rows: int
    nbytes: int
    #: the in-memory copy (an ObjectRef, or an ``InlineTable`` if inline), None once
    #: released or if never kept
    ref: Any | None
    segment: SpillSegment | None
    key_range: KeyRange | None


class PartitionState(enum.Enum):
    """Where a partition is in its life; only ever moves down this list (FAILED and
    RELEASED may also follow WRITING or FINISHED directly)."""

    WRITING = "writing"  # created by its producer task, buffers being added
    FINISHED = "finished"  # complete: readers reach end-of-partition
    FAILED = "failed"  # the producer failed: readers get its reason
    RELEASED = "released"  # buffers and spill file dropped: nothing can be read or added


class _Subpartition:
    def __init__(self, readers: int) -> None:
        self.buffers: dict[int, _Buffer] = {}
        self.next_seq = 0
        self.cursors = [0] * readers

    def backlog(self) -> int:
        return self.next_seq - min(self.cursors)


class ResultPartition:
    def __init__(
        self,
        descriptor: PartitionDescriptor,
        budget: MemoryBudget,
        spill_path: str,
        put: Callable[[pa.Table], Any],
        credits: int,
        wait_timeout: float,
        cancelled: threading.Event,
        on_change: Callable[[], None] | None = None,
        checksums: bool = True,
    ) -> None:
        self.descriptor = descriptor
        #: ``shuffle.checksums``: spilled buffers are written with a checksum, checked on read
        self._checksums = checksums
        #: called whenever readers have something new (a buffer, a sample, the end, a
        #: failure, the release): the holder's ``ChangeSignal``, which ``poll_many`` waits on
        self._on_change = on_change or (lambda: None)
        self.type = descriptor.partition_type
        self._budget = budget
        self._spill_path = spill_path
        self._spill: SpillFile | None = None
        self._put = put
        self._credits = credits
        self._wait_timeout = wait_timeout
        self._cancelled = cancelled
        self._cond = threading.Condition()
        self._subs = [
            _Subpartition(descriptor.readers_per_subpartition)
            for _ in range(descriptor.num_subpartitions)
        ]
        self.state = PartitionState.WRITING
        self._failure: str | None = None
        self._polled = False  # a reader polled: it reads by polling, nothing is handed over
        self._sample: Any = None
        self._schema: pa.Schema | None = None
        self._memory_bytes = 0
        #: bytes of the buffers kept inline so far (``_INLINE_TOTAL``)
        self._inline_bytes = 0
        #: the producer is waiting for a reader to take a buffer (a phase tests wait for)
        self.waiting_for_credit = False
        self.metrics = WriteMetrics(descriptor.edge, descriptor.producer_subtask)
        self.metrics.started_at = time.time()

    # -- producer side -------------------------------------------------------------------

    def add(self, subpartition: int, table: pa.Table, key_range: KeyRange | None = None) -> None:
        """Append one buffer; waits for credit on bounded partitions (bounded by wait_timeout)."""
        sub = self._subs[subpartition]
        with self._cond:
            if self.state is not PartitionState.WRITING:
                raise self._closed_for_writing()
        if self.type.bounded:
            self._wait_for_credit(sub, subpartition)
        nbytes = table.nbytes
        if self.type.spills:
            in_memory = self._budget.try_reserve(nbytes)
        else:
            self._budget.force_reserve(nbytes)
            in_memory = True
        ref = self._keep(table, nbytes) if in_memory else None
        segment = None
        try:
            if not in_memory or self.type.persist_all:
                segment = self._spill_file().append(table)
                log.debug("edge %s: spilled %d bytes", self.descriptor.edge, nbytes)
        except BaseException as e:
            if in_memory:
                self._budget.release(nbytes)
            if self._released():  # the file was deleted under us
                raise self._closed_for_writing() from e
            raise
        with self._cond:
            if self.state is not PartitionState.WRITING:  # released under our feet
                if in_memory:
                    self._budget.release(nbytes)
                raise self._closed_for_writing()
            sub.buffers[sub.next_seq] = _Buffer(table.num_rows, nbytes, ref, segment, key_range)
            sub.next_seq += 1
            m = self.metrics
            m.rows += table.num_rows
            m.bytes += nbytes
            m.buffers += 1
            if in_memory:
                self._memory_bytes += nbytes
                m.peak_memory_bytes = max(m.peak_memory_bytes, self._memory_bytes)
            else:
                m.spilled_bytes += nbytes
            if in_memory and segment is not None:
                m.persisted_bytes += nbytes
            m.peak_backlog_buffers = max(m.peak_backlog_buffers, sub.backlog())
            self._cond.notify_all()
        self._on_change()

    def _keep(self, table: pa.Table, nbytes: int) -> Any:
        """The in-memory copy of a buffer: its IPC bytes if it is small enough to go
        inline (see the module docstring; a slice of a larger batch, as the writer's
        buffers are, then keeps only its own rows' bytes), else its ``put`` ref."""
        with self._cond:
            inline = nbytes <= INLINE_BYTES and self._inline_bytes + nbytes <= _INLINE_TOTAL
            if inline:
                self._inline_bytes += nbytes
        if not inline:
            return self._put(table)  # the serializer copies a slice's own bytes only
        return InlineTable.of(table)

    def _wait_for_credit(self, sub: _Subpartition, index: int) -> None:
        started = time.monotonic()
        with self._cond:
            while sub.backlog() >= self._credits and self.state is PartitionState.WRITING:
                self.waiting_for_credit = True
                waited = time.monotonic() - started
                if self._cancelled.is_set():
                    raise JobCancelledError(f"edge '{self.descriptor.edge}': job cancelled")
                if waited > self._wait_timeout:
                    raise WaitTimeoutError(
                        f"edge '{self.descriptor.edge}': producer subtask "
                        f"{self.descriptor.producer_subtask} waited {waited:.0f} s for the "
                        f"consumer of subpartition {index} to take a buffer; that consumer is "
                        "stalled, so raise shuffle.wait_timeout or make the edge hybrid-selective"
                    )
                self._cond.wait(_WAIT_SLICE)
            self.waiting_for_credit = False
            self.metrics.blocked_seconds += time.monotonic() - started

    def publish_sample(self, sample: Any) -> None:
        """Range partitions: the producer's key sample, published before its buffers."""
        with self._cond:
            self._sample = sample
            self._cond.notify_all()
        self._on_change()

    def finish(self, schema: pa.Schema | None = None) -> None:
        """Complete the partition; ``schema`` (the producer's output schema, if it saw
        any table) reaches readers with the end of the partition."""
        with self._cond:
            if self.state is not PartitionState.WRITING:
                raise self._closed_for_writing()
            self.state = PartitionState.FINISHED
            self._schema = schema
            self.metrics.finished_at = time.time()
            self._cond.notify_all()
        self._on_change()

    def fail(self, reason: str) -> None:
        with self._cond:
            if self.state is PartitionState.WRITING:
                self.state = PartitionState.FAILED
                self._failure = reason
            self._cond.notify_all()
        self._on_change()

    def finished_buffers(self) -> HandedOver | None:
        """Every subpartition's buffers, for consumers to read without polling.

        Qualifies: a finished blocking or hybrid partition that no reader has
        polled yet, with every buffer in memory (a range partition's sample and
        key ranges come along, so its readers can pick their buffers themselves).
        Nothing about it changes any more, so the scheduler can ship these refs
        in the deployments of consumers that start later, which saves a poll
        round trip per channel.  Such buffers are not released on consumption
        (no poll acknowledges them): the scheduler releases the partition once
        all its consumers finished.  ``None`` otherwise: consumers poll.
        """
        with self._cond:
            if (
                self.state is not PartitionState.FINISHED
                or self._polled
                or self.type.must_be_pipelined()
            ):
                return None
            out = []
            for sub in self._subs:
                buffers = []
                for seq in range(sub.next_seq):
                    buf = sub.buffers.get(seq)
                    if buf is None or buf.ref is None:
                        return None
                    buffers.append(BufferRef(seq, buf.ref, buf.rows, buf.nbytes, buf.key_range))
                out.append(buffers)
            return HandedOver(out, self._sample, self.metrics.finished_at, self._schema)

    # -- consumer side -------------------------------------------------------------------

    def poll(self, request: PollRequest) -> PollResponse:
        """Acknowledge everything before ``request.cursor`` and return what follows."""
        sub = self._subs[request.subpartition]
        deadline = time.monotonic() + request.wait_seconds
        with self._cond:
            self._polled = True
            if self.state is PartitionState.RELEASED:
                return self._gone()
            sub.cursors[request.reader] = max(sub.cursors[request.reader], request.cursor)
            self._release_consumed(sub)
            self._cond.notify_all()  # credit may have come back
            while (
                request.cursor >= sub.next_seq
                and self.state is PartitionState.WRITING
                and (request.max_buffers > 0 or self._sample is None)
            ):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(min(remaining, _WAIT_SLICE))
            if self._released():  # while we waited
                return self._gone()
            if self._failure is not None:
                return PollResponse(error=self._failure, error_kind=PollErrorKind.PRODUCER_FAILED)
            picked: list[tuple[int, _Buffer]] = []
            cursor = request.cursor
            while cursor < sub.next_seq and len(picked) < request.max_buffers:
                buf = sub.buffers.get(cursor)
                if buf is None:
                    return PollResponse(
                        error=(
                            f"edge '{self.descriptor.edge}': buffer {cursor} of partition "
                            f"{self.descriptor.partition_id} was already consumed and released; "
                            f"a '{self.type.mode}' partition cannot be read twice, use "
                            "hybrid-full or blocking for re-reads"
                        ),
                        error_kind=PollErrorKind.NOT_FOUND,
                    )
                if self._wanted(buf, request):
                    picked.append((cursor, buf))
                cursor += 1
            response = PollResponse(
                next_cursor=cursor,
                end_of_partition=self.state is PartitionState.FINISHED and cursor >= sub.next_seq,
                sample=self._sample,
                schema=self._schema,
                producer_finished_at=(
                    self.metrics.finished_at if self.state is PartitionState.FINISHED else None
                ),
            )
        # materialising spilled buffers happens outside the lock: it reads disk and puts
        try:
            for seq, buf in picked:
                ref = buf.ref
                if ref is None:
                    assert buf.segment is not None and self._spill is not None
                    table = self._spill.read(buf.segment)  # read back: inline if small
                    small = buf.nbytes <= INLINE_BYTES
                    ref = InlineTable.of(table) if small else self._put(table)
                response.buffers.append(BufferRef(seq, ref, buf.rows, buf.nbytes))
        except PartitionCorruptedError as e:
            if self._released():  # the release deleted the file under this read
                return self._gone()
            log.warning("edge %s: %s", self.descriptor.edge, e)
            return PollResponse(
                error=f"edge '{self.descriptor.edge}': {e}",
                error_kind=PollErrorKind.CORRUPTED,
            )
        return response

    @staticmethod
    def _wanted(buf: _Buffer, request: PollRequest) -> bool:
        if request.bucket is None or buf.key_range is None:
            return True
        return buf.key_range.may_hold(
            request.boundaries, request.bucket, request.num_buckets, request.take_nulls
        )

    def _release_consumed(self, sub: _Subpartition) -> None:
        """Drop in-memory copies every reader passed (and the records, if not re-readable)."""
        if not (self.type.releases_on_consumption() or self.type.persist_all):
            return
        done = min(sub.cursors)
        for seq in [s for s in sub.buffers if s < done]:
            buf = sub.buffers[seq]
            if buf.ref is not None:
                buf.ref = None
                self._budget.release(buf.nbytes)
                self._memory_bytes -= buf.nbytes
            if self.type.releases_on_consumption():
                del sub.buffers[seq]

    def _gone(self) -> PollResponse:
        return PollResponse(
            error=(
                f"edge '{self.descriptor.edge}': partition {self.descriptor.partition_id} "
                "was released before this consumer finished reading it"
            ),
            error_kind=PollErrorKind.NOT_FOUND,
        )

    # -- lifecycle -----------------------------------------------------------------------

    def _spill_file(self) -> SpillFile:
        """The spill file, created on first use; never after ``release`` (it would leak)."""
        with self._cond:
            if self.state is PartitionState.RELEASED:
                raise self._closed_for_writing()
            if self._spill is None:
                self._spill = SpillFile(
                    self._spill_path, self.descriptor.partition_id, self._checksums
                )
            return self._spill

    def _released(self) -> bool:
        """Read the state anew (a method call: no narrowing from an earlier check)."""
        return self.state is PartitionState.RELEASED

    def _closed_for_writing(self) -> PartitionNotFoundError:
        return PartitionNotFoundError(
            f"edge '{self.descriptor.edge}': partition {self.descriptor.partition_id} is "
            f"{self.state.value}, so no more buffers can be added to it"
        )

    def release(self) -> None:
        """Drop every buffer and the spill file; idempotent."""
        with self._cond:
            if self.state is PartitionState.RELEASED:
                return
            self.state = PartitionState.RELEASED
            for sub in self._subs:
                for buf in sub.buffers.values():
                    if buf.ref is not None:
                        buf.ref = None
                        self._budget.release(buf.nbytes)
                sub.buffers.clear()
            self._memory_bytes = 0
            self._cond.notify_all()
        self._on_change()
        if self._spill is not None:
            self._spill.delete()
