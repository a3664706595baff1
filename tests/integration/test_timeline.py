"""A real job's timeline: ``JobResult.timeline`` and ``hybrid-shuffle run --timeline``
write a PNG matplotlib reads back at the chart's size, or a Chrome trace with one
complete event per task on the executors that ran it; another suffix is one sentence."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import matplotlib.image
import pyarrow as pa
import pytest

import hybrid_shuffle as hs
from hybrid_shuffle.cli import main
from hybrid_shuffle.timeline import DPI, figure_inches

from .conftest import assert_closed_cleanly, assert_no_leaks
from .data import customers, orders

ROWS = 200_000
PNG = b"\x89PNG\r\n\x1a\n"
CONFIG = {
    "parallelism": 2,
    "shuffle": {"buffer_size": "256 KiB", "memory_budget": "64 MiB"},
    "operators": {"memory": "64 MiB"},
}

PIPELINE = """
import hybrid_shuffle as hs
import pyarrow as pa


def build(session: hs.Session) -> hs.Stream:
    table = pa.table({"key": [i % 7 for i in range(1000)], "value": list(range(1000))})
    job = session.job("cli-timeline")
    totals = job.from_arrow(table, name="numbers").key_by("key").aggregate({"value": ["sum"]})
    return totals.sort("key", name="ranked")
