"""What a finished job hands back: the data, per-edge and per-vertex metrics."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa

from hybrid_shuffle._words import plural
from hybrid_shuffle.operators.context import task_memory, task_peak_memory
from hybrid_shuffle.plan.join_switch import AdaptiveChange
from hybrid_shuffle.runtime.task import TaskReport
from hybrid_shuffle.shuffle.metrics import PartitionVolume

if TYPE_CHECKING:
    from hybrid_shuffle.query_profile import QueryProfile, RunTimes

__all__ = ["EdgeMetrics", "JobResult", "VertexMetrics"]


@dataclass
class EdgeMetrics(PartitionVolume):
    """One edge, summed over its producer subtasks (``PartitionVolume``'s fields), with
    the timeline of its producers and consumers."""

    name: str
    mode: str
    partitioner: str
    #: the consumer subtasks that ran (for ``partitions: auto``, what was decided)
    partitions: int = 0
    #: where ``mode`` came from: ``code``, ``yaml``, ``default``, ``output-on-eof``,
    #: ``auto``, or the ``edge_rules:`` entry that set it (``edge_rules[1]``;
    #: ``hybrid_shuffle.plan.graph.ModeOrigin``)
    mode_origin: str = "default"
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
class VertexMetrics:
    """One vertex (an operator chain), over the subtasks' final attempts.

    Memory figures are the stateful operators' own account of the Arrow data they
    held (``hybrid_shuffle.operators.context``), per subtask: ``peak_memory_bytes``
    is the largest subtask's (its operators' peaks added), ``memory`` what each
    subtask was given (``operators.memory``; 0 for a chain with no stateful
    operator)."""

    name: str
    subtasks: int = 0
    rows_in: int = 0
    rows_out: int = 0
    #: from the first subtask's start to the last one's end
    wall_seconds: float = 0.0
    #: summed over subtasks: the tasks' threads and their streamed DuckDB queries'
    cpu_seconds: float = 0.0
    spilled_bytes: int = 0
    peak_memory_bytes: int = 0
    memory: int = 0
    #: a sink's (``write_parquet``): rows and files written, summed over subtasks
    rows_written: int = 0
    files_written: int = 0
    #: summed over subtasks: the executor processes' CPU over them, DuckDB's and the
    #: Parquet readers' threads included (``TaskReport.process_cpu_seconds``)
    process_cpu_seconds: float = 0.0


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
    #: vertex name -> what its subtasks did (rows, time, operator memory and spills)
    vertices: dict[str, VertexMetrics] = field(default_factory=dict)
    #: cache name -> what this run did with it: ``read`` (a hit: the cache was used
    #: instead of its lineage), ``filled`` (computed and kept, the first time) or
    #: ``recomputed`` (filled again after ``invalidate()`` or a lost partition)
    caches: dict[str, str] = field(default_factory=dict)
    #: vertex name -> its pipelined region as ``explain`` labels it (``R0``, ``R1``...)
    regions: dict[str, str] = field(default_factory=dict)
    #: ``Stream.to_ray_data``: the result's buffers as ObjectRefs, left in the object
    #: store (``table`` is then empty); None for every other run
    blocks: list[Any] | None = None
    #: second attempts of slow subtasks launched (``failover.speculation``; 0 when off);
    #: a task whose copy won has ``TaskReport.speculative`` set
    speculative_attempts: int = 0
    #: what was decided at run time (``adaptive.broadcast_bytes`` and
    #: ``broadcast_max_bytes``): one ``AdaptiveChange`` per translated shuffled join that
    #: could switch, in the order decided: its vertex and Spark join, the build and probe
    #: edges, the bytes the build side wrote, the threshold and the join's limit, and
    #: whether it became a broadcast join (``switched``)
    adaptive: list[AdaptiveChange] = field(default_factory=list)
    #: the run's time points outside its tasks, for ``profile()`` (None: a result made
    #: by hand)
    times: RunTimes | None = None

    def profile(self) -> QueryProfile:
        """Where the run's time went, as data (``hybrid_shuffle.query_profile``): the
        phases outside the tasks (Spark's planning and the translation for a job from
        Spark, the engine's planning, sources, deployment, the tasks, the hand-back),
        then per vertex wall, CPU (DuckDB's and the readers' threads included), rows,
        spills, peak memory and critical-path share, and per edge mode, rows, bytes,
        spills and partitions.  ``str()`` of it is what ``hybrid-shuffle sql
        --analyze`` prints; ``.to_dict()`` is plain data."""
        from hybrid_shuffle.query_profile import build_profile

        return build_profile(self)

    @property
    def spilled_bytes(self) -> int:
        """Bytes spilled by the exchanges (partitions over ``shuffle.memory_budget``);
        operators' spills are in ``vertices``."""
        return sum(e.spilled_bytes for e in self.edges.values())

    def vertex_summary(self) -> str:
        """One line per vertex: rows, time, and its operators' memory and spills."""
        lines = []
        for v in self.vertices.values():
            memory = (
                f", memory {v.memory / 2**20:.0f} MiB, peak {v.peak_memory_bytes / 2**20:.1f} "
                f"MiB, spilled {v.spilled_bytes / 2**20:.1f} MiB"
                if v.memory
                else ""
            )
            lines.append(
                f"  vertex {v.name:<24} {v.rows_in:>11,} {plural(v.rows_in, 'row'):<4} in "
                f"{v.rows_out:>11,} out "
                f"{v.wall_seconds:6.2f} s wall {v.cpu_seconds:6.2f} s CPU{memory}"
            )
        return "\n".join(lines)

    def timeline(self, path: str | Path) -> Path:
        """Write where the job's time went to ``path`` and return it: for ``.png`` a
        chart (needs matplotlib: the ``timeline`` extra), one lane per executor and a
        bar per task coloured by vertex, with backpressure, spills and region starts
        marked; for ``.json`` a Chrome trace to open in Perfetto.  Any other suffix is
        a ``ConfigError``.  See ``hybrid_shuffle.timeline`` for what is drawn how."""
        from hybrid_shuffle.timeline import write_timeline

        return write_timeline(self.tasks, path, self.regions, list(self.vertices))

    def to_pandas(self) -> pd.DataFrame:
        return self.table.to_pandas()

    def edge_summary(self) -> str:
        """One line per edge: mode, rows, bytes and spilled bytes."""
        return "\n".join(
            f"  edge {e.name:<20} {e.mode:<17} {e.rows:>11,} {plural(e.rows, 'row'):<4} "
            f"{e.bytes / 2**20:8.1f} MiB, {e.partitions} {plural(e.partitions, 'partition')}, "
            f"spilled {e.spilled_bytes / 2**20:.1f} MiB"
            for e in self.edges.values()
        )


def edge_metrics(
    reports: Sequence[TaskReport], modes: dict[str, tuple[str, str, int, str]]
) -> dict[str, EdgeMetrics]:
    """Sum task reports per edge; ``modes`` maps edge name -> (mode, partitioner,
    consumer subtasks, mode origin)."""
    edges = {
        name: EdgeMetrics(name, mode, part, partitions=n, mode_origin=origin)
        for name, (mode, part, n, origin) in modes.items()
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


def vertex_metrics(reports: Sequence[TaskReport], order: Sequence[str]) -> dict[str, VertexMetrics]:
    """Per vertex (in ``order``, the plan's), the reports of its subtasks summed."""
    vertices = {name: VertexMetrics(name) for name in order}
    spans: dict[str, tuple[float, float]] = {}
    for r in reports:
        v = vertices.setdefault(r.vertex, VertexMetrics(r.vertex))
        v.subtasks += 1
        v.rows_in += r.rows_in
        v.rows_out += r.rows_out
        v.cpu_seconds += r.cpu_seconds
        v.process_cpu_seconds += r.process_cpu_seconds
        v.spilled_bytes += sum(op.spilled_bytes for op in r.operators)
        v.rows_written += sum(op.rows_written for op in r.operators)
        v.files_written += sum(op.files_written for op in r.operators)
        v.peak_memory_bytes = max(v.peak_memory_bytes, task_peak_memory(r.operators))
        v.memory = max(v.memory, task_memory(r.operators))
        if r.started_at:
            first, last = spans.get(r.vertex, (r.started_at, r.finished_at))
            spans[r.vertex] = (min(first, r.started_at), max(last, r.finished_at))
    for name, (first, last) in spans.items():
        vertices[name].wall_seconds = max(last - first, 0.0)
    return vertices
