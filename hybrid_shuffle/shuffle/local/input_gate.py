"""Consumer-side input gates: read buffers from every producer of one input edge.

A gate has one *channel* per producer subtask.  ``read_gates`` reads every
channel of every input of a task: channels whose producer finished before the
task deployed were handed over (their buffer refs came in the deployment), the
others are asked for with one request per producer *process* covering all the
task's channels there (``poll_many``).  That process holds the request until any
of its channels has news and then answers at once, so buffers reach a waiting
consumer as they are written (push over a standing request, not a poll loop),
and the request's cursors acknowledge what the consumer took, returning the
credit of all those channels in one message.  Requests to different processes
are multiplexed over ``ray.wait``, so a join reads both sides as their data
arrives and a slow producer never blocks a fast one.

A gate whose edge reads its producers in order (``in_producer_order``: the gather of
a range-partitioned sort's subtasks) still asks every producer at once, but holds what
a later producer sends until every earlier one has ended, so its rows come out one
producer after the other.

Every wait is bounded: a producer that does not answer a poll within
``wait_timeout`` seconds, or a buffer that cannot be fetched in that time, ends
the task with an error naming the edge and the producer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import ray
from ray.exceptions import GetTimeoutError, ObjectLostError, OwnerDiedError

from hybrid_shuffle._words import plural
from hybrid_shuffle.actor_process import ACTOR_GONE
from hybrid_shuffle.errors import (
    DataConsumptionError,
    ExecutorLostError,
    JobCancelledError,
    PartitionCorruptedError,
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

__all__ = ["PollingInputGate", "by_producer", "read_gates"]

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
    #: the end of this input was yielded
    ended: bool = False
    #: gates in producer order: the channel whose rows are delivered now (an index into
    #: ``channels``, sorted by producer), and what later channels sent meanwhile
    current: int = 0
    held: dict[int, list[pa.Table]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.channels = [_Channel(c) for c in self.spec.channels]
        if self.spec.in_producer_order:  # a producer's several channels keep their order
            self.channels.sort(key=lambda c: c.spec.producer_subtask)
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
            if response.error_kind is PollErrorKind.CORRUPTED:
                # the partition is lost: the scheduler recomputes it from this id
                pid = channel.spec.descriptor.partition.partition_id
                raise PartitionCorruptedError(response.error, partition_id=pid)
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

    def in_order(self, channel: _Channel | None, tables: list[pa.Table]) -> list[pa.Table]:
        """The tables to deliver now: all of ``tables`` for a gate that reads its
        producers as they come; for one in producer order, those of the current channel
        and, once it ended, of the next ones (``channel``'s ``tables`` are held until
        its turn; ``channel`` None: only see whether a turn passed)."""
        if not self.spec.in_producer_order:
            return tables
        if channel is not None and tables:
            self.held.setdefault(id(channel), []).extend(tables)
        ready: list[pa.Table] = []
        while self.current < len(self.channels):
            now = self.channels[self.current]
            ready.extend(self.held.pop(id(now), []))
            if not now.done:
                break
            self.current += 1
        return ready

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


@dataclass
class _Producer:
    """One producer process (an executor, or a partition store) and every channel a task
    reads from it: one request at a time covers them all."""

    location: Any
    name: str
    channels: list[tuple[PollingInputGate, _Channel]] = field(default_factory=list)
    #: the channels of the request in flight, in its order (empty: none in flight)
    asked: list[tuple[PollingInputGate, _Channel]] = field(default_factory=list)
    asked_at: float = 0.0

    def wanted(self) -> list[tuple[PollingInputGate, _Channel]]:
        """The channels that need asking: not done, not handed over, and (range gates
        still gathering samples) without a sample."""
        return [
            (gate, c)
            for gate, c in self.channels
            if not c.done
            and c.spec.buffers is None
            and not (gate._sampling() and c.sample is not None)
        ]


def by_producer(gates: Sequence[PollingInputGate]) -> dict[str, _Producer]:
    """The channels to ask for (not handed over), of every gate, by the process holding
    their partition: each process gets one request for all of them."""
    producers: dict[str, _Producer] = {}
    for gate in gates:
        for channel in gate.channels:
            if channel.spec.buffers is None:
                where = channel.spec.descriptor
                producer = producers.setdefault(
                    where.location_name, _Producer(where.location, where.location_name)
                )
                producer.channels.append((gate, channel))
    return producers


def read_gates(
    gates: Sequence[PollingInputGate], cancelled: threading.Event
) -> Generator[tuple[InputGateDescriptor, pa.Table | None], None, None]:
    """Yield ``(gate descriptor, table)`` as buffers arrive and ``(gate descriptor, None)``
    when an input has no more data.  Raises the library's errors for failed or lost producers.

    The task keeps one request open per producer *process*, for all its channels there
    (of every input): the process answers it the moment any of them has news, and the
    request's cursors return the credit of every channel at once.  A job of p x p
    channels on e executors sends at most p x e requests at a time, not p x p."""
    producers = by_producer(gates)
    handed_over: list[PollingInputGate] = []
    for gate in gates:
        if gate.finished:  # no producers at all
            yield from _end(gate)
            continue
        for channel in gate.channels:
            if channel.spec.buffers is not None:
                channel.sample = channel.spec.sample  # range edges: known without a poll
        if any(c.spec.buffers is not None for c in gate.channels):
            handed_over.append(gate)
    outstanding: dict[Any, _Producer] = {}

    def ask_idle() -> None:
        for producer in producers.values():
            if not producer.asked:
                _ask(producer, outstanding)

    ask_idle()
    for gate in handed_over:  # after the requests went out: they run meanwhile
        if gate.spec.range_read is not None:
            gate.derive_boundaries()
            if gate.boundaries is None:
                continue  # read once the requests brought the other producers' samples
        yield from _read_handed_over(gate)
    while outstanding:
        ready, _ = ray.wait(list(outstanding), num_returns=1, timeout=_WAIT_SLICE)
        if cancelled.is_set():
            raise JobCancelledError("job cancelled")
        if not ready:
            _check_stuck(outstanding.values())
            continue
        producer = outstanding.pop(ready[0])
        asked, producer.asked = producer.asked, []
        answers = _get_answers(ready[0], producer, asked)
        arrived: list[tuple[PollingInputGate, _Channel, list[BufferRef]]] = []
        opened: list[PollingInputGate] = []  # range gates whose boundaries just became known
        for (gate, channel), response in zip(asked, answers, strict=True):
            was_sampling = gate._sampling()
            gate.accept(channel, response)
            if was_sampling and not gate._sampling():
                opened.append(gate)
            if response.buffers:
                arrived.append((gate, channel, response.buffers))
        ask_idle()  # before fetching: the requests acknowledge, we hold the refs
        for gate in opened:
            yield from _read_handed_over(gate)
        if arrived:
            tables = _fetch_arrived(arrived, producer)
            for (gate, channel, _), fetched in zip(arrived, tables, strict=True):
                yield from _deliver(gate, fetched, channel)
        for gate in {id(g): g for g, _ in asked if g.spec.in_producer_order}.values():
            yield from _deliver(gate, [])  # a channel that ended passes the turn on
        for gate, _ in asked:
            if gate.finished:
                yield from _end(gate)


def _ask(producer: _Producer, outstanding: dict[Any, _Producer]) -> None:
    """Send ``producer`` one request for every channel of it that needs asking."""
    asked = producer.wanted()
    if not asked:
        return
    requests = [gate.request(channel) for gate, channel in asked]
    log.debug("poll %s for %d channels", producer.name, len(requests))
    ref = producer.location.poll_many.remote(requests, _POLL_WAIT)
    for gate in {id(g): g for g, _ in asked}.values():
        gate.metrics.polls += 1
    producer.asked, producer.asked_at = asked, time.monotonic()
    outstanding[ref] = producer


def _fetch_arrived(
    arrived: Sequence[tuple[PollingInputGate, _Channel, list[BufferRef]]], producer: _Producer
) -> list[list[pa.Table]]:
    """The tables of every channel's new buffers, in one ``ray.get``."""
    gate, channel, _ = arrived[0]
    every = [b for _, _, buffers in arrived for b in buffers]
    tables = _fetch(every, gate, channel, producer.name)
    out, at = [], 0
    for _, _, buffers in arrived:
        out.append(tables[at : at + len(buffers)])
        at += len(buffers)
    return out


