"""How a producer's rows are routed to consumer subtasks: the partitioner of an edge.

A shuffle concept, so it lives with the shuffle service: the planner puts one on
every edge, the writer routes rows by it, and descriptors carry it to executors.
Plain, picklable data; the kernels that apply it are in ``shuffle.partitioner``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["Partitioner", "PartitionerKind"]


class PartitionerKind(enum.Enum):
    FORWARD = "forward"  # producer subtask i -> consumer subtask i
    HASH = "hash"
    RANGE = "range"
    ROUND_ROBIN = "round-robin"
    BROADCAST = "broadcast"


@dataclass(frozen=True)
class Partitioner:
    """How a producer's rows are routed to consumer subtasks."""

    kind: PartitionerKind
    keys: tuple[str, ...] = ()
    descending: bool = False
    #: consumers take their producers' rows one producer after the other, in subtask
    #: order, not as they arrive: a gather of rows sorted across the producer's subtasks
    #: (a range-partitioned sort's) keeps their order, as Spark's partitions do
    in_producer_order: bool = False

    def is_all_to_all(self) -> bool:
        """Every producer subtask feeds every consumer subtask."""
        return self.kind is not PartitionerKind.FORWARD

    def shares_one_subpartition(self) -> bool:
        """Every consumer reads the same stream (and filters it, for range).

        Broadcast needs every row everywhere; range partitioning decides each
        consumer's key interval only when every producer's sample is known, so
        the producer writes one stream and consumers read their slice of it.
        """
        return self.kind in (PartitionerKind.BROADCAST, PartitionerKind.RANGE)

    def describe(self) -> str:
        if self.kind is PartitionerKind.HASH:
            return f"hash({', '.join(self.keys)})"
        if self.kind is PartitionerKind.RANGE:
            order = " desc" if self.descending else ""
            return f"range({self.keys[0]}{order})"
        if self.in_producer_order:
            return f"{self.kind.value} (in producer order)"
        return str(self.kind.value)
