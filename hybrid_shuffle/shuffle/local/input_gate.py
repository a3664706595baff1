"""Consumer-side input gates: pull buffers from every producer of one input edge.

A gate has one *channel* per producer subtask.  Each channel keeps one poll in
flight at a time; the poll's cursor acknowledges what the consumer already took,
which is how credit flows back to a bounded producer.  ``read_gates`` multiplexes
every channel of every input of a task over ``ray.wait``, so a join reads both
sides as their data arrives and a slow producer never blocks a fast one.

Every wait is bounded: a producer that does not answer a poll within
``wait_timeout`` seconds, or a buffer that cannot be fetched in that time, ends
the task with an error naming the edge and the producer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import ray
from ray.exceptions import GetTimeoutError, ObjectLostError, OwnerDiedError, RayActorError

from hybrid_shuffle.errors import (
    DataConsumptionError,
    ExecutorLostError,
    JobCancelledError,
    PartitionNotFoundError,
    ProducerFailedError,
    WaitTimeoutError,
)
from hybrid_shuffle.shuffle.api import (
    BufferRef,
    ConsumerDescriptor,
    InputGateDescriptor,
    PollErrorKind,
    PollRequest,
    PollResponse,
)
from hybrid_shuffle.shuffle.metrics import ReadMetrics
from hybrid_shuffle.shuffle.partitioner import range_boundaries, range_bucket_mask

__all__ = ["PollingInputGate", "read_gates"]

log = logging.getLogger(__name__)

_POLL_WAIT = 1.0  # seconds a producer may hold a poll open waiting for data
_WAIT_SLICE = 0.5


@dataclass
class _Channel:
    spec: ConsumerDescriptor
    cursor: int = 0
    done: bool = False
    sample: Any = None
    polled_at: float = 0.0


@dataclass
class PollingInputGate:
    """One input edge of a consumer task (see module docstring)."""

    spec: InputGateDescriptor
    max_buffers: int
    wait_timeout: float
    channels: list[_Channel] = field(default_factory=list)
    boundaries: Any = None
    metrics: ReadMetrics = field(init=False)
    #: the first producer schema received with an end of partition; a zero-row table of
    #: it is delivered only if the input had no row at all
    schema: pa.Schema | None = None

    def __post_init__(self) -> None:
        self.channels = [_Channel(c) for c in self.spec.channels]
        self.metrics = ReadMetrics(self.spec.edge, self.spec.consumer_subtask)

    @property
    def finished(self) -> bool:
        return all(c.done for c in self.channels)

    def _sampling(self) -> bool:
        return self.spec.range_read is not None and self.boundaries is None

    def request(self, channel: _Channel) -> PollRequest:
        spec = channel.spec
        rr = self.spec.range_read
        sampling = self._sampling()
        return PollRequest(
            partition_id=spec.descriptor.partition.partition_id,
            subpartition=spec.subpartition,
            reader=spec.reader,
            cursor=channel.cursor,
            max_buffers=0 if sampling else self.max_buffers,
            wait_seconds=_POLL_WAIT,
            bucket=None if rr is None or sampling else rr.bucket,
            boundaries=self.boundaries,
            num_buckets=0 if rr is None else rr.consumers,
            take_nulls=rr is not None and rr.take_nulls,
        )

    def accept(self, channel: _Channel, response: PollResponse) -> None:
        """Apply a poll response's state (errors, cursor, samples); the caller fetches data."""
        producer = channel.spec.producer_subtask
        if response.error is not None:
            failed = response.error_kind is PollErrorKind.PRODUCER_FAILED
            raise (ProducerFailedError if failed else PartitionNotFoundError)(response.error)
        if response.producer_finished_at is not None:
            self.metrics.producer_finished_at[producer] = response.producer_finished_at
        if self._sampling():
            if response.sample is not None:
                channel.sample = response.sample
            self.derive_boundaries()
            return
        channel.cursor = response.next_cursor
        channel.done = response.end_of_partition
        if self.schema is None:
            self.schema = response.schema
        if response.buffers:
            self.received_from(producer)

    def derive_boundaries(self) -> None:
        """Range edges: the key boundaries, once every producer's sample is known."""
        rr = self.spec.range_read
        if rr is not None and all(c.sample is not None for c in self.channels):
            self.boundaries = range_boundaries([c.sample for c in self.channels], rr.consumers)

    def received_from(self, producer: int) -> None:
        """Record the first data from ``producer`` (the hybrid timeline metrics)."""
        if producer not in self.metrics.first_buffer_from:
            now = time.time()
            self.metrics.first_buffer_from[producer] = now
            self.metrics.first_buffer_at = self.metrics.first_buffer_at or now

    def wants(self, buffer: BufferRef) -> bool:
        """Range edges: whether a handed-over buffer can hold rows of this consumer."""
        rr = self.spec.range_read
        if rr is None or buffer.key_range is None:
            return True
        return buffer.key_range.may_hold(self.boundaries, rr.bucket, rr.consumers, rr.take_nulls)

    def select_rows(self, table: pa.Table) -> pa.Table:
        """Range edges: keep the rows of this consumer's key interval."""
        rr = self.spec.range_read
        if rr is None:
            return table
        keys = table.column(rr.key)
        missing = pc.is_null(keys, nan_is_null=True)  # null and NaN keys sort last
        mask = pc.and_kleene(
            range_bucket_mask(keys, self.boundaries, rr.bucket, rr.consumers), pc.invert(missing)
        )
        if rr.take_nulls:
            mask = pc.or_kleene(mask, missing)
        return table.filter(mask)


