"""What writers and gates measure, reported per task and summed per edge."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ReadMetrics", "WriteMetrics"]


@dataclass
class WriteMetrics:
    """One producer subtask's result partition."""

    edge: str
    subtask: int
    rows: int = 0
    bytes: int = 0
    buffers: int = 0
    #: bytes whose only copy went to disk because the memory budget was full
    spilled_bytes: int = 0
    #: bytes also written to disk so the partition stays re-readable (hybrid-full)
    persisted_bytes: int = 0
    #: most bytes this partition held in memory at once
    peak_memory_bytes: int = 0
    #: most buffers of one subpartition written but not yet consumed
    peak_backlog_buffers: int = 0
    #: time the producer spent waiting for credit (pipelined backpressure)
    blocked_seconds: float = 0.0
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
