"""``JobResult.profile()`` on a hand-built result (no Ray): phases, critical path, the
text ``--analyze`` prints and the plain data."""

from __future__ import annotations

import json

import pyarrow as pa

from hybrid_shuffle.query_profile import RunTimes
from hybrid_shuffle.result import EdgeMetrics, JobResult, vertex_metrics
from hybrid_shuffle.runtime.task import TaskReport

T0 = 1_000.0  # epoch seconds the run started at


def task(vertex: str, subtask: int, start: float, end: float, rows: int) -> TaskReport:
    return TaskReport(
        f"{vertex}[{subtask}]",
        vertex,
        subtask,
        started_at=T0 + start,
        finished_at=T0 + end,
        cpu_seconds=0.1,
        process_cpu_seconds=0.25,
        rows_in=rows,
        rows_out=rows // 10,
    )


def result() -> JobResult:
    """Two scans (``big`` slow, ``small`` quick) joined by ``join``, then ``sink``:
    the tasks run from 0.2 s to 1.5 s of a 1.6 s run that Spark took 0.5 s to plan."""
    tasks = [
        task("big", 0, 0.2, 1.0, 1000),
        task("big", 1, 0.2, 0.9, 1000),
        task("small", 0, 0.2, 0.4, 50),
        task("join", 0, 1.05, 1.3, 200),
        task("sink", 0, 1.35, 1.5, 20),
    ]
    edges = {
        "by_key": EdgeMetrics("by_key", "blocking", "hash(k)", partitions=1),
        "small_side": EdgeMetrics("small_side", "blocking", "broadcast", partitions=1),
        "to_sink": EdgeMetrics("to_sink", "pipelined", "round-robin", partitions=1),
    }
    edges["by_key"].rows, edges["by_key"].bytes = 200, 4096
    edges["to_sink"].spilled_bytes = 3 << 20
    edges["to_sink"].blocked_seconds = 0.25
    times = RunTimes(
        job="q",
        started_at=T0,
        finished_at=T0 + 1.6,
        planning_seconds=0.05,
        sources_seconds=0.0,
        executed_at=T0 + 0.1,
        tasks_done_at=T0 + 1.55,
        result_read_at=T0 + 1.57,
        returned_at=T0 + 1.58,
        spark_total_seconds=0.5,
        spark_plan_seconds=0.3,
        translate_seconds=0.1,
        edge_ends={
            "by_key": ("big", "join"),
            "small_side": ("small", "join"),
            "to_sink": ("join", "sink"),
        },
    )
    return JobResult(
        pa.table({"x": [1]}),
        edges,
        tasks,
        1.6,
        "",
        vertices=vertex_metrics(tasks, ["big", "small", "join", "sink"]),
        regions={"big": "R0", "small": "R0", "join": "R1", "sink": "R2"},
        times=times,
    )


def test_the_phases_add_up_to_spark_s_time_and_the_run() -> None:
    p = result().profile()
    assert p.total_seconds == 2.1  # Session.sql's 0.5 s and the run's 1.6 s
    got = {ph.name: round(ph.seconds, 6) for ph in p.phases}
    assert got == {
        "spark": 0.4,
        "translate": 0.1,
        "plan": 0.05,
        "sources": 0.0,
        "deploy": 0.1,  # execute entered at 0.1, first task at 0.2
        "tasks": 1.3,
        "hand-back": 0.1,  # last task's end at 1.5, the run's at 1.6
        "other": 0.05,
    }
    assert abs(sum(ph.seconds for ph in p.phases) - p.total_seconds) < 1e-9


def test_every_vertex_and_edge_with_its_numbers() -> None:
    p = result().profile()
    assert [v.name for v in p.vertices] == ["big", "small", "join", "sink"]
    big = p.vertex("big")
    assert (big.subtasks, big.rows_in, big.rows_out, big.region) == (2, 2000, 200, "R0")
    assert round(big.wall_seconds, 6) == 0.8
    assert (round(big.cpu_seconds, 6), round(big.thread_cpu_seconds, 6)) == (0.5, 0.2)
    assert p.vertex("join").inputs == ("by_key", "small_side")
    by_key = next(e for e in p.edges if e.name == "by_key")
    assert (by_key.source, by_key.target, by_key.rows, by_key.bytes) == ("big", "join", 200, 4096)


def test_the_critical_path_runs_through_the_latest_input() -> None:
    p = result().profile()
    assert p.critical_path == ("big", "join", "sink")
    seconds = {v.name: round(v.critical_seconds, 6) for v in p.vertices}
    # big from its start (0.2) to its end (1.0); join from big's end to its own (1.3)
    assert seconds == {"big": 0.8, "small": 0.0, "join": 0.3, "sink": 0.2}
    assert round(p.vertex("join").hop_seconds, 6) == 0.05  # big ended at 1.0, join began 1.05
    assert round(p.vertex("big").critical_share, 6) == round(0.8 / 1.3, 6)


def test_the_text_is_a_tree_from_the_sink_with_the_phases_above() -> None:
    text = result().profile().render()
    lines = text.splitlines()
    assert lines[0] == "Profile of job q: 2.100 s"
    assert any(line.split()[:2] == ["tasks", "1.300"] for line in lines)
    assert lines[9].endswith(
        "hand-back     0.100   4.8%  to the result in hand (read 0.020 s, released 0.010 s)"
    )
    tree = lines[lines.index(next(x for x in lines if x.startswith("sink"))) :]
    assert tree[0].startswith("sink [R2]: 1 subtask, wall 0.150 s, CPU 0.250 s, critical")
    assert tree[0].endswith("critical 0.200 s (15%; hop 0.050 s)")
    assert tree[2] == (
        "└─ to_sink (pipelined, round-robin): 0 rows, 0 B, 1 partition, spilled 3 MiB, "
        "blocked 0.250 s"
    )
    assert tree[3].startswith("   join [R1]: 1 subtask")
    assert tree[5].startswith("   ├─ by_key (blocking, hash(k)): 200 rows, 4 KiB, 1 partition")
    assert tree[6].startswith("   │  big [R0]: 2 subtasks, wall 0.800 s, CPU 0.500 s")
    assert tree[7] == "   │     rows 2,000 in -> 200 out"
    assert tree[8].startswith("   └─ small_side (blocking, broadcast)")
    assert tree[9].startswith("      small [R0]")
    assert lines[-1] == "Critical path: big -> join -> sink"
    assert str(result().profile()) == text


def test_to_dict_is_plain_json_data() -> None:
    data = json.loads(json.dumps(result().profile().to_dict()))
    assert data["job"] == "q" and data["critical_path"] == ["big", "join", "sink"]
    assert [ph["name"] for ph in data["phases"]][:2] == ["spark", "translate"]
    assert {v["name"] for v in data["vertices"]} == {"big", "small", "join", "sink"}


def test_a_result_made_by_hand_without_times_has_no_spark_or_task_phases() -> None:
    r = result()
    r.times = None
    p = r.profile()
    assert [ph.name for ph in p.phases] == ["plan", "sources", "other"]
    assert p.total_seconds == 1.6
    assert p.critical_path == ("sink",)  # no edges known: the last vertex alone