def _read_handed_over(
    gate: PollingInputGate,
) -> Iterator[tuple[InputGateDescriptor, pa.Table | None]]:
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
        yield from _deliver(gate, tables, c)
    if gate.finished:
        yield from _end(gate)


def _deliver(
    gate: PollingInputGate, tables: list[pa.Table], channel: _Channel | None = None
) -> Iterator[tuple[InputGateDescriptor, pa.Table | None]]:
    """``channel``'s new ``tables``, as far as their turn has come (``in_order``)."""
    for table in gate.in_order(channel, tables):
        gate.metrics.buffers += 1
        gate.metrics.bytes += table.nbytes
        selected = gate.select_rows(table)
        gate.metrics.rows += selected.num_rows
        if selected.num_rows:
            yield gate.spec, selected


def _end(gate: PollingInputGate) -> Iterator[tuple[InputGateDescriptor, pa.Table | None]]:
    """The end of an input; one that delivered no row first yields a zero-row table of
    a producer's schema, if one told it, so its consumer learns the columns (a left
    join's empty right side whose schema the plan could not know).  Never beside
    rows: a producer's empty output may have other types than another's rows.
    Yielded once, however many channels report the end together."""
    if gate.ended:
        return
    gate.ended = True
    if gate.metrics.rows == 0 and gate.schema is not None:
        yield gate.spec, gate.schema.empty_table()
    yield gate.spec, None


