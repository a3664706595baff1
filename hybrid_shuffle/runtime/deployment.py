"""What the scheduler ships to an executor: a task's partitions, gates and operators.

From the plan (which vertex reads which edge, with which partitioner) and the
partition tracker (where each producer's partition lives, what it handed
over), this builds FLIP-31's descriptors for one task: a
``PartitionDescriptor`` per output, an ``InputGateDescriptor`` per input with
one ``ConsumerDescriptor`` per producer, and the ``TaskDeployment`` around them.
Every job's sink writes one extra blocking partition, the *result edge*, which
the driver reads (unless the run only fills caches).  A vertex that fills a
cache writes one more, blocking-persistent, per subtask: the cache's partition.
A vertex that reads a cache gets a gate whose one channel reads the cache's
partition of its subtask; the channel is not counted by the tracker, since
reading a cache never releases it.  Plain Python, no Ray.
"""

from __future__ import annotations

from collections.abc import Hashable

from hybrid_shuffle.config import OperatorsConfig
from hybrid_shuffle.operators.base import Columns, Operator
from hybrid_shuffle.plan.cache import cache_edge
from hybrid_shuffle.plan.graph import JobEdge, JobGraph, JobVertex
from hybrid_shuffle.plan.regions import TaskKey
from hybrid_shuffle.runtime.partition_tracker import PartitionTracker
from hybrid_shuffle.runtime.task import TaskDeployment
from hybrid_shuffle.shuffle.api import (
    ConsumerDescriptor,
    InputGateDescriptor,
    PartitionDescriptor,
    PartitionId,
    RangeRead,
    ShuffleDescriptor,
)
from hybrid_shuffle.shuffle.partition_type import (
    BLOCKING_PERSISTENT,
    ResultPartitionType,
    partition_type,
)
from hybrid_shuffle.shuffle.routing import Partitioner, PartitionerKind

__all__ = ["RESULT_EDGE", "Deployer", "producers_of", "subpartitions_of"]

RESULT_EDGE = "result"


def producers_of(graph: JobGraph, edge: JobEdge, consumer: int) -> list[TaskKey]:
    """The producer subtasks consumer subtask ``consumer`` of ``edge`` reads from."""
    producer = graph.vertices[edge.source]
    if edge.partitioner.is_all_to_all():
        return [(producer.id, i) for i in range(producer.parallelism)]
    return [(producer.id, consumer)]


