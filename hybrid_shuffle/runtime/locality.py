"""Which node holds how much of a task's input: what placement prefers (issue 14, 3).

A consumer reads the partitions of its blocking and hybrid inputs from where they
live.  With the executor-local service that is its producer's executor, so that
executor's node; with ``shuffle.service: external`` it is the partition store of the
producer's node (the master picks the store from ``ProducerDescriptor.node_id``).
Either way the node its producer's executor was on when the partition was registered
holds the partition, which is what ``Holder.node`` records.  A consumer on that node
reads the bytes through the node's own object store instead of over the network.

``input_weights`` says, for one consumer subtask, how much of its input each node
holds, as a ``Weight`` (bytes first, then producers).  The bytes come from the
producers once they finished (``subpartition_bytes``): per subpartition exactly while
the tracker keeps what the producer handed over (the sizes of its buffers, the usual
case for a blocking edge), else its report's bytes for the edge split evenly over the
subpartitions (a hybrid partition that was polled, or spilled: ``WriteMetrics`` has no
per-subpartition figures).  A producer still running (a hybrid input) has no report
yet: it counts as one producer on its node with no bytes, which only decides between
nodes the known bytes leave tied.  Pipelined inputs are produced in the consumer's own
region, placed together with it, so they do not count, nor do a cache's partitions
(they are not this job's).

Plain Python: node ids and byte counts come in as plain data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hybrid_shuffle.plan.graph import JobEdge, JobGraph
from hybrid_shuffle.plan.regions import TaskKey
from hybrid_shuffle.runtime.deployment import producers_of, subpartitions_of
from hybrid_shuffle.shuffle.api import HandedOver
from hybrid_shuffle.shuffle.routing import PartitionerKind

__all__ = ["Holder", "Weight", "input_weights", "subpartition_bytes"]


@dataclass(frozen=True, order=True)
class Weight:
    """How much of a task's input one node holds; compared as (bytes, producers)."""

    bytes: int = 0
    #: producers whose partitions live there (a running one's bytes are not known yet)
    producers: int = 0

    def __add__(self, other: Weight) -> Weight:
        return Weight(self.bytes + other.bytes, self.producers + other.producers)


@dataclass(frozen=True)
class Holder:
    """Where a deployed producer task's partitions live and, once it finished, how big
    they are."""

    node: str
    #: output edge -> bytes per subpartition; empty while the producer runs
    sizes: Mapping[str, Sequence[int]] = field(default_factory=dict)


def subpartition_bytes(total: int, count: int, handed: HandedOver | None = None) -> list[int]:
    """Bytes per subpartition of a finished partition of ``total`` bytes in ``count``
    subpartitions: the handed-over buffers' sizes when there are, else an even split."""
    if handed is not None:
        return [sum(buffer.nbytes for buffer in sub) for sub in handed.buffers]
    share, rest = divmod(total, max(count, 1))
    return [share + (1 if i < rest else 0) for i in range(count)]


def input_weights(
    graph: JobGraph, task: TaskKey, holders: Mapping[TaskKey, Holder]
) -> dict[str, Weight]:
    """Node -> how much of ``task``'s input it holds, over the producers in ``holders``
    (those deployed: the scheduler forgets a producer that restarts)."""
    vid, consumer = task
    vertex = graph.vertices[vid]
    weights: dict[str, Weight] = {}
    for edge in vertex.inputs:
        if edge.partition_type.must_be_pipelined():
            continue
        for producer in producers_of(graph, edge, consumer):
            holder = holders.get(producer)
            if holder is None:
                continue
            read = _bytes_read(edge, consumer, vertex.parallelism, holder.sizes.get(edge.name))
            weights[holder.node] = weights.get(holder.node, Weight()) + Weight(read, 1)
    return weights


def _bytes_read(edge: JobEdge, consumer: int, consumers: int, sizes: Sequence[int] | None) -> int:
    """What consumer ``consumer`` of ``consumers`` reads of one producer's partition
    (as ``Deployer.gate`` makes its channels)."""
    if not sizes:
        return 0
    if edge.partitioner.shares_one_subpartition():
        if edge.partitioner.kind is PartitionerKind.BROADCAST:
            return sizes[0]
        return sizes[0] // max(consumers, 1)  # range: each reads its slice of one stream
    if edge.partitioner.is_all_to_all():
        return sum(sizes[s] for s in subpartitions_of(consumer, consumers, len(sizes)))
    return sizes[0]
