"""Speculative execution: which tasks are eligible, when one is slow, and the scheduler's
copies over plain state (a faked transport whose chosen attempts hang; no Ray)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pytest

from hybrid_shuffle.config import FailoverConfig, SpeculationConfig, load_config
from hybrid_shuffle.errors import ConfigError
from hybrid_shuffle.plan.planner import plan_job
from hybrid_shuffle.plan.speculation import Link, eligibility, why_not
from hybrid_shuffle.runtime.partition_tracker import PartitionTracker, TrackedState
from hybrid_shuffle.runtime.scheduler import Scheduler
from hybrid_shuffle.runtime.speculation import slow_tasks
from hybrid_shuffle.runtime.task import TaskState
from hybrid_shuffle.shuffle.api import PartitionDescriptor, PartitionId, ProducerDescriptor
from hybrid_shuffle.shuffle.partition_type import partition_type
from hybrid_shuffle.shuffle.routing import Partitioner, PartitionerKind

from .builders import Builder
from .fakes import FakePool, FakeTransport, RecordingMaster

ON = SpeculationConfig(enabled=True, multiplier=1.0, quantile=0.5, min_runtime=0.05)


def link(mode: str, other: str = "x") -> Link:
    kind = partition_type(mode)
    return Link("e", other, mode, kind.reconsumable, kind.must_be_pipelined())


# -- eligibility -------------------------------------------------------------------------


def test_blocking_and_hybrid_full_outputs_and_sinks_are_eligible() -> None:
    assert why_not([], [link("blocking")]) is None
    assert why_not([link("blocking")], [link("hybrid-full")]) is None
    assert why_not([link("hybrid-full")], []) is None  # a sink reading a kept input


def test_an_output_read_while_written_is_not_eligible() -> None:
    assert why_not([], [link("pipelined", "agg")]) == "output pipelined to 'agg'"
    reason = why_not([], [link("hybrid-selective", "agg")])
    assert reason == "output 'e' to 'agg' is hybrid-selective, read once as written"


def test_an_input_that_cannot_be_read_again_is_not_eligible() -> None:
    assert why_not([link("pipelined", "src")], []) == "input pipelined from 'src'"
    reason = why_not([link("hybrid-selective", "src")], [])
    assert reason is not None and "could not read it again" in reason


def test_a_co_located_vertex_is_not_eligible() -> None:
    assert why_not([], [], "pair") == "co-located with its partners ('pair')"


def test_eligibility_of_a_planned_job_follows_its_edge_modes() -> None:
    b = Builder()
    sink = b.agg(b.map(b.source("orders", 2), "clean"), "totals", "by_customer", "pipelined")
    graph = plan_job("job", sink, load_config({"parallelism": 2}), slots=4).graph
    why = {graph.vertices[v].name: r for v, r in eligibility(graph).items()}
    assert why == {
        "orders->clean": "output pipelined to 'totals'",
        "totals": ("input pipelined from 'orders->clean'"),
    }


def test_explain_says_which_vertices_can_be_speculated_only_when_enabled() -> None:
    b = Builder()
    sink = b.agg(b.map(b.source("orders", 2), "clean"), "totals", "by_customer", "pipelined")
    sink = b.agg(sink, "again", "by_total", "blocking")
    raw = {"parallelism": 2, "failover": {"speculation": {"enabled": True}}}
    p = plan_job("job", sink, load_config(raw), slots=4)
    text = p.explain().splitlines()
    start = text.index("speculation (failover.speculation):")
    assert text[start + 1].split() == [
        "orders->clean",
        "not",
        "speculated:",
        "output",
        "pipelined",
        "to",
        "'totals'",
    ]
    assert text[start + 3].split() == ["again", "can", "be", "speculated"]
    data = p.explain_data()["speculation"]
    assert data["enabled"] is True
    assert data["vertices"][2] == {"name": "again", "eligible": True, "reason": None}
    off = plan_job("job", sink, load_config({"parallelism": 2}), slots=4)
    assert "speculation" not in off.explain()
    assert off.explain_data()["speculation"]["enabled"] is False


# -- when a task is slow ------------------------------------------------------------------


def test_no_task_is_slow_before_the_quantile_of_subtasks_finished() -> None:
    config = SpeculationConfig(True, 1.5, 0.75, 0.0)
    assert slow_tasks([1.0, 1.0], {"a": 100.0, "b": 100.0}, 4, config) == []
    assert slow_tasks([1.0, 1.0, 1.0], {"a": 100.0}, 4, config) == ["a"]


def test_a_task_is_slow_past_multiplier_times_the_median_and_min_runtime() -> None:
    config = SpeculationConfig(True, 2.0, 0.5, 0.0)
    assert slow_tasks([1.0, 3.0, 2.0], {"a": 3.9, "b": 4.1}, 4, config) == ["b"]
    floor = SpeculationConfig(True, 2.0, 0.5, 10.0)
    assert slow_tasks([1.0, 3.0, 2.0], {"a": 9.0}, 4, floor) == []


def test_slow_tasks_come_longest_running_first() -> None:
    assert slow_tasks([0.1], {"a": 1.0, "b": 3.0, "c": 2.0}, 2, ON) == ["b", "c", "a"]


# -- config -----------------------------------------------------------------------------


def test_speculation_config_loads_with_a_duration() -> None:
    raw = {"failover": {"speculation": {"enabled": True, "min_runtime": "200 ms"}}}
    config = load_config(raw).failover.speculation
    assert config == SpeculationConfig(True, 1.5, 0.75, 0.2)
    assert load_config(load_config(raw)) == load_config(raw)


@pytest.mark.parametrize(
    ("entry", "path"),
    [
        ({"enable": True}, "failover.speculation.enable: unknown key"),
        ({"enabled": "yes"}, "failover.speculation.enabled: must be true or false"),
        ({"multiplier": 0.9}, "failover.speculation.multiplier: must be a number of at least 1"),
        ({"quantile": 0}, "failover.speculation.quantile: must be a number above 0"),
        ({"quantile": 1.5}, "failover.speculation.quantile: must be a number above 0"),
        ({"min_runtime": "soon"}, "failover.speculation.min_runtime: 'soon' is not a duration"),
    ],
)
def test_a_wrong_speculation_key_is_one_sentence_naming_it(
    entry: dict[str, Any], path: str
) -> None:
    with pytest.raises(ConfigError) as e:
        load_config({"failover": {"speculation": entry}})
    assert str(e.value).startswith(path)


# -- the tracker --------------------------------------------------------------------------


def partition(attempt: int) -> PartitionDescriptor:
    return PartitionDescriptor(
        PartitionId(f"j/e/0.{attempt}"),
        "j",
        "e",
        0,
        1,
        1,
        partition_type("blocking"),
        Partitioner(PartitionerKind.FORWARD),
        attempt=attempt,
    )


def test_a_copy_that_wins_replaces_the_first_attempts_partitions() -> None:
    master = RecordingMaster()
    tracker = PartitionTracker(master)
    tracker.register(("p", 0), partition(0), ProducerDescriptor(0, "ex0"))
    tracker.register_speculative(("p", 0), partition(1), ProducerDescriptor(1, "ex1"))
    assert tracker.descriptor("j", "e", 0).partition.attempt == 0  # consumers: the first's
    tracker.speculation_won("j", ("p", 0))
    assert master.released == ["j/e/0.0"]
    assert tracker.descriptor("j", "e", 0).partition.attempt == 1
    tracker.producer_finished("j", ("p", 0), {})
    assert tracker.state(PartitionId("j/e/0.1")) is TrackedState.PRODUCED


def test_a_dropped_or_lost_copy_is_released_and_never_recomputed() -> None:
    master = RecordingMaster()
    tracker = PartitionTracker(master)
    tracker.register(("p", 0), partition(0), ProducerDescriptor(0, "ex0"))
    tracker.register_speculative(("p", 0), partition(1), ProducerDescriptor(1, "ex1"))
    tracker.executor_lost(1)
    assert tracker.lost_producers("j") == set()
    tracker.speculation_dropped("j", ("p", 0))
    assert master.released == ["j/e/0.1"]
    assert tracker.descriptor("j", "e", 0).partition.attempt == 0


# -- the scheduler ------------------------------------------------------------------------


class HangingTransport(FakeTransport):
    """Attempts named in ``hang`` (``name#attempt`` -> seconds) report only after that
    long, or at once when cancelled (then as CANCELED)."""

    def __init__(self, hang: dict[str, float], failing: Sequence[str] = ()) -> None:
        super().__init__(outcome=self._outcome)
        self.hang = hang
        self.failing = set(failing)
        self._until: dict[int, float] = {}

    def _outcome(self, name: str, attempt: int) -> TaskState:
        key = f"{name}#{attempt}"
        if any(k.endswith(f"/{key}") for k in self.cancelled_attempts):
            return TaskState.CANCELED
        return TaskState.FAILED if key in self.failing else TaskState.FINISHED

    def submit(self, executor: Any, deployment: Any) -> int:
        ref = super().submit(executor, deployment)
        seconds = self.hang.get(f"{deployment.name}#{deployment.attempt}")
        if seconds is not None:
            self._until[ref] = time.monotonic() + seconds
        return ref

    def wait(self, refs: Sequence[int], timeout: float) -> list[int]:
        now = time.monotonic()
        cancelled = {k.rsplit("/", 1)[1] for k in self.cancelled_attempts}
        ready = []
        for ref in refs:
            d = self._refs[ref].deployment
            if self._until.get(ref, 0.0) <= now or f"{d.name}#{d.attempt}" in cancelled:
                ready.append(ref)
        if not ready:
            time.sleep(0.01)
        return ready[:1]


def run(mode: str, transport: HangingTransport, max_attempts: int = 1) -> Scheduler:
    b = Builder()
    sink = b.agg(b.map(b.source("orders", 4), "clean"), "totals", "by_customer", mode)
    p = plan_job("job", sink, load_config({"parallelism": 4}), slots=4)
    scheduler = Scheduler(
        p,
        "job-1",
        PartitionTracker(RecordingMaster()),
        FakePool(list(range(4))),
        transport,
        1 << 20,
        5.0,
        FailoverConfig(max_attempts=max_attempts, backoff=0.0, speculation=ON),
    )
    scheduler.run()
    return scheduler


def test_a_slow_task_gets_a_copy_that_wins_and_consumers_read_the_copy() -> None:
    transport = HangingTransport({"orders->clean[0]#0": 30.0})
    scheduler = run("blocking", transport)
    assert scheduler.speculative_attempts == 1
    report = next(r for r in scheduler.reports if r.name == "orders->clean[0]")
    assert report.speculative and report.attempt == 1
    assert "job-1/orders->clean[0]#0" in transport.cancelled_attempts
    assert scheduler.restarts == 0
    first = [s for s in transport.submitted if s.deployment.name == "orders->clean[0]"]
    assert len(first) == 2 and first[0].executor != first[1].executor
    for s in transport.submitted:
        if s.deployment.vertex == "totals":
            read = [c.descriptor.partition for g in s.deployment.gates for c in g.channels]
            assert {p.attempt for p in read if p.producer_subtask == 0} == {1}


def test_a_pipelined_vertex_is_not_speculated() -> None:
    transport = HangingTransport({"orders->clean[0]#0": 0.3})
    scheduler = run("pipelined", transport)
    assert scheduler.speculative_attempts == 0
    assert all(not r.speculative for r in scheduler.reports)


def test_a_failed_copy_is_dropped_and_not_counted() -> None:
    transport = HangingTransport({"orders->clean[0]#0": 0.3}, failing=["orders->clean[0]#1"])
    scheduler = run("blocking", transport)  # max_attempts 1: a counted failure fails the job
    assert scheduler.speculative_attempts == 1
    report = next(r for r in scheduler.reports if r.name == "orders->clean[0]")
    assert not report.speculative and report.attempt == 0
    assert scheduler.restarts == 0


def test_a_region_restart_cancels_both_attempts_and_numbers_the_next_past_the_copy() -> None:
    hang = {"orders->clean[0]#0": 0.3, "orders->clean[0]#1": 30.0}
    transport = HangingTransport(hang, failing=["orders->clean[0]#0"])
    scheduler = run("blocking", transport, max_attempts=2)
    assert scheduler.speculative_attempts == 1 and scheduler.restarts == 1
    assert "job-1/orders->clean[0]#1" in transport.cancelled_attempts
    report = next(r for r in scheduler.reports if r.name == "orders->clean[0]")
    assert report.attempt == 2 and not report.speculative


def test_a_hybrid_full_producer_whose_consumers_already_read_is_not_copied() -> None:
    transport = HangingTransport({"orders->clean[0]#0": 0.3})
    scheduler = run("hybrid-full", transport)  # the consumers deploy beside the producers
    assert scheduler.speculative_attempts == 0