def read_gates(
    gates: Sequence[PollingInputGate], cancelled: threading.Event
) -> Generator[tuple[int, pa.Table | None], None, None]:
    """Yield ``(input_index, table)`` as buffers arrive and ``(input_index, None)`` when an
    input has no more data.  Raises the library's errors for failed or lost producers."""
    outstanding: dict[Any, tuple[PollingInputGate, _Channel]] = {}

    def issue(gate: PollingInputGate, channel: _Channel) -> None:
        location = channel.spec.descriptor.location
        request = gate.request(channel)
        log.debug(
            "edge %s: poll producer %d from cursor %d",
            gate.spec.edge,
            channel.spec.producer_subtask,
            request.cursor,
        )
        ref = location.poll.remote(request)
        gate.metrics.polls += 1
        channel.polled_at = time.monotonic()
        outstanding[ref] = (gate, channel)

    handed_over: list[PollingInputGate] = []
    for gate in gates:
        if gate.finished:  # no producers at all
            yield from _end(gate)
            continue
        for channel in gate.channels:
            if channel.spec.buffers is None:
                issue(gate, channel)
            else:
                channel.sample = channel.spec.sample  # range edges: known without a poll
        if any(c.spec.buffers is not None for c in gate.channels):
            handed_over.append(gate)
    for gate in handed_over:  # after the polls went out: they run meanwhile
        if gate.spec.range_read is not None:
            gate.derive_boundaries()
            if gate.boundaries is None:
                continue  # read once the polls brought the other producers' samples
        yield from _read_handed_over(gate)
    while outstanding:
        ready, _ = ray.wait(list(outstanding), num_returns=1, timeout=_WAIT_SLICE)
        if cancelled.is_set():
            raise JobCancelledError("job cancelled")
        if not ready:
            _check_stuck_polls(outstanding)
            continue
        gate, channel = outstanding.pop(ready[0])
        response = _get_response(ready[0], gate, channel)
        was_sampling = gate._sampling()
        gate.accept(channel, response)
        if gate._sampling():
            if channel.sample is None:  # else wait for the other producers' samples
                issue(gate, channel)
        elif was_sampling:
            # boundaries known: every polled channel starts reading its bucket
            for other in gate.channels:
                polled = other.spec.buffers is None
                if polled and all(ch is not other for _, ch in outstanding.values()):
                    issue(gate, other)
            yield from _read_handed_over(gate)
        elif not channel.done:
            issue(gate, channel)  # before fetching: the poll acknowledges, we hold the refs
        if response.buffers:
            yield from _deliver(gate, _fetch(response.buffers, gate, channel))
        if channel.done and gate.finished:
            yield from _end(gate)


