"""Per-vertex metrics summed from task reports (no Ray)."""

from __future__ import annotations

from hybrid_shuffle.operators.context import OperatorMetrics
from hybrid_shuffle.result import vertex_metrics
from hybrid_shuffle.runtime.task import TaskReport


def report(subtask: int, start: float, end: float, spilled: int, peak: int) -> TaskReport:
    return TaskReport(
        f"agg[{subtask}]",
        "agg",
        subtask,
        started_at=start,
        finished_at=end,
        cpu_seconds=0.5,
        rows_in=10,
        rows_out=2,
        operators=[OperatorMetrics(memory=64, spilled_bytes=spilled, peak_memory_bytes=peak)],
    )


def test_a_vertex_sums_its_subtasks_and_spans_first_start_to_last_end() -> None:
    reports = [report(1, 105.0, 107.0, 0, 40), report(0, 100.0, 103.0, 300, 60)]
    got = vertex_metrics(reports, ["source", "agg"])
    assert list(got) == ["source", "agg"]  # the plan's order, idle vertices too
    agg = got["agg"]
    assert (agg.subtasks, agg.rows_in, agg.rows_out, agg.cpu_seconds) == (2, 20, 4, 1.0)
    assert agg.wall_seconds == 7.0
    assert (agg.spilled_bytes, agg.peak_memory_bytes, agg.memory) == (300, 60, 64)
    assert got["source"].subtasks == 0
