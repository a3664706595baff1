"""Which result partitions exist, who holds them, who still needs them, when they go.

Flink's ``JobMasterPartitionTracker``, for the session: the scheduler registers
a partition when its producer deploys, tells the tracker when the producer
finished (with the buffers it handed over) and when each consumer deployed and
finished; the tracker decides when a partition can be released and asks the
shuffle master to do it.  Failover and the cache ask it what survives
(``held_by``).

Release rules (Flink's region release strategy):
- a partition is released once every consumer channel reading it belongs to a
  finished consumer (channels are counted as a set, so a consumer that runs again
  never counts twice);
- whatever is left of a job is released when the job ends (``release_job``),
  except the partitions ``promote``d first: a cache's blocking-persistent
  partitions of a job that succeeded.  They stop belonging to the job (Flink's
  cluster partitions) and are released only by ``release`` (the cache is
  invalidated or lost) or by the master's close; losses mark them as any other.

Speculative attempts (``runtime.speculation``): a second attempt of a running task
registers its partitions with ``register_speculative``; they are tracked (so released
with the job, or lost with their holder) but not indexed for consumers, so no consumer
is ever handed them.  ``speculation_won`` makes them the task's partitions (the other
attempt's are released), ``speculation_dropped`` releases them.  Their loss never makes
their producer run again: the scheduler drops the copy instead.

Handed-over buffers (``HandedOver``: a finished partition's refs, for consumers
that deploy later and read without polling) are kept only until every consumer
channel of the partition has been made, so the tracker never pins a partition's
objects longer than its readers need.

Plain Python: the master is the only thing it calls, so it is tested with a
recording master and no cluster.
"""

from __future__ import annotations

import enum
import logging
from collections import defaultdict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hybrid_shuffle.shuffle.api import (
    ConsumerDescriptor,
    HandedOver,
    PartitionDescriptor,
    PartitionId,
    ProducerDescriptor,
    ShuffleDescriptor,
    ShuffleMaster,
)

__all__ = ["PartitionTracker", "TrackedState"]

log = logging.getLogger(__name__)


class TrackedState(enum.Enum):
    REGISTERED = "registered"  # its producer deployed
    PRODUCED = "produced"  # its producer finished
    LOST = "lost"  # its holder died: it must be produced again to be read
    RELEASED = "released"


#: one consumer channel of a partition: (subpartition, reader)
_ChannelKey = tuple[int, int]


@dataclass
class _Tracked:
    descriptor: ShuffleDescriptor
    producer: Hashable
    state: TrackedState = TrackedState.REGISTERED
    #: the channels that will read it (the descriptor's count, unless an adaptive
    #: consumer turned out to have fewer: ``readers_decided``)
    readers: int = 0
    channels: set[_ChannelKey] = field(default_factory=set)
    finished_channels: set[_ChannelKey] = field(default_factory=set)
    handed_over: HandedOver | None = None
    consumers: set[Hashable] = field(default_factory=set)


