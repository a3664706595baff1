"""The timeline's layout over plain task reports: spans, sub-lanes, region starts, the
Chrome trace's events, the chart's file, and the suffix check."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib.image
import pytest

from hybrid_shuffle.errors import ConfigError, HybridShuffleError
from hybrid_shuffle.operators.context import OperatorMetrics
from hybrid_shuffle.runtime.task import TaskReport
from hybrid_shuffle.shuffle.metrics import WriteMetrics
from hybrid_shuffle.timeline import (
    DPI,
    assign_lanes,
    check_timeline_path,
    chrome_trace,
    figure_inches,
    region_starts,
    task_spans,
    write_timeline,
)

T0 = 1_700_000_000.0


def report(
    vertex: str,
    subtask: int,
    executor: int,
    start: float,
    end: float,
    *,
    blocked: float = 0.0,
    spilled: int = 0,
    operator_spilled: int = 0,
) -> TaskReport:
    r = TaskReport(f"{vertex}[{subtask}]", vertex, subtask, executor_index=executor)
    r.started_at, r.finished_at = T0 + start, T0 + end
    r.rows_in, r.rows_out = 100, 50
    r.writes = [
        WriteMetrics(
            edge=f"{vertex}.out",
            subtask=subtask,
            rows=50,
            bytes=1000,
            spilled_bytes=spilled,
            blocked_seconds=blocked,
        )
    ]
    r.operators = [OperatorMetrics(spilled_bytes=operator_spilled)]
    return r


def reports() -> list[TaskReport]:
    """A pipelined region R0 (source and join together on two executors), then R1."""
    return [
        report("source", 0, 0, 0.0, 2.0, blocked=0.5),
        report("source", 1, 1, 0.1, 2.5, blocked=9.0),  # more than it ran: clipped
        report("join", 0, 0, 0.2, 3.0, spilled=10),
        report("join", 1, 1, 0.3, 3.1, operator_spilled=20),
        report("sort", 0, 0, 3.5, 4.0),
    ]


REGIONS = {"source": "R0", "join": "R0", "sort": "R1"}


def test_spans_are_relative_to_the_first_start_and_sum_the_metrics() -> None:
    spans = {s.name: s for s in task_spans(reports(), REGIONS)}
    assert spans["source[0]"].start == 0.0 and spans["source[0]"].end == 2.0
    assert spans["source[0]"].blocked_seconds == 0.5
    assert spans["source[1]"].blocked_seconds == pytest.approx(2.4)  # at most its duration
    assert spans["join[0]"].spilled_bytes == 10
    assert spans["join[1]"].spilled_bytes == 20  # an operator's spill counts too
    assert spans["sort[0]"].region == "R1" and spans["sort[0]"].bytes == 1000


def test_tasks_that_never_started_are_left_out() -> None:
    never = TaskReport("x[0]", "x", 0)
    assert [s.name for s in task_spans([*reports(), never])] == [
        "source[0]",
        "source[1]",
        "join[0]",
        "join[1]",
        "sort[0]",
    ]
    assert task_spans([never]) == []


def test_concurrent_tasks_of_one_executor_get_their_own_lanes() -> None:
    spans = task_spans(reports(), REGIONS)
    lanes, counts = assign_lanes(spans)
    by_name = dict(zip((s.name for s in spans), lanes, strict=True))
    assert counts == {0: 2, 1: 2}
    assert by_name["source[0]"] != by_name["join[0]"]
    assert by_name["sort[0]"] == 0  # the lanes are free again after the region


def test_region_starts_at_its_first_task() -> None:
    assert region_starts(task_spans(reports(), REGIONS)) == {"R0": 0.0, "R1": 3.5}


def test_chrome_trace_has_one_complete_event_per_task() -> None:
    trace = json.loads(json.dumps(chrome_trace(task_spans(reports(), REGIONS))))
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert sorted(e["name"] for e in complete) == sorted(r.name for r in reports())
    join = next(e for e in complete if e["name"] == "join[0]")
    assert (join["pid"], join["ts"], join["dur"]) == (0, 200_000, 2_800_000)
    assert join["args"]["spilled_bytes"] == 10 and join["args"]["region"] == "R0"
    assert {e["pid"] for e in complete} == {0, 1}
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert names == {"executor 0", "executor 1"}
    starts = [e["name"] for e in trace["traceEvents"] if e["ph"] == "i"]
    assert starts == ["region R0 starts", "region R1 starts"]


def test_the_chart_is_a_png_of_the_documented_size(tmp_path: Path) -> None:
    path = write_timeline(reports(), tmp_path / "t.png", REGIONS, ["source", "join", "sort"])
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = figure_inches(2, 3)
    assert matplotlib.image.imread(path).shape[:2] == (round(height * DPI), round(width * DPI))


def test_unknown_suffix_is_one_sentence_naming_the_two(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"'.*t\.svg' is neither a \.png nor a \.json path"):
        write_timeline(reports(), tmp_path / "t.svg")
    assert list(tmp_path.iterdir()) == []
    assert check_timeline_path("T.PNG").name == "T.PNG"


def test_without_matplotlib_a_png_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # what an uninstalled one does
    with pytest.raises(HybridShuffleError, match=r"pip install 'hybrid-shuffle\[timeline\]'"):
        write_timeline(reports(), tmp_path / "t.png")
    assert json.loads(write_timeline(reports(), tmp_path / "t.json").read_text())