def subpartitions_of(consumer: int, consumers: int, subpartitions: int) -> range:
    """The subpartitions consumer ``consumer`` of ``consumers`` reads: its own one, or a
    contiguous share when producers wrote more (for an adaptive consumer, as Flink's
    adaptive batch scheduler assigns subpartition ranges)."""
    return range(consumer * subpartitions // consumers, (consumer + 1) * subpartitions // consumers)


class Deployer:
    """Builds the descriptors of one job's tasks (see the module docstring)."""

    def __init__(
        self,
        graph: JobGraph,
        job_id: str,
        tracker: PartitionTracker,
        buffer_size: int,
        wait_timeout: float,
        result_service: str = "executor-local",
        operators: OperatorsConfig | None = None,
        collect: bool = True,
    ) -> None:
        self.graph = graph
        #: the sink writes the result partition the driver reads
        self.collect = collect
        #: ``operators:`` (memory, threads), shipped with every task
        self.operators = operators or OperatorsConfig()
        #: the service of the sink's result partitions (the session's default)
        self.result_service = result_service
        self.job_id = job_id
        self.tracker = tracker
        self.buffer_size = buffer_size
        self.wait_timeout = wait_timeout
        #: task -> its current attempt (0-based); the scheduler raises it on a restart
        self.attempts: dict[TaskKey, int] = {}

    def output_partitions(
        self, task: TaskKey, attempt: int | None = None
    ) -> list[PartitionDescriptor]:
        """The partitions ``task`` writes: one per output edge, plus the result's (of
        its current attempt, or of ``attempt``: a speculative one)."""
        vid, subtask = task
        vertex = self.graph.vertices[vid]
        attempt = self.attempts.get(task, 0) if attempt is None else attempt
        out = [self._partition(edge, subtask, attempt) for edge in vertex.outputs]
        if vertex.cache_fill is not None:
            out.append(self.cache_partition(vertex, subtask, attempt))
        if vid == self.graph.sink and self.collect:
            out.append(self.result_partition(subtask, attempt))
        return out

    def _id(self, edge: str, subtask: int, attempt: int) -> PartitionId:
        return PartitionId(f"{self.job_id}/{edge}/{subtask}.{attempt}")

    def result_partition(self, subtask: int, attempt: int = 0) -> PartitionDescriptor:
        return self._whole(RESULT_EDGE, subtask, attempt, partition_type("blocking"))

    def cache_partition(
        self, vertex: JobVertex, subtask: int, attempt: int = 0
    ) -> PartitionDescriptor:
        """Subtask ``subtask``'s partition of the cache ``vertex`` fills."""
        assert vertex.cache_fill is not None
        edge = cache_edge(vertex.cache_fill.name)
        return self._whole(edge, subtask, attempt, BLOCKING_PERSISTENT)

    def _whole(
        self, edge: str, subtask: int, attempt: int, kind: ResultPartitionType
    ) -> PartitionDescriptor:
        """A subtask's whole output as one subpartition with one reader, in the session's
        service: the result the driver reads, or a cache's partition."""
        return PartitionDescriptor(
            self._id(edge, subtask, attempt),
            self.job_id,
            edge,
            subtask,
            1,
            1,
            kind,
            Partitioner(PartitionerKind.FORWARD),
            self.result_service,
            attempt,
        )

    def _partition(self, edge: JobEdge, subtask: int, attempt: int) -> PartitionDescriptor:
        target = self.graph.vertices[edge.target]
        # an adaptive consumer's count is not known yet: write (or admit readers) for the
        # most it can have; each consumer then reads a range of subpartitions
        consumers = (
            target.adaptive.max_partitions
            if target.adaptive is not None and target.awaits_parallelism
            else target.parallelism
        )
        shared = edge.partitioner.shares_one_subpartition()
        forward = not edge.partitioner.is_all_to_all()
        if edge.reads_whole is not None:  # a join's build side read whole by every consumer
            return self._read_whole(edge, subtask, attempt, consumers)
        return PartitionDescriptor(
            self._id(edge.name, subtask, attempt),
            self.job_id,
            edge.name,
            subtask,
            num_subpartitions=1 if (shared or forward) else consumers,
            readers_per_subpartition=consumers if shared else 1,
            partition_type=edge.partition_type,
            partitioner=edge.partitioner,
            service=edge.service,
            attempt=attempt,
        )

    def _read_whole(
        self, edge: JobEdge, subtask: int, attempt: int, consumers: int
    ) -> PartitionDescriptor:
        """A partition written hash-partitioned as planned (``reads_whole`` subpartitions)
        and read whole by each of ``consumers`` over reader 0: its readers count
        (subpartitions x consumers) is never reached by the tracker's distinct channels,
        so it is kept until the job ends (a failed consumer can read it again)."""
        assert edge.reads_whole is not None
        return PartitionDescriptor(
            self._id(edge.name, subtask, attempt),
            self.job_id,
            edge.name,
            subtask,
            num_subpartitions=edge.reads_whole,
            readers_per_subpartition=max(consumers, 2),
            partition_type=edge.partition_type,
            partitioner=edge.partitioner,
            service=edge.service,
            attempt=attempt,
        )

    def deployment(
        self,
        task: TaskKey,
        attempt: int | None = None,
        outputs: list[ShuffleDescriptor] | None = None,
    ) -> TaskDeployment:
        """The task's deployment; its producers' partitions must be registered.  A
        speculative attempt passes its ``attempt`` and the ``outputs`` it registered
        (in ``output_partitions``' order): they are not the ones consumers read."""
        vid, subtask = task
        vertex = self.graph.vertices[vid]
        gates = [self.gate(task, edge, subtask) for edge in vertex.inputs]
        if vertex.cache_read is not None:
            gates.append(self.cache_gate(vertex, subtask))
        registered = outputs
        outputs = [self.tracker.descriptor(self.job_id, e.name, subtask) for e in vertex.outputs]
        combiners: list[Operator | None] = [e.combiner for e in vertex.outputs]
        columns: list[Columns] = [e.columns for e in vertex.outputs]
        extra = []
        if vertex.cache_fill is not None:
            extra.append(cache_edge(vertex.cache_fill.name))
        if vid == self.graph.sink and self.collect:
            extra.append(RESULT_EDGE)
        for name in extra:  # written whole: no combiner, every column
            outputs.append(self.tracker.descriptor(self.job_id, name, subtask))
            combiners.append(None)
            columns.append(None)
        if registered is not None:
            outputs = registered
        return TaskDeployment(
            job_id=self.job_id,
            vertex=vertex.name,
            subtask=subtask,
            attempt=self.attempts.get(task, 0) if attempt is None else attempt,
            operators=vertex.operators,
            gates=gates,
            outputs=outputs,
            combiners=combiners,
            columns=columns,
            source_refs=None if vertex.source_splits is None else vertex.source_splits[subtask],
            buffer_size=self.buffer_size,
            wait_timeout=self.wait_timeout,
            operator_memory=self.operators.memory,
            threads=self.operators.threads,
        )

    def gate(self, consumer_task: Hashable, edge: JobEdge, consumer: int) -> InputGateDescriptor:
        shared = edge.partitioner.shares_one_subpartition()
        consumers = self.graph.vertices[edge.target].parallelism
        channels: list[ConsumerDescriptor] = []
        for _, producer in producers_of(self.graph, edge, consumer):
            descriptor = self.tracker.descriptor(self.job_id, edge.name, producer)
            if edge.reads_whole is not None:  # every subpartition, as a broadcast
                n = descriptor.partition.num_subpartitions
                reads = [(sub, 0) for sub in range(n)]
            elif shared:
                reads = [(0, consumer)]
            elif edge.partitioner.is_all_to_all():
                n = descriptor.partition.num_subpartitions
                reads = [(sub, 0) for sub in subpartitions_of(consumer, consumers, n)]
            else:
                reads = [(0, 0)]
            channels.extend(
                self.tracker.channel(consumer_task, descriptor, producer, subpartition, reader)
                for subpartition, reader in reads
            )
        range_read = None
        if edge.partitioner.kind is PartitionerKind.RANGE:
            range_read = RangeRead(
                consumer,
                self.graph.vertices[edge.target].parallelism,
                edge.partitioner.keys[0],
                edge.partitioner.descending,
            )
        return InputGateDescriptor(
            edge.target_input,
            edge.name,
            consumer,
            tuple(channels),
            range_read,
            edge.target_operator,
            edge.partitioner.in_producer_order,
        )

    def cache_gate(self, vertex: JobVertex, subtask: int) -> InputGateDescriptor:
        """Subtask ``subtask`` of a cache-reading vertex reads partition ``subtask``."""
        cache = vertex.cache_read
        assert cache is not None
        channel = ConsumerDescriptor(cache.partitions[subtask], subtask, 0, 0)
        return InputGateDescriptor(0, cache_edge(cache.name), subtask, (channel,))

    def result_gate(self, subtask: int) -> InputGateDescriptor:
        """The driver's gate into the sink's result partition ``subtask``."""
        descriptor = self.tracker.descriptor(self.job_id, RESULT_EDGE, subtask)
        channel = self.tracker.channel(("driver", subtask), descriptor, subtask, 0, 0)
        return InputGateDescriptor(0, RESULT_EDGE, -1, (channel,))
