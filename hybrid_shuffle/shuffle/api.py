"""FLIP-31's pluggable shuffle service, on Ray: the interfaces and the descriptors.

``ShuffleServiceFactory`` creates one ``ShuffleMaster`` per session on the
driver (the partition registry and lifecycle: Flink's JobMaster side) and one
``ShuffleEnvironment`` inside every executor actor (writers, input gates, local
release: Flink's TaskExecutor side).  The runtime talks only to these
interfaces and to the descriptors below, so a second implementation (the
external partition store) is one new module selected by ``shuffle.service``.

This module imports nothing from the planner, the graph or the config: a
service sees partitions, producers and consumers, never a job graph.

Descriptors, in the order a partition meets them:
- ``PartitionDescriptor``: what the scheduler knows before the partition exists
  (id, edge, producer subtask, subpartitions, type, partitioner);
- ``ProducerDescriptor``: where the producing task runs;
- ``ShuffleDescriptor``: what the master returns on registration, how consumers
  reach the partition (``location``);
- ``ConsumerDescriptor``: one consumer's channel into one partition (which
  subpartition, which reader, and the buffers if they were handed over);
- ``InputGateDescriptor``: every channel of one input edge of one consumer.

The data plane is pull-based: a consumer's input gate sends ``PollRequest``s to
``ShuffleDescriptor.location`` and receives ``PollResponse``s holding ObjectRefs
owned by whichever process stores the partition.  Credit is expressed by the
consumer's cursor: a producer of a bounded (pipelined) partition may run at most
``credits`` buffers ahead of its slowest reader.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NewType, Protocol, runtime_checkable

import pyarrow as pa

from hybrid_shuffle.shuffle.inline_table import InlineTable
from hybrid_shuffle.shuffle.metrics import ReadMetrics, WriteMetrics
from hybrid_shuffle.shuffle.partition_type import ResultPartitionType
from hybrid_shuffle.shuffle.routing import Partitioner

__all__ = [
    "BufferRef",
    "ConsumerDescriptor",
    "HandedOver",
    "InputGate",
    "InputGateDescriptor",
    "KeyRange",
    "PartitionDescriptor",
    "PartitionId",
    "PollErrorKind",
    "PollRequest",
    "PollResponse",
    "ProducerDescriptor",
    "RangeRead",
    "ResultPartitionWriter",
    "ShuffleDescriptor",
    "ShuffleEnvironment",
    "ShuffleEnvironmentContext",
    "ShuffleMaster",
    "ShuffleMasterContext",
    "ShuffleServiceFactory",
]

PartitionId = NewType("PartitionId", str)


# -- descriptors ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionDescriptor:
    """What the scheduler knows of a result partition before it is produced."""

    partition_id: PartitionId
    job_id: str
    edge: str
    producer_subtask: int
    num_subpartitions: int
    #: consumers reading each subpartition (n for broadcast and range, else 1)
    readers_per_subpartition: int
    partition_type: ResultPartitionType
    partitioner: Partitioner
    #: the shuffle service that stores it (``shuffle.service`` or ``edges.NAME.service``)
    service: str = "executor-local"
    #: the producer task's attempt (0-based): a restarted producer writes a new partition,
    #: with a new id, so a consumer never mixes the buffers of two attempts
    attempt: int = 0

    @property
    def readers(self) -> int:
        """How many consumer channels read this partition in all."""
        return self.num_subpartitions * self.readers_per_subpartition


@dataclass(frozen=True)
class ProducerDescriptor:
    """Where the producing task runs: an executor actor (slot) of the session."""

    executor_index: int
    #: the executor's Ray actor handle (``Any``: this module does not import ray)
    executor: Any
    #: the Ray node the executor runs on (a service may keep the partition near it)
    node_id: str = ""


@dataclass(frozen=True)
class ShuffleDescriptor:
    """How consumers reach a partition: ``location.poll_many.remote([PollRequest], wait)``."""

    partition: PartitionDescriptor
    #: the actor that holds the partition and answers polls (``Any``: a Ray handle)
    location: Any
    location_name: str
    #: the executor the producer ran on (-1 if the service stores partitions elsewhere)
    producer_executor: int = -1


@dataclass(frozen=True)
class KeyRange:
    """Non-null key span of a sorted buffer of a range partition, for skipping it."""

    min_key: Any  # pyarrow scalar, null if the buffer holds only null keys
    max_key: Any
    has_nulls: bool

    def may_hold(self, boundaries: Any, bucket: int, num_buckets: int, take_nulls: bool) -> bool:
        """Whether the buffer can hold rows of range bucket ``bucket`` (a reader that also
        takes the null keys wants every buffer holding any)."""
        from hybrid_shuffle.shuffle.partitioner import bucket_overlaps

        if self.has_nulls and take_nulls:
            return True
        if not self.min_key.is_valid:
            return False
        return bucket_overlaps(self.min_key, self.max_key, False, boundaries, bucket, num_buckets)


@dataclass(frozen=True)
class BufferRef:
    seq: int
    #: ray.ObjectRef[pyarrow.Table], owned by the partition's holder; or, for a small
    #: buffer sent by value (``inline``), an ``InlineTable``: its ``table`` is the buffer
    ref: Any
    rows: int
    nbytes: int
    key_range: KeyRange | None = None

    @property
    def inline(self) -> bool:
        """The buffer travels by value: ``ref`` is an ``InlineTable`` (``result_partition``)."""
        return isinstance(self.ref, InlineTable)


@dataclass(frozen=True)
class HandedOver:
    """A finished partition given to its later readers whole, instead of being polled."""

    #: per subpartition, every buffer in order
    buffers: list[list[BufferRef]]
    #: range partitions: the producer's key sample (as a poll would have returned it)
    sample: Any
    #: when the producer finished (epoch seconds)
    finished_at: float
    #: the producer's output schema (known even when it wrote no row)
    schema: pa.Schema | None = None


@dataclass(frozen=True)
class ConsumerDescriptor:
    """One consumer's channel into one producer's partition."""

    descriptor: ShuffleDescriptor
    producer_subtask: int
    subpartition: int
    reader: int
    #: the whole subpartition, when its producer finished before this consumer deployed
    #: and handed its buffers over (``HandedOver``): read, never polled
    buffers: tuple[BufferRef, ...] | None = None
    producer_finished_at: float = 0.0
    #: with handed-over buffers of a range partition: the producer's key sample
    sample: Any = None
    #: with handed-over buffers: the producer's output schema
    schema: pa.Schema | None = None


@dataclass(frozen=True)
class RangeRead:
    """This consumer's place in a range-partitioned edge."""

    consumer: int
    consumers: int
    key: str
    descending: bool

    @property
    def bucket(self) -> int:
        """Consumers are ordered by output position; buckets by ascending key."""
        return self.consumers - 1 - self.consumer if self.descending else self.consumer

    @property
    def take_nulls(self) -> bool:
        return self.consumer == self.consumers - 1  # nulls sort last either way


