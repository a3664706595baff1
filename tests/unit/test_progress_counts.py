"""Progress: the counting per vertex over plain reports, the scheduler's calls (fake
transport, no Ray), and the bars' bounds (a broken or stuck terminal)."""

from __future__ import annotations

import io
import threading
import time

import pytest

from hybrid_shuffle.config import Config, FailoverConfig, load_config
from hybrid_shuffle.errors import ConfigError
from hybrid_shuffle.operators.context import OperatorMetrics
from hybrid_shuffle.plan.planner import Plan, plan_job
from hybrid_shuffle.progress import ProgressBars
from hybrid_shuffle.runtime.partition_tracker import PartitionTracker
from hybrid_shuffle.runtime.progress import (
    JobProgress,
    NoProgress,
    ProgressCounts,
    VertexProgress,
    guarded,
)
from hybrid_shuffle.runtime.scheduler import Scheduler
from hybrid_shuffle.runtime.task import TaskReport, TaskState
from hybrid_shuffle.shuffle.metrics import WriteMetrics

from .builders import Builder
from .fakes import FakePool, FakeTransport, RecordingMaster


def two_stage_plan(mode: str = "blocking", partitions: int | str | None = None) -> Plan:
    b = Builder()
    sink = b.agg(b.map(b.source("orders", 4), "clean"), "totals", "by_customer", mode, partitions)
    return plan_job("job", sink, load_config({"parallelism": 4}), slots=4)


def report(vertex: str, subtask: int, rows: int, attempt: int = 0) -> TaskReport:
    r = TaskReport(f"{vertex}[{subtask}]", vertex, subtask, attempt=attempt)
    r.state = TaskState.FINISHED
    r.rows_out = rows
    r.writes = [WriteMetrics(edge="e", subtask=subtask, bytes=10 * rows, spilled_bytes=rows)]
    r.operators = [OperatorMetrics(spilled_bytes=1)]
    return r


def by_name(counts: ProgressCounts) -> dict[str, VertexProgress]:
    return {v.name: v for v in counts.snapshot()}


def test_counts_sum_each_vertexs_successful_subtasks_in_plan_order() -> None:
    counts = ProgressCounts()
    counts.started(two_stage_plan())
    counts.task_finished(report("orders->clean", 0, 5))
    counts.task_finished(report("orders->clean", 1, 7))
    assert [v.name for v in counts.snapshot()] == ["orders->clean", "totals"]
    assert by_name(counts)["orders->clean"] == VertexProgress("orders->clean", 4, 2, 12, 120, 14)
    assert by_name(counts)["totals"] == VertexProgress("totals", 4)


def test_a_restarted_task_is_counted_once_with_its_last_successful_attempt() -> None:
    counts = ProgressCounts()
    counts.started(two_stage_plan())
    counts.task_finished(report("orders->clean", 0, 5))
    counts.task_restarted("orders->clean", 0)
    assert by_name(counts)["orders->clean"].done == 0  # taken back until it succeeds again
    counts.task_finished(report("orders->clean", 0, 6, attempt=1))
    counts.task_finished(report("orders->clean", 0, 6, attempt=1))  # a repeated report
    v = by_name(counts)["orders->clean"]
    assert (v.done, v.rows) == (1, 6)


def test_an_adaptive_vertex_has_no_total_until_it_is_decided() -> None:
    counts = ProgressCounts()
    counts.started(two_stage_plan(partitions="auto"))
    assert by_name(counts)["totals"].subtasks is None
    counts.parallelism_decided("totals", 2)
    assert by_name(counts)["totals"].subtasks == 2


def test_a_new_start_begins_the_counts_again_and_the_end_is_recorded() -> None:
    counts = ProgressCounts()
    counts.started(two_stage_plan())
    counts.task_finished(report("totals", 0, 1))
    counts.started(two_stage_plan())
    assert by_name(counts)["totals"].done == 0
    error = ValueError("boom")
    counts.failed(error)
    assert (counts.state, counts.error) == ("failed", error)


def run_scheduler(plan: Plan, transport: FakeTransport, progress: JobProgress) -> Scheduler:
    scheduler = Scheduler(
        plan,
        "job-1",
        PartitionTracker(RecordingMaster()),
        FakePool(list(range(4))),
        transport,
        1 << 20,
        5.0,
        FailoverConfig(max_attempts=3, backoff=0.0),
        progress=progress,
    )
    scheduler.run()
    return scheduler