def _check_stuck(producers: Iterable[_Producer]) -> None:
    now = time.monotonic()
    for producer in producers:
        gate, channel = producer.asked[0]
        if now - producer.asked_at > gate.wait_timeout:
            raise WaitTimeoutError(
                f"edge '{gate.spec.edge}': {producer.name}, which holds producer subtask "
                f"{channel.spec.producer_subtask}'s partition, did not answer for "
                f"{gate.wait_timeout:.0f} s; it is overloaded or hung, so check that executor "
                "or raise shuffle.wait_timeout"
            )


def _lost(gate: PollingInputGate, channel: _Channel) -> str:
    return (
        f"edge '{gate.spec.edge}': {channel.spec.descriptor.location_name}, which held producer "
        f"subtask {channel.spec.producer_subtask}'s partition, died; its data is lost, "
        "so rerun the job (or use a blocking/hybrid-full edge once failover is enabled)"
    )


def _get_answers(
    ref: Any, producer: _Producer, asked: Sequence[tuple[PollingInputGate, _Channel]]
) -> list[PollResponse]:
    gate, channel = asked[0]
    try:
        answers: list[PollResponse] = ray.get(ref, timeout=gate.wait_timeout)
    except ACTOR_GONE as e:
        raise ExecutorLostError(_lost(gate, channel)) from e
    return answers


def _fetch(
    buffers: Sequence[BufferRef],
    gate: PollingInputGate,
    channel: _Channel,
    source: str | None = None,
) -> list[pa.Table]:
    """The tables of ``buffers`` (from ``source``: the channel's producer subtask, or the
    process that answered for several channels)."""
    source = source or f"producer subtask {channel.spec.producer_subtask}"
    refs = [b.ref for b in buffers if not b.inline]  # inline buffers came by value
    try:
        fetched: list[pa.Table] = ray.get(refs, timeout=gate.wait_timeout) if refs else []
    except (OwnerDiedError, ObjectLostError) as e:
        raise ExecutorLostError(_lost(gate, channel)) from e
    except GetTimeoutError as e:
        raise DataConsumptionError(
            f"edge '{gate.spec.edge}': {len(buffers)} {plural(len(buffers), 'buffer')} from "
            f"{source} did not arrive "
            f"within {gate.wait_timeout:.0f} s; the object store is overloaded, so lower "
            "shuffle.buffer_size or raise wait_timeout"
        ) from e
    if len(fetched) == len(buffers):
        return fetched
    remote = iter(fetched)
    return [b.ref.table if b.inline else next(remote) for b in buffers]
