"""What writers and gates measure, reported per task and summed per edge.

``PartitionVolume`` is the one definition of what a partition moved and held;
a producer's ``WriteMetrics`` and an edge's ``EdgeMetrics`` (``result``) both
extend it, and ``PartitionVolume.add`` is the one rule for summing them (counts
add up, peaks take the maximum).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

__all__ = ["PartitionVolume", "ReadMetrics", "WriteMetrics"]

#: fields of ``PartitionVolume`` summed by taking the maximum, not the sum
_PEAKS = frozenset({"peak_memory_bytes", "peak_backlog_buffers"})


@dataclass(kw_only=True)
class PartitionVolume:
    """What one or more result partitions moved and held."""

    rows: int = 0
    bytes: int = 0
    buffers: int = 0
    #: bytes whose only copy went to disk because the memory budget was full
    spilled_bytes: int = 0
    #: bytes also written to disk so the partition stays re-readable (hybrid-full)
    persisted_bytes: int = 0
    #: most bytes one partition held in memory at once
    peak_memory_bytes: int = 0
    #: most buffers of one subpartition written but not yet consumed
    peak_backlog_buffers: int = 0
    #: time producers spent waiting for credit (pipelined backpressure)
    blocked_seconds: float = 0.0

    def add(self, other: PartitionVolume) -> None:
        """Accumulate ``other`` into this one (peaks: the larger)."""
        for f in dataclasses.fields(PartitionVolume):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            setattr(self, f.name, max(mine, theirs) if f.name in _PEAKS else mine + theirs)


@dataclass
class WriteMetrics(PartitionVolume):
    """One producer subtask's result partition."""

    edge: str
    subtask: int
    started_at: float = 0.0
    finished_at: float = 0.0


@dataclass
class ReadMetrics:
    """One consumer subtask's reads of one input edge."""

    edge: str
    subtask: int
    rows: int = 0
    bytes: int = 0
    buffers: int = 0
    #: poll round trips made (0 when every producer handed its finished partition over)
    polls: int = 0
    #: when the first buffer arrived (epoch seconds); 0 if none did
    first_buffer_at: float = 0.0
    #: producer subtask -> when this consumer first received a buffer of it
    first_buffer_from: dict[int, float] = field(default_factory=dict)
    #: producer subtask -> when that producer finished, as the producer reported it
    producer_finished_at: dict[int, float] = field(default_factory=dict)
