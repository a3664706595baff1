"""Exchange modes decomposed into independent properties.

Flink's ``ResultPartitionType`` is the model: callers ask a property
(``can_be_pipelined``, ``is_reconsumable``, ...) and never compare against one
enum value, so a new mode is a new combination of properties rather than a new
branch in every caller.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass

__all__ = [
    "BLOCKING_PERSISTENT",
    "MODES",
    "ConsumingConstraint",
    "Mode",
    "ReleasedBy",
    "ResultPartitionType",
    "partition_type",
]


class Mode(enum.StrEnum):
    """The exchange modes a user names in YAML or code (a ``str``: compares and formats
    as its name)."""

    PIPELINED = "pipelined"
    BLOCKING = "blocking"
    HYBRID_SELECTIVE = "hybrid-selective"
    HYBRID_FULL = "hybrid-full"


class ConsumingConstraint(enum.Enum):
    """When a consumer may start relative to its producer."""

    MUST_BE_PIPELINED = "must-be-pipelined"  # producer and consumer run at the same time
    CAN_BE_PIPELINED = "can-be-pipelined"  # consumer may start any time (hybrid)
    BLOCKING = "blocking"  # consumer starts after the producer region finished


class ReleasedBy(enum.Enum):
    """Who frees a buffer once it has been read."""

    CONSUMER = "consumer"  # freed as soon as every reader of it has consumed it
    SCHEDULER = "scheduler"  # kept until the scheduler releases it (its readers finished)


@dataclass(frozen=True)
class ResultPartitionType:
    """The properties of one exchange mode.

    ``bounded``: the producer holds at most ``credits`` unconsumed buffers per
    subpartition and waits for credit beyond that (backpressure).
    ``spills``: buffers beyond the memory budget go to disk instead of waiting.
    ``persist_all``: every buffer is also written to disk, so the partition stays
    re-readable after its in-memory copies were consumed.
    ``persistent``: the partition outlives its job (FLIP-205's BLOCKING_PERSISTENT, a
    cache): the job's end does not release it, only ``invalidate()`` or the session's
    close does.
    """

    mode: Mode
    consuming: ConsumingConstraint
    released_by: ReleasedBy
    reconsumable: bool
    bounded: bool
    spills: bool
    persist_all: bool
    persistent: bool = False

    def can_be_pipelined(self) -> bool:
        return self.consuming is not ConsumingConstraint.BLOCKING

    def must_be_pipelined(self) -> bool:
        return self.consuming is ConsumingConstraint.MUST_BE_PIPELINED

    def is_blocking(self) -> bool:
        return self.consuming is ConsumingConstraint.BLOCKING

    def releases_on_consumption(self) -> bool:
        return self.released_by is ReleasedBy.CONSUMER


_TYPES: dict[str, ResultPartitionType] = {
    t.mode: t
    for t in (
        ResultPartitionType(
            Mode.PIPELINED,
            ConsumingConstraint.MUST_BE_PIPELINED,
            ReleasedBy.CONSUMER,
            reconsumable=False,
            bounded=True,
            spills=False,
            persist_all=False,
        ),
        ResultPartitionType(
            Mode.BLOCKING,
            ConsumingConstraint.BLOCKING,
            ReleasedBy.SCHEDULER,
            reconsumable=True,
            bounded=False,
            spills=True,
            persist_all=False,
        ),
        ResultPartitionType(
            Mode.HYBRID_SELECTIVE,
            ConsumingConstraint.CAN_BE_PIPELINED,
            ReleasedBy.CONSUMER,
            reconsumable=False,
            bounded=False,
            spills=True,
            persist_all=False,
        ),
        ResultPartitionType(
            Mode.HYBRID_FULL,
            ConsumingConstraint.CAN_BE_PIPELINED,
            ReleasedBy.SCHEDULER,
            reconsumable=True,
            bounded=False,
            spills=True,
            persist_all=True,
        ),
    )
}

MODES: tuple[str, ...] = tuple(m.value for m in Mode)

#: a cache's partitions (``Stream.cache``): blocking, and kept after the job that wrote
#: them ended.  Not a mode a user names for an edge: ``mode`` is ``blocking``.
BLOCKING_PERSISTENT = dataclasses.replace(_TYPES[Mode.BLOCKING], persistent=True)


def partition_type(mode: str) -> ResultPartitionType:
    """The properties of ``mode``; raises ``KeyError`` for an unknown mode name."""
    return _TYPES[mode]