class PartitionTracker:
    def __init__(self, master: ShuffleMaster) -> None:
        self._master = master
        self._partitions: dict[PartitionId, _Tracked] = {}
        #: (job, edge, producer subtask) -> partition
        self._by_edge: dict[tuple[str, str, int], PartitionId] = {}
        #: (job, producer task) -> the partitions of its current attempt
        self._by_producer: dict[tuple[str, Hashable], list[PartitionId]] = defaultdict(list)
        #: (job, consumer task) -> the channels its current attempt reads
        self._reads: dict[tuple[str, Hashable], list[tuple[PartitionId, _ChannelKey]]] = (
            defaultdict(list)
        )
        #: partitions that outlive their job (``promote``)
        self._promoted: set[PartitionId] = set()
        #: (job, producer task) -> the partitions of its running speculative attempt
        self._speculative: dict[tuple[str, Hashable], list[PartitionId]] = {}

    # -- producers -------------------------------------------------------------------------

    def register(
        self, producer_task: Hashable, partition: PartitionDescriptor, producer: ProducerDescriptor
    ) -> ShuffleDescriptor:
        descriptor = self._master.register_partition_with_producer(partition, producer)
        pid = partition.partition_id
        edge_key = (partition.job_id, partition.edge, partition.producer_subtask)
        superseded = self._by_edge.get(edge_key)
        if superseded is not None and superseded != pid:  # an earlier attempt's
            self._release([superseded])
        self._partitions[pid] = _Tracked(descriptor, producer_task, readers=partition.readers)
        self._by_producer[(partition.job_id, producer_task)].append(pid)
        self._by_edge[edge_key] = pid
        return descriptor

    def register_speculative(
        self, producer_task: Hashable, partition: PartitionDescriptor, producer: ProducerDescriptor
    ) -> ShuffleDescriptor:
        """A partition of a speculative attempt of ``producer_task``: tracked, but no
        consumer reads it unless ``speculation_won``."""
        descriptor = self._master.register_partition_with_producer(partition, producer)
        pid = partition.partition_id
        self._partitions[pid] = _Tracked(descriptor, producer_task, readers=partition.readers)
        self._speculative.setdefault((partition.job_id, producer_task), []).append(pid)
        return descriptor

    def speculation_won(self, job_id: str, producer_task: Hashable) -> None:
        """The speculative attempt of ``producer_task`` finished first: its partitions
        become the task's (consumers read them), the other attempt's are released."""
        pids = self._speculative.pop((job_id, producer_task), [])
        self._release(self._by_producer.pop((job_id, producer_task), []))
        for pid in pids:
            partition = self._partitions[pid].descriptor.partition
            self._by_edge[(job_id, partition.edge, partition.producer_subtask)] = pid
        self._by_producer[(job_id, producer_task)] = pids

    def speculation_dropped(self, job_id: str, producer_task: Hashable) -> None:
        """The speculative attempt of ``producer_task`` lost, failed or was cancelled:
        its partitions are released."""
        self._release(self._speculative.pop((job_id, producer_task), []))

    def descriptor(self, job_id: str, edge: str, producer_subtask: int) -> ShuffleDescriptor:
        return self._partitions[self._by_edge[(job_id, edge, producer_subtask)]].descriptor

    def producer_finished(
        self, job_id: str, producer_task: Hashable, handed: Mapping[PartitionId, HandedOver]
    ) -> None:
        """``producer_task`` finished; ``handed`` is what it handed over, per partition."""
        for pid in self._by_producer.get((job_id, producer_task), []):
            tracked = self._partitions.get(pid)
            if tracked is None or tracked.state is not TrackedState.REGISTERED:
                continue
            tracked.state = TrackedState.PRODUCED
            ready = handed.get(pid)
            if tracked.descriptor.partition.partition_type.persistent:
                continue  # read by later jobs, by polling: nothing is pinned for them
            if ready is not None and len(tracked.channels) < tracked.readers:
                tracked.handed_over = ready

    # -- consumers -------------------------------------------------------------------------

    def channel(
        self,
        consumer_task: Hashable,
        descriptor: ShuffleDescriptor,
        producer_subtask: int,
        subpartition: int,
        reader: int,
    ) -> ConsumerDescriptor:
        """A consumer's channel into a partition: handed-over buffers if its producer left
        them, else one to poll.  Counts the channel toward the partition's readers."""
        partition = descriptor.partition
        tracked = self._partitions[partition.partition_id]
        key = (subpartition, reader)
        tracked.channels.add(key)
        tracked.consumers.add(consumer_task)
        self._reads[(partition.job_id, consumer_task)].append((partition.partition_id, key))
        handed = tracked.handed_over
        if len(tracked.channels) >= tracked.readers:
            tracked.handed_over = None  # every reader has its channel now
        if handed is None:
            return ConsumerDescriptor(descriptor, producer_subtask, subpartition, reader)
        return ConsumerDescriptor(
            descriptor,
            producer_subtask,
            subpartition,
            reader,
            tuple(handed.buffers[subpartition]),
            handed.finished_at,
            handed.sample,
            handed.schema,
        )

    def handed_over(self, job_id: str, edge: str, producer_subtask: int) -> HandedOver | None:
        """What this finished partition hands to the consumers still to deploy (None once
        they all made their channels, or if it was polled): placement reads the sizes of
        its subpartitions."""
        pid = self._by_edge.get((job_id, edge, producer_subtask))
        tracked = None if pid is None else self._partitions.get(pid)
        return None if tracked is None else tracked.handed_over

    def readers_decided(self, job_id: str, edge: str, readers: int) -> None:
        """The partitions of ``edge`` will have ``readers`` channels: its adaptive consumer
        decided its parallelism (a range edge has one reader per consumer subtask)."""
        for (job, name, _), pid in self._by_edge.items():
            tracked = self._partitions.get(pid)
            if job == job_id and name == edge and tracked is not None:
                tracked.readers = readers

    def consumer_finished(self, job_id: str, consumer_task: Hashable) -> None:
        """Release what ``consumer_task`` read that no other consumer still reads."""
        done = []
        for pid, key in self._reads.pop((job_id, consumer_task), []):
            tracked = self._partitions.get(pid)
            if tracked is None or tracked.state is TrackedState.RELEASED:
                continue
            tracked.finished_channels.add(key)
            if len(tracked.finished_channels) >= tracked.readers:
                done.append(pid)
        self._release(done)

    # -- failover --------------------------------------------------------------------------

    def available(self, job_id: str, edge: str, producer_subtask: int) -> bool:
        """Whether a (restarted) consumer can read this partition again: reconsumable,
        and neither lost nor released (a blocking one also finished)."""
        pid = self._by_edge.get((job_id, edge, producer_subtask))
        tracked = None if pid is None else self._partitions.get(pid)
        if tracked is None or not tracked.descriptor.partition.partition_type.reconsumable:
            return False
        if tracked.descriptor.partition.partition_type.is_blocking():
            return tracked.state is TrackedState.PRODUCED
        return tracked.state in (TrackedState.REGISTERED, TrackedState.PRODUCED)

    def task_restarted(self, job_id: str, task: Hashable) -> None:
        """``task`` runs again as a new attempt: the partitions its old attempt wrote are
        released (consumers read the new attempt's), and the channels it read are
        forgotten (the new attempt makes its own)."""
        self._release(self._by_producer.pop((job_id, task), []))
        self._release(self._speculative.pop((job_id, task), []))
        for pid, key in self._reads.pop((job_id, task), []):
            tracked = self._partitions.get(pid)
            if tracked is not None:
                tracked.channels.discard(key)

    def executor_lost(self, executor_index: int) -> list[PartitionId]:
        """The partitions executor ``executor_index`` held are lost with it."""
        lost = self.held_by(executor_index)
        self._mark_lost(lost)
        return lost

    def poll_lost(self) -> list[PartitionId]:
        """The partitions the shuffle services saw lost since the last call."""
        lost = [p for p in self._master.lost_partitions() if p in self._partitions]
        self._mark_lost(lost)
        return lost

    def corrupted(self, partition_id: PartitionId) -> tuple[Hashable, PartitionDescriptor] | None:
        """A reader found ``partition_id``'s spill file corrupted, truncated or deleted: the
        partition is lost as if its holder had died (``lost_producers``, ``available``).
        Returns its producer task and descriptor the first time; None if it is not
        tracked, or already lost or released (another reader told first)."""
        tracked = self._partitions.get(partition_id)
        if tracked is None or tracked.state is TrackedState.LOST:
            return None
        tracked.state = TrackedState.LOST
        tracked.handed_over = None
        log.info("partition %s lost: its spill file is corrupted", partition_id)
        return tracked.producer, tracked.descriptor.partition

    def _mark_lost(self, partition_ids: list[PartitionId]) -> None:
        for pid in partition_ids:
            tracked = self._partitions[pid]
            tracked.state = TrackedState.LOST
            tracked.handed_over = None
        if partition_ids:
            log.info("%d partitions lost with their holder", len(partition_ids))

    def lost_producers(self, job_id: str) -> set[Hashable]:
        """The producer tasks of ``job_id`` whose partition is lost but still to be read:
        they must run again before its readers can finish.  A speculative attempt's
        partitions are not read: their loss is not counted."""
        copies = {pid for pids in self._speculative.values() for pid in pids}
        return {
            t.producer
            for pid, t in self._partitions.items()
            if t.state is TrackedState.LOST
            and t.descriptor.partition.job_id == job_id
            and pid not in copies
        }

    # -- lifecycle -------------------------------------------------------------------------

    def promote(self, partition_ids: list[PartitionId]) -> None:
        """These (persistent, produced) partitions outlive their job: ``release_job``
        leaves them, ``release`` frees them."""
        self._promoted.update(partition_ids)

    def release(self, partition_ids: list[PartitionId]) -> None:
        """Release promoted partitions (a cache invalidated or lost)."""
        self._promoted.difference_update(partition_ids)
        self._release(partition_ids)

    def all_produced(self, partition_ids: list[PartitionId]) -> bool:
        """Every one of these partitions is still held whole (none lost or released):
        whether a cache can be read."""
        return all(self.state(pid) is TrackedState.PRODUCED for pid in partition_ids)

    def release_job(self, job_id: str) -> None:
        """Release every partition of ``job_id`` still held (the job ended), except the
        promoted ones."""
        self._release(
            [
                p
                for p, t in self._partitions.items()
                if t.descriptor.partition.job_id == job_id and p not in self._promoted
            ]
        )
        indexes: tuple[dict[Any, Any], ...] = (
            self._reads,
            self._by_edge,
            self._by_producer,
            self._speculative,
        )
        for index in indexes:
            for key in [k for k in index if k[0] == job_id]:
                del index[key]

    def _release(self, partition_ids: list[PartitionId]) -> None:
        descriptors = []
        for pid in partition_ids:
            self._promoted.discard(pid)
            tracked = self._partitions.pop(pid, None)
            if tracked is not None:
                tracked.state = TrackedState.RELEASED
                tracked.handed_over = None
                descriptors.append(tracked.descriptor)
        if descriptors:
            log.debug("releasing %d partitions", len(descriptors))
            self._master.release_partitions_externally(descriptors)

    def held_by(self, executor_index: int) -> list[PartitionId]:
        """Partitions whose producer ran on ``executor_index`` (lost if it dies)."""
        return [
            pid
            for pid, t in self._partitions.items()
            if t.descriptor.producer_executor == executor_index
        ]

    def partitions(self, job_id: str | None = None) -> list[ShuffleDescriptor]:
        """The tracked (unreleased) partitions, optionally of one job."""
        return [
            t.descriptor
            for t in self._partitions.values()
            if job_id is None or t.descriptor.partition.job_id == job_id
        ]

    def state(self, partition_id: PartitionId) -> TrackedState:
        tracked = self._partitions.get(partition_id)
        return TrackedState.RELEASED if tracked is None else tracked.state