"""


@pytest.fixture(scope="module")
def session(local_ray: None) -> Iterator[hs.Session]:
    with hs.Session(CONFIG, slots=4) as s:
        yield s
    assert_closed_cleanly(s)


@pytest.fixture(scope="module")
def result(session: hs.Session) -> hs.JobResult:
    """Orders joined to customers (pipelined: one region), totals per segment (blocking:
    the next), sorted: three regions on up to four executors."""
    job = session.job("timeline")
    o = job.from_arrow(orders(ROWS), name="orders", parallelism=2)
    c = job.from_arrow(customers(), name="customers", parallelism=2)
    joined = o.join(c, on="customer", edge="by_cust", mode="pipelined", name="join")
    totals = joined.key_by("segment", edge="by_segment", mode="blocking").aggregate(
        {"cents": ["sum", "count"]}, name="totals"
    )
    done = totals.sort("segment", edge="to_sort", name="ranked").collect()
    assert_no_leaks(session)
    return done


def test_the_job_is_right_and_knows_its_regions(result: hs.JobResult) -> None:
    joined = orders(ROWS).join(customers(), keys="customer", join_type="inner")
    expected = (
        joined.group_by("segment")
        .aggregate([("cents", "sum"), ("cents", "count")])
        .sort_by("segment")
        .select(["segment", "cents_sum", "cents_count"])
    )
    got = result.table.select(["segment", "cents_sum", "cents_count"])
    assert got.equals(expected.cast(got.schema))
    assert result.regions["orders"] == result.regions["join"] == "R0"
    assert result.regions["totals"] != "R0"


def test_timeline_png_is_a_real_png_of_the_chart_size(result: hs.JobResult, tmp_path: Path) -> None:
    path = result.timeline(tmp_path / "job.png")
    assert path == tmp_path / "job.png"
    assert path.read_bytes()[:8] == PNG
    executors = len({t.executor_index for t in result.tasks})
    width, height = figure_inches(executors, len(result.vertices))
    assert matplotlib.image.imread(path).shape[:2] == (round(height * DPI), round(width * DPI))


def test_timeline_json_has_one_complete_event_per_task_on_its_executor(
    result: hs.JobResult, tmp_path: Path
) -> None:
    trace = json.loads(result.timeline(tmp_path / "job.json").read_text())
    complete = {e["name"]: e for e in trace["traceEvents"] if e["ph"] == "X"}
    assert len(complete) == len([e for e in trace["traceEvents"] if e["ph"] == "X"])
    assert set(complete) == {t.name for t in result.tasks}
    for task in result.tasks:
        event = complete[task.name]
        assert event["pid"] == task.executor_index
        assert event["args"]["vertex"] == task.vertex
        assert event["args"]["rows_out"] == task.rows_out
        assert event["args"]["region"] == result.regions[task.vertex]
        assert event["ts"] >= 0 and event["dur"] >= 1
        # the operators.memory in force, as explain() and VertexMetrics.memory show it
        stateful = task.vertex in ("join", "totals", "ranked")
        assert event["args"]["memory"] == (64 << 20 if stateful else 0)
        assert event["args"]["memory"] == result.vertices[task.vertex].memory
    starts = [e["name"] for e in trace["traceEvents"] if e["ph"] == "i"]
    assert starts[0] == "region R0 starts"
    assert len(starts) == len(set(result.regions.values()))


def test_timeline_with_another_suffix_is_one_sentence(result: hs.JobResult, tmp_path: Path) -> None:
    with pytest.raises(hs.ConfigError) as e:
        result.timeline(tmp_path / "job.svg")
    assert str(e.value).endswith(
        "is neither a .png nor a .json path; give a .png path for a chart or a .json path "
        "for a Chrome trace (to open in Perfetto)"
    )
    assert list(tmp_path.iterdir()) == []


def pipeline_files(tmp_path: Path) -> tuple[str, str]:
    pipeline, config = tmp_path / "pipeline.py", tmp_path / "job.yaml"
    pipeline.write_text(PIPELINE)
    config.write_text("parallelism: 2\nslots: 2\nshuffle: {memory_budget: 32 MiB}\n")
    return str(pipeline), str(config)


def test_cli_run_timeline_writes_a_png(
    session: hs.Session, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pipeline, config = pipeline_files(tmp_path)
    out = tmp_path / "out.png"
    assert main(["run", pipeline, "--config", config, "--timeline", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"timeline written to {out}" in printed
    assert out.read_bytes()[:8] == PNG
    height, width = matplotlib.image.imread(out).shape[:2]
    assert width == 10 * DPI and height > DPI


def test_cli_timeline_with_another_suffix_exits_2_before_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pipeline, config = pipeline_files(tmp_path)
    out = tmp_path / "out.svg"
    assert main(["run", pipeline, "--config", config, "--timeline", str(out)]) == 2
    assert "is neither a .png nor a .json path" in capsys.readouterr().err
    assert not out.exists()


def test_nothing_is_left_behind(session: hs.Session, result: hs.JobResult) -> None:
    assert isinstance(result.table, pa.Table)
    assert_no_leaks(session)


def test_profile_has_every_vertex_and_edge_with_consistent_numbers(result: hs.JobResult) -> None:
    p = result.profile()
    assert p.job == "timeline"
    assert [v.name for v in p.vertices] == list(result.vertices)
    assert [e.name for e in p.edges] == list(result.edges)
    for v in p.vertices:
        metrics = result.vertices[v.name]
        assert (v.subtasks, v.rows_in, v.rows_out) == (
            metrics.subtasks,
            metrics.rows_in,
            metrics.rows_out,
        )
        assert v.cpu_seconds > 0 and v.wall_seconds > 0
        assert v.region == result.regions[v.name]
    vertices = {v.name: v for v in p.vertices}
    for e in p.edges:
        assert e.rows == result.edges[e.name].rows and e.bytes == result.edges[e.name].bytes
        assert e.name in vertices[e.target].inputs and e.source in vertices
    for v in p.vertices:  # a vertex reads what its input edges carried
        if v.inputs:
            assert v.rows_in == sum(result.edges[e].rows for e in v.inputs)
    # no Spark: the run alone; the measured phases fit in it, and "other" is the rest
    assert p.total_seconds == result.wall_seconds
    assert [ph.name for ph in p.phases] == [
        "plan",
        "sources",
        "deploy",
        "tasks",
        "hand-back",
        "other",
    ]
    assert all(ph.seconds >= 0 for ph in p.phases)
    assert sum(ph.seconds for ph in p.phases if ph.name != "other") <= p.total_seconds + 1e-3
    assert p.critical_path[-1] == "ranked" and p.critical_path[0] in {"orders", "customers"}
    assert sum(v.critical_seconds for v in p.vertices) <= p.phase("tasks") + 1e-6
    assert "Critical path: " in p.render()
