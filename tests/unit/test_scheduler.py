"""The scheduler's run loop over plain state, with only the transport faked (no Ray)."""

from __future__ import annotations

import logging

import pytest

from hybrid_shuffle.config import load_config
from hybrid_shuffle.errors import JobFailedError
from hybrid_shuffle.plan.planner import LogicalNode, Plan, plan_job
from hybrid_shuffle.runtime.partition_tracker import PartitionTracker
from hybrid_shuffle.runtime.scheduler import Scheduler
from hybrid_shuffle.runtime.task import TaskState

from .builders import Builder
from .fakes import FakeTransport, RecordingMaster


def two_stages(mode: str, parallelism: int = 4) -> LogicalNode:
    b = Builder()
    return b.agg(b.map(b.source("orders", parallelism), "clean"), "totals", "by_customer", mode)


def plan(sink: LogicalNode, slots: int) -> Plan:
    return plan_job("job", sink, load_config({"parallelism": 4}), slots=slots)


def run(p: Plan, slots: int, transport: FakeTransport) -> tuple[Scheduler, RecordingMaster]:
    master = RecordingMaster()
    scheduler = Scheduler(
        p, "job-1", PartitionTracker(master), list(range(slots)), transport, 1 << 20, 5.0
    )
    scheduler.run()
    return scheduler, master


def test_blocking_consumers_deploy_only_after_every_producer_finished() -> None:
    transport = FakeTransport()
    run(plan(two_stages("blocking"), slots=2), 2, transport)
    names = transport.names()
    producers = [i for i, n in enumerate(names) if n.startswith("orders")]
    consumers = [i for i, n in enumerate(names) if n.startswith("totals")]
    assert len(producers) == len(consumers) == 4
    assert max(producers) < min(consumers)


def test_scarce_slots_never_run_more_regions_than_slots() -> None:
    transport = FakeTransport()
    run(plan(two_stages("hybrid-selective"), slots=2), 2, transport)
    assert len(transport.submitted) == 8
    assert max(transport.concurrency.values()) <= 2


def test_a_pipelined_region_deploys_all_its_tasks_at_once() -> None:
    transport = FakeTransport()
    run(plan(two_stages("pipelined"), slots=4), 4, transport)
    assert transport.concurrency["totals[3]"] == 8  # 4 producers + 4 consumers, 4 slots


def test_every_partition_is_released_once_its_readers_finished() -> None:
    transport = FakeTransport()
    _, master = run(plan(two_stages("blocking"), slots=2), 2, transport)
    edge_partitions = [p for p in master.registered if "/by_customer/" in p]
    assert sorted(master.released) == sorted(edge_partitions)  # the result edge stays


def test_a_failed_task_cancels_the_job_and_raises_the_users_error_naming_the_task() -> None:
    def outcome(name: str) -> TaskState:
        return TaskState.FAILED if name == "orders->clean[1]" else TaskState.FINISHED

    transport = FakeTransport(outcome)
    with pytest.raises(JobFailedError, match=r"task 'orders->clean\[1\]' failed: ValueError: boom"):
        run(plan(two_stages("hybrid-selective"), slots=4), 4, transport)
    assert transport.cancelled == ["job-1"]


def test_cancelled_tasks_of_a_failed_job_do_not_hide_the_root_cause() -> None:
    def outcome(name: str) -> TaskState:
        if name == "orders->clean[0]":
            return TaskState.CANCELED
        return TaskState.FAILED if name == "orders->clean[2]" else TaskState.FINISHED

    with pytest.raises(JobFailedError, match=r"orders->clean\[2\]"):
        run(plan(two_stages("pipelined"), slots=4), 4, FakeTransport(outcome))


def test_job_start_end_and_failure_are_logged_at_info(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="hybrid_shuffle")
    run(plan(two_stages("blocking"), slots=2), 2, FakeTransport())
    failing = FakeTransport(lambda name: TaskState.FAILED)
    with pytest.raises(JobFailedError):
        run(plan(two_stages("blocking"), slots=2), 2, failing)
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any(m.startswith("job job-1: started") for m in messages)
    assert any(m.startswith("job job-1: finished") for m in messages)
    assert any(m.startswith("job job-1: failed (JobFailedError)") for m in messages)