@dataclass(frozen=True)
class InputGateDescriptor:
    """Every channel of one input edge of one consumer subtask.

    It feeds input ``input_index`` of operator ``operator_index`` of the task's chain:
    the head (0), or an operator chained further down that takes a second input (a
    broadcast join chained into its probe side's producer)."""

    input_index: int
    edge: str
    consumer_subtask: int
    channels: tuple[ConsumerDescriptor, ...]
    range_read: RangeRead | None = None
    operator_index: int = 0
    #: deliver the channels' rows one producer after the other, in subtask order
    #: (``Partitioner.in_producer_order``)
    in_producer_order: bool = False


# -- the data plane ------------------------------------------------------------------------


@dataclass(frozen=True)
class PollRequest:
    """One consumer's read of one subpartition.

    ``cursor`` acknowledges every buffer before it (those may be released, for
    partitions released by consumption) and asks for buffers from it on.
    ``bucket`` is the consumer's ascending range bucket for range partitions,
    together with the boundaries it computed from every producer's sample;
    ``max_buffers == 0`` asks only for the partition's state and sample.
    """

    partition_id: PartitionId
    subpartition: int
    reader: int
    cursor: int
    max_buffers: int
    wait_seconds: float
    bucket: int | None = None
    boundaries: Any = None  # pyarrow.Array of n-1 boundaries, for range reads
    num_buckets: int = 0
    #: range reads: this consumer also takes the rows whose key is null
    take_nulls: bool = False


class PollErrorKind(enum.Enum):
    """Why a poll could not be served (Flink's two named exceptions, and a spill file
    that failed its check when read back)."""

    PRODUCER_FAILED = "producer-failed"
    NOT_FOUND = "not-found"
    #: the partition's spill file is corrupted, truncated or deleted: the partition is lost
    CORRUPTED = "corrupted"


@dataclass
class PollResponse:
    buffers: list[BufferRef] = field(default_factory=list)
    #: the cursor to send next (past buffers skipped by a range filter as well)
    next_cursor: int = 0
    #: the producer finished and this reader has seen every buffer
    end_of_partition: bool = False
    #: range partitions: (sorted key sample, weight per sample) once the producer published it
    sample: Any = None
    #: a one-sentence reason if the producer failed or the partition is gone
    error: str | None = None
    error_kind: PollErrorKind | None = None
    #: when the producer finished writing (epoch seconds), for metrics
    producer_finished_at: float | None = None
    #: once finished: the producer's output schema, so that an input without rows
    #: still tells its consumer the columns
    schema: pa.Schema | None = None


# -- contexts ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShuffleEnvironmentContext:
    """Everything an executor-side environment is created from (one object, as in Flink)."""

    executor_index: int
    session_id: str
    #: bytes per object-store buffer
    buffer_size: int
    #: pipelined partitions: buffers a producer may run ahead of a reader
    credits: int
    #: seconds any single wait may last
    wait_timeout: float
    #: bytes of result-partition buffers this executor may keep in memory
    memory_budget: int
    #: the session's private spill directory (0700)
    spill_dir: str
    #: ``shuffle.checksums``: a checksum per spilled buffer, checked when it is read back
    checksums: bool = True