def test_the_scheduler_counts_each_task_once_though_failover_ran_its_region_again() -> None:
    # a pipelined consumer that fails once restarts its finished producers as well
    transport = FakeTransport(
        lambda name, attempt: (
            TaskState.FAILED if (name, attempt) == ("totals[2]", 0) else TaskState.FINISHED
        )
    )
    counts = ProgressCounts()
    scheduler = run_scheduler(two_stage_plan("pipelined"), transport, counts)
    assert scheduler.restarts == 1
    assert len(transport.submitted) > 8  # some tasks ran twice
    assert [(v.name, v.done, v.subtasks) for v in counts.snapshot()] == [
        ("orders->clean", 4, 4),
        ("totals", 4, 4),
    ]


def test_the_scheduler_tells_the_decided_count_of_an_adaptive_vertex() -> None:
    counts = ProgressCounts()
    run_scheduler(two_stage_plan(partitions="auto"), FakeTransport(), counts)
    totals = by_name(counts)["totals"]
    assert totals.subtasks == totals.done == Config().adaptive.min_partitions


class Broken(NoProgress):
    calls = 0

    def task_finished(self, report: TaskReport) -> None:
        Broken.calls += 1
        raise OSError("terminal gone")


def test_an_observer_that_raises_is_turned_off_and_the_job_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    Broken.calls = 0
    scheduler = run_scheduler(two_stage_plan(), FakeTransport(), guarded(Broken()))
    assert len(scheduler.reports) == 8
    assert Broken.calls == 1
    assert "progress display turned off" in caplog.text


def test_bars_show_each_vertex_done_out_of_its_total_and_close_at_the_end() -> None:
    out = io.StringIO()
    bars = ProgressBars(file=out)
    run_scheduler(two_stage_plan(), FakeTransport(), bars)
    bars.finished()
    text = out.getvalue()
    assert "orders->clean: 4/4" in text and "totals       : 4/4" in text
    assert bars.open_bars == 0 and not bars.disabled


def test_a_failed_run_closes_its_bars_and_marks_the_unfinished_vertices() -> None:
    out = io.StringIO()
    bars = ProgressBars(file=out)
    bars.started(two_stage_plan())
    bars.task_finished(report("orders->clean", 0, 3))
    bars.failed(ValueError("boom"))
    assert bars.open_bars == 0
    assert "orders->clean: 1/4" in out.getvalue() and "failed" in out.getvalue()


def test_an_undecided_total_shows_as_a_question_mark() -> None:
    out = io.StringIO()
    bars = ProgressBars(file=out)
    bars.started(two_stage_plan(partitions="auto"))
    bars.finished()
    assert "totals       : 0/? |" in out.getvalue()


class _Stuck(io.StringIO):
    """A terminal that takes no output until released (a full pipe)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def write(self, s: str) -> int:
        self.release.wait(30)
        return super().write(s)


def test_a_terminal_that_blocks_delays_the_end_by_the_close_timeout_at_most() -> None:
    out = _Stuck()
    bars = ProgressBars(file=out, close_timeout=0.5)
    try:
        bars.started(two_stage_plan())
        bars.task_finished(report("totals", 0, 1))  # never blocks: only counts
        began = time.monotonic()
        bars.finished()
        assert time.monotonic() - began < 10  # bounded (0.5 s), generously
        assert bars.disabled
    finally:
        out.release.set()


class _Closed(io.StringIO):
    def write(self, s: str) -> int:
        raise OSError("Broken pipe")


def test_a_terminal_that_raises_turns_the_bars_off(caplog: pytest.LogCaptureFixture) -> None:
    bars = ProgressBars(file=_Closed())
    bars.started(two_stage_plan())
    bars.finished()
    assert bars.disabled and bars.open_bars == 0
    assert "progress display turned off" in caplog.text


def test_progress_must_be_a_bool_or_an_observer() -> None:
    from hybrid_shuffle.api.job import _observer

    assert isinstance(_observer(False), NoProgress)
    with pytest.raises(ConfigError, match="progress must be True, False or a JobProgress"):
        _observer("yes")  # type: ignore[arg-type]