def _read_handed_over(gate: PollingInputGate) -> Iterator[tuple[int, pa.Table | None]]:
    """Read the channels whose producer handed its finished partition over (a range
    gate: once its boundaries are known, and only the buffers of this bucket)."""
    for c in gate.channels:
        if c.spec.buffers is None or c.done:
            continue
        producer = c.spec.producer_subtask
        wanted = [b for b in c.spec.buffers if gate.wants(b)]
        tables = _fetch(wanted, gate, c) if wanted else []
        c.done = True
        if gate.schema is None:
            gate.schema = c.spec.schema
        gate.metrics.producer_finished_at[producer] = c.spec.producer_finished_at
        if tables:
            gate.received_from(producer)
        yield from _deliver(gate, tables)
    if gate.finished:
        yield from _end(gate)


def _deliver(
    gate: PollingInputGate, tables: list[pa.Table]
) -> Iterator[tuple[int, pa.Table | None]]:
    for table in tables:
        gate.metrics.buffers += 1
        gate.metrics.bytes += table.nbytes
        selected = gate.select_rows(table)
        gate.metrics.rows += selected.num_rows
        if selected.num_rows:
            yield gate.spec.input_index, selected


def _end(gate: PollingInputGate) -> Iterator[tuple[int, pa.Table | None]]:
    """The end of an input; one that delivered no row first yields a zero-row table of
    a producer's schema, if one told it, so its consumer learns the columns (a left
    join's empty right side whose schema the plan could not know).  Never beside
    rows: a producer's empty output may have other types than another's rows."""
    if gate.metrics.rows == 0 and gate.schema is not None:
        yield gate.spec.input_index, gate.schema.empty_table()
    yield gate.spec.input_index, None


def _check_stuck_polls(outstanding: dict[Any, tuple[PollingInputGate, _Channel]]) -> None:
    now = time.monotonic()
    for gate, channel in outstanding.values():
        if now - channel.polled_at > gate.wait_timeout:
            raise WaitTimeoutError(
                f"edge '{gate.spec.edge}': producer subtask {channel.spec.producer_subtask} "
                f"on {channel.spec.descriptor.location_name} did not answer for "
                f"{gate.wait_timeout:.0f} s; it is overloaded or hung, so check that executor "
                "or raise shuffle.wait_timeout"
            )


def _lost(gate: PollingInputGate, channel: _Channel) -> str:
    return (
        f"edge '{gate.spec.edge}': {channel.spec.descriptor.location_name}, which held producer "
        f"subtask {channel.spec.producer_subtask}'s partition, died; its data is lost, "
        "so rerun the job (or use a blocking/hybrid-full edge once failover is enabled)"
    )


def _get_response(ref: Any, gate: PollingInputGate, channel: _Channel) -> PollResponse:
    try:
        response: PollResponse = ray.get(ref, timeout=gate.wait_timeout)
    except RayActorError as e:
        raise ExecutorLostError(_lost(gate, channel)) from e
    return response


def _fetch(
    buffers: Sequence[BufferRef], gate: PollingInputGate, channel: _Channel
) -> list[pa.Table]:
    try:
        tables: list[pa.Table] = ray.get([b.ref for b in buffers], timeout=gate.wait_timeout)
    except (OwnerDiedError, ObjectLostError) as e:
        raise ExecutorLostError(_lost(gate, channel)) from e
    except GetTimeoutError as e:
        raise DataConsumptionError(
            f"edge '{gate.spec.edge}': {len(buffers)} buffers from producer subtask "
            f"{channel.spec.producer_subtask} did not arrive within {gate.wait_timeout:.0f} s; "
            "the object store is overloaded, so lower shuffle.buffer_size or raise wait_timeout"
        ) from e
    return tables