@dataclass(frozen=True)
class ShuffleMasterContext:
    """Everything a driver-side master is created from."""

    session_id: str
    #: seconds any single wait may last
    wait_timeout: float
    #: what a service that holds partitions in its own actors creates their storage from
    #: (sizes, credits, spill directory; ``executor_index`` -1)
    environment: ShuffleEnvironmentContext | None = None


# -- the interfaces ------------------------------------------------------------------------


@runtime_checkable
class ResultPartitionWriter(Protocol):
    """Producer side of one result partition: rows in, buffers out.

    Call order: ``emit`` any number of times, then exactly one of ``finish`` or
    ``fail``; after that, ``finished_buffers`` may be asked once.
    """

    descriptor: PartitionDescriptor

    def emit(self, table: pa.Table) -> None:
        """Route ``table``'s rows to their subpartitions (may wait for credit)."""

    def finish(self) -> None:
        """Flush and mark the partition complete; readers see end-of-partition."""

    def fail(self, reason: str) -> None:
        """Mark the partition failed; readers get ``reason`` as a producer failure."""

    @property
    def metrics(self) -> WriteMetrics: ...

    def finished_buffers(self) -> HandedOver | None:
        """The finished partition to hand to later consumers, or None if they must poll."""


@runtime_checkable
class InputGate(Protocol):
    """Consumer side of one input edge: every channel into its producers' partitions."""

    spec: InputGateDescriptor

    @property
    def metrics(self) -> ReadMetrics: ...


@runtime_checkable
class ShuffleMaster(Protocol):
    """Driver side: the registry and lifecycle of every result partition."""

    def register_partition_with_producer(
        self, partition: PartitionDescriptor, producer: ProducerDescriptor
    ) -> ShuffleDescriptor:
        """Record that ``producer`` will hold ``partition``; return how to read it."""

    def release_partitions_externally(self, descriptors: Sequence[ShuffleDescriptor]) -> None:
        """Free these partitions wherever they are held (job end, cache invalidation).

        Flink's ``releasePartitionExternally`` for many partitions at once, so a
        service can send one message per location rather than one per partition.
        """

    def wait_for_releases(self, timeout: float) -> None:
        """Block (at most ``timeout`` s) until earlier releases took effect."""

    def lost_partitions(self) -> Collection[PartitionId]:
        """Partitions whose holder this service saw die since the last call (never
        blocks).  Flink's ``JobShuffleContext.stopTrackingAndReleasePartitions``, pulled:
        a service that stores partitions in its own actors reports their loss here; one
        whose holders are the executors reports nothing (the scheduler sees an executor
        die and tells the partition tracker itself)."""

    def close(self) -> None:
        """Release whatever the master still holds."""


@runtime_checkable
class ShuffleEnvironment(Protocol):
    """Executor side: creates writers and gates, holds and releases local partitions."""

    def create_result_partition_writers(
        self, partitions: Sequence[ShuffleDescriptor], cancelled: threading.Event
    ) -> Sequence[ResultPartitionWriter]:
        """One writer per registered partition, for the task about to run (as Flink's
        ``ResultPartitionDeploymentDescriptor``, the master's descriptor says where the
        partition is kept); their waits end early once ``cancelled`` is set."""

    def create_input_gates(self, inputs: Sequence[InputGateDescriptor]) -> Sequence[InputGate]:
        """One gate per input edge of the task about to run."""

    def read(
        self, gates: Sequence[InputGate], cancelled: threading.Event
    ) -> Iterator[tuple[InputGateDescriptor, pa.Table | None]]:
        """``(gate, table)`` as buffers arrive, ``(gate, None)`` at each input's end, where
        ``gate`` is the input's descriptor (its ``input_index`` and ``operator_index`` say
        which operator input of the chain it feeds); raises the library's errors for
        failed or lost producers."""

    def release_partitions_locally(self, partition_ids: Collection[PartitionId]) -> None:
        """Drop these partitions' buffers and spill files, if held here."""

    def partitions_occupying_local_resources(self) -> set[PartitionId]:
        """Partitions held here; an executor may go away only when this is empty."""

    def poll_many(self, requests: Sequence[PollRequest], wait_seconds: float) -> list[PollResponse]:
        """Serve every channel one consumer task reads from this process in one call,
        answering all of them as soon as any has news, or after ``wait_seconds`` (the
        data port of FLIP-31's ``start()``)."""

    def close(self) -> None:
        """Release everything held locally."""


@runtime_checkable
class ShuffleServiceFactory(Protocol):
    """Creates the two halves of a shuffle service; chosen by ``shuffle.service``."""

    #: the name ``shuffle.service`` uses for this implementation
    name: str

    def create_shuffle_master(self, context: ShuffleMasterContext) -> ShuffleMaster: ...

    def create_shuffle_environment(
        self, context: ShuffleEnvironmentContext
    ) -> ShuffleEnvironment: ...
