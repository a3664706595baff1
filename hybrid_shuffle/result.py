"""What a finished job hands back: the data and per-edge metrics."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd
import pyarrow as pa

from hybrid_shuffle.runtime.task import TaskReport
from hybrid_shuffle.shuffle.metrics import PartitionVolume

__all__ = ["EdgeMetrics", "JobResult"]


@dataclass
class EdgeMetrics(PartitionVolume):
    """One edge, summed over its producer subtasks (``PartitionVolume``'s fields), with
    the timeline of its producers and consumers."""

    name: str
    mode: str
    partitioner: str
    #: the consumer subtasks that ran (for ``partitions: auto``, what was decided)
    partitions: int = 0
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
    #: how many times the job restarted failed regions (0: nothing failed); each task's
    #: ``TaskReport.attempt`` says which attempt produced its part of the result
    restarts: int = 0

    @property
    def spilled_bytes(self) -> int:
        return sum(e.spilled_bytes for e in self.edges.values())

    def to_pandas(self) -> pd.DataFrame:
        return self.table.to_pandas()

    def edge_summary(self) -> str:
        """One line per edge: mode, rows, bytes and spilled bytes."""
        return "\n".join(
            f"  edge {e.name:<20} {e.mode:<17} {e.rows:>11,} rows {e.bytes / 2**20:8.1f} MiB, "
            f"{e.partitions} partitions, spilled {e.spilled_bytes / 2**20:.1f} MiB"
            for e in self.edges.values()
        )


def edge_metrics(
    reports: Sequence[TaskReport], modes: dict[str, tuple[str, str, int]]
) -> dict[str, EdgeMetrics]:
    """Sum task reports per edge; ``modes`` maps edge name -> (mode, partitioner,
    consumer subtasks)."""
    edges = {
        name: EdgeMetrics(name, mode, part, partitions=n) for name, (mode, part, n) in modes.items()
    }
    for report in reports:
        for w in report.writes:
            e = edges.get(w.edge)
            if e is None:
                continue
            e.add(w)
            e.producer_finished_at[w.subtask] = w.finished_at
        for r in report.reads:
            e = edges.get(r.edge)
            if e is not None:
                e.first_buffer_at[r.subtask] = dict(r.first_buffer_from)
    return edges
