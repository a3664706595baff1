"""FLIP-31's pluggable shuffle service, on Ray.

``ShuffleServiceFactory`` creates one ``ShuffleMaster`` per session on the
driver (the partition registry and lifecycle: Flink's JobMaster side) and one
``ShuffleEnvironment`` inside every executor actor (writers, input gates, local
release: Flink's TaskExecutor side).  The scheduler only ever talks to these
interfaces and to descriptors, so a second implementation (the external
partition store) plugs in by config without touching it.

The data plane is pull-based: a consumer's input gate sends ``PollRequest``s to
whatever ``ShuffleDescriptor.location`` names and receives ``PollResponse``s
holding ObjectRefs owned by the process that stores the partition.  Credits are
expressed by the consumer's cursor: a producer of a bounded (pipelined)
partition may run at most ``credits`` buffers ahead of its slowest reader.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, NewType

from hybrid_shuffle.config import ShuffleConfig
from hybrid_shuffle.shuffle.partition_type import ResultPartitionType
from hybrid_shuffle.shuffle.partitioner import bucket_overlaps
from hybrid_shuffle.shuffle.routing import Partitioner

__all__ = [
    "BufferRef",
    "HandedOver",
    "KeyRange",
    "PartitionDescriptor",
    "PartitionId",
    "PollRequest",
    "PollResponse",
    "ProducerDescriptor",
    "ShuffleDescriptor",
    "ShuffleEnvironment",
    "ShuffleEnvironmentContext",
    "ShuffleMaster",
    "ShuffleServiceFactory",
]

PartitionId = NewType("PartitionId", str)


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


@dataclass(frozen=True)
class ProducerDescriptor:
    """Where the producing task runs: an executor actor."""

    executor_index: int
    executor: Any  # ray.actor.ActorHandle; Any keeps this module free of ray


@dataclass(frozen=True)
class ShuffleDescriptor:
    """How consumers reach a partition: ``location.poll.remote(PollRequest)``."""

    partition: PartitionDescriptor
    location: Any
    location_name: str


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


@dataclass(frozen=True)
class KeyRange:
    """Non-null key span of a sorted buffer of a range partition, for skipping it."""

    min_key: Any  # pyarrow scalar, null if the buffer holds only null keys
    max_key: Any
    has_nulls: bool

    def may_hold(self, boundaries: Any, bucket: int, num_buckets: int, take_nulls: bool) -> bool:
        """Whether the buffer can hold rows of range bucket ``bucket`` (a reader that also
        takes the null keys wants every buffer holding any)."""
        if self.has_nulls and take_nulls:
            return True
        if not self.min_key.is_valid:
            return False
        return bucket_overlaps(self.min_key, self.max_key, False, boundaries, bucket, num_buckets)


@dataclass(frozen=True)
class BufferRef:
    seq: int
    ref: Any  # ray.ObjectRef[pyarrow.Table], owned by the partition's holder
    rows: int
    nbytes: int
    key_range: KeyRange | None = None


@dataclass(frozen=True)
class HandedOver:
    """A finished partition given to its later readers whole, instead of being polled."""

    #: per subpartition, every buffer in order
    buffers: list[list[BufferRef]]
    #: range partitions: the producer's key sample (as a poll would have returned it)
    sample: Any
    #: when the producer finished (epoch seconds)
    finished_at: float


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
    error_kind: str | None = None  # "producer-failed" | "not-found"
    #: when the producer finished writing (epoch seconds), for metrics
    producer_finished_at: float | None = None


@dataclass(frozen=True)
class ShuffleEnvironmentContext:
    """Everything an executor-side environment is created from (one object, as in Flink)."""

    executor_index: int
    session_id: str
    config: ShuffleConfig
    #: bytes of result-partition buffers this executor may keep in memory
    memory_budget: int
    spill_dir: str


class ShuffleMaster(ABC):
    """Driver side: the registry and lifecycle of every result partition."""

    @abstractmethod
    def register_partition_with_producer(
        self, partition: PartitionDescriptor, producer: ProducerDescriptor
    ) -> ShuffleDescriptor:
        """Record that ``producer`` will hold ``partition``; return how to read it."""

    @abstractmethod
    def release_partitions_externally(self, descriptors: Sequence[ShuffleDescriptor]) -> None:
        """Free these partitions wherever they are held (job end, cache invalidation).

        Flink's ``releasePartitionExternally`` for many partitions at once, so a
        service can send one message per location rather than one per partition."""

    @abstractmethod
    def registered_partitions(self, job_id: str | None = None) -> list[ShuffleDescriptor]:
        """The partitions registered and not yet released (optionally of one job)."""

    def wait_for_releases(self, timeout: float) -> None:
        """Block (at most ``timeout`` s) until earlier releases took effect."""

    def close(self) -> None:
        """Release whatever the master still tracks."""


class ShuffleEnvironment(ABC):
    """Executor side: creates writers and gates, holds and releases local partitions."""

    @abstractmethod
    def create_result_partition_writers(
        self, partitions: Sequence[PartitionDescriptor], cancelled: threading.Event
    ) -> list[Any]:
        """One ``ResultPartitionWriter`` per descriptor, for the task about to run;
        their waits end early once ``cancelled`` is set."""

    @abstractmethod
    def create_input_gates(self, inputs: Sequence[Any]) -> list[Any]:
        """One ``InputGate`` per input edge (``GateSpec``) of the task about to run."""

    @abstractmethod
    def release_partitions_locally(self, partition_ids: Collection[PartitionId]) -> None:
        """Drop these partitions' buffers and spill files, if held here."""

    @abstractmethod
    def partitions_occupying_local_resources(self) -> set[PartitionId]:
        """Partitions held here; an executor may go away only when this is empty."""

    @abstractmethod
    def update_partition_info(self, consumer: str, descriptor: ShuffleDescriptor) -> bool:
        """Tell a running consumer where a partition it waits for now lives."""

    @abstractmethod
    def poll(self, request: PollRequest) -> PollResponse:
        """Serve one consumer read (the data port of FLIP-31's ``start()``)."""

    @abstractmethod
    def close(self) -> None:
        """Release everything held locally."""


class ShuffleServiceFactory(ABC):
    """Creates the two halves of a shuffle service; chosen by ``shuffle.service``."""

    #: the name ``shuffle.service`` uses for this implementation
    name: str = ""

    @abstractmethod
    def create_shuffle_master(self, config: ShuffleConfig) -> ShuffleMaster: ...

    @abstractmethod
    def create_shuffle_environment(
        self, context: ShuffleEnvironmentContext
    ) -> ShuffleEnvironment: ...
