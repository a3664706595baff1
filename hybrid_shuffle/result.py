"""What a finished job hands back: the data and per-edge metrics."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd
import pyarrow as pa

from hybrid_shuffle.runtime.task import TaskReport

__all__ = ["EdgeMetrics", "JobResult"]


@dataclass
class EdgeMetrics:
    """One edge, summed over its producer and consumer subtasks."""

    name: str
    mode: str
    partitioner: str
    rows: int = 0
    bytes: int = 0
    buffers: int = 0
    spilled_bytes: int = 0
    persisted_bytes: int = 0
    #: most bytes one producer's partition held in memory at once
    peak_memory_bytes: int = 0
    #: most buffers of one subpartition written and not yet consumed
    peak_backlog_buffers: int = 0
    blocked_seconds: float = 0.0
    #: producer subtask -> when it finished writing (epoch seconds)
    producer_finished_at: dict[int, float] = field(default_factory=dict)
    #: consumer subtask -> producer subtask -> first buffer received from it
    first_buffer_at: dict[int, dict[int, float]] = field(default_factory=dict)

    def consumed_before_produced(self) -> bool:
        """Some consumer received a buffer from a producer that had not finished yet."""
        return any(
            t < self.producer_finished_at.get(p, float("inf"))
            for per_producer in self.first_buffer_at.values()
            for p, t in per_producer.items()
        )


@dataclass
class JobResult:
    table: pa.Table
    edges: dict[str, EdgeMetrics]
    tasks: list[TaskReport]
    wall_seconds: float
    explain: str
    #: of ``wall_seconds``, the time spent fetching lazy sources (Spark -> Arrow)
    sources_seconds: float = 0.0

    @property
    def spilled_bytes(self) -> int:
        return sum(e.spilled_bytes for e in self.edges.values())

    def to_pandas(self) -> pd.DataFrame:
        return self.table.to_pandas()

    def edge_summary(self) -> str:
        """One line per edge: mode, rows, bytes and spilled bytes."""
        return "\n".join(
            f"  edge {e.name:<20} {e.mode:<17} {e.rows:>11,} rows {e.bytes / 2**20:8.1f} MiB, "
            f"spilled {e.spilled_bytes / 2**20:.1f} MiB"
            for e in self.edges.values()
        )


def edge_metrics(
    reports: Sequence[TaskReport], modes: dict[str, tuple[str, str]]
) -> dict[str, EdgeMetrics]:
    """Sum task reports per edge; ``modes`` maps edge name -> (mode, partitioner)."""
    edges = {name: EdgeMetrics(name, mode, part) for name, (mode, part) in modes.items()}
    for report in reports:
        for w in report.writes:
            e = edges.get(w.edge)
            if e is None:
                continue
            e.rows += w.rows
            e.bytes += w.bytes
            e.buffers += w.buffers
            e.spilled_bytes += w.spilled_bytes
            e.persisted_bytes += w.persisted_bytes
            e.peak_memory_bytes = max(e.peak_memory_bytes, w.peak_memory_bytes)
            e.peak_backlog_buffers = max(e.peak_backlog_buffers, w.peak_backlog_buffers)
            e.blocked_seconds += w.blocked_seconds
            e.producer_finished_at[w.subtask] = w.finished_at
        for r in report.reads:
            e = edges.get(r.edge)
            if e is not None:
                e.first_buffer_at[r.subtask] = dict(r.first_buffer_from)
    return edges
