"""The scheduler's run loop over plain state, with only the transport faked (no Ray)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from hybrid_shuffle.config import FailoverConfig, load_config
from hybrid_shuffle.errors import JobFailedError, SchemaMismatchError
from hybrid_shuffle.plan.planner import LogicalNode, Plan, plan_job
from hybrid_shuffle.runtime.partition_tracker import PartitionTracker
from hybrid_shuffle.runtime.scheduler import Scheduler, _Running
from hybrid_shuffle.runtime.task import TaskState

from .builders import Builder
from .fakes import FakePool, FakeTransport, RecordingMaster


def two_stages(mode: str, parallelism: int = 4) -> LogicalNode:
    b = Builder()
    return b.agg(b.map(b.source("orders", parallelism), "clean"), "totals", "by_customer", mode)


def plan(sink: LogicalNode, slots: int) -> Plan:
    return plan_job("job", sink, load_config({"parallelism": 4}), slots=slots)


def run(
    p: Plan,
    slots: int,
    transport: FakeTransport,
    max_attempts: int = 1,
    pool: FakePool | None = None,
    master: RecordingMaster | None = None,
) -> tuple[Scheduler, RecordingMaster]:
    master = master or RecordingMaster()
    scheduler = Scheduler(
        p,
        "job-1",
        PartitionTracker(master),
        pool or FakePool(list(range(slots))),
        transport,
        1 << 20,
        5.0,
        FailoverConfig(max_attempts=max_attempts, backoff=0.0),
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


def test_a_hybrid_consumer_never_deploys_before_its_producer() -> None:
    """Its producer waits behind a blocking edge; the consumer, whose own input is
    hybrid, could take a slot at once, and would then wait for a producer that may need
    that slot: it deploys only once the producer has (regions deploy in order)."""
    b = Builder()
    totals = b.agg(b.source("orders", 2), "totals", "e1", "blocking")
    final = b.sort(totals, "final", "e2", "hybrid-selective")
    transport = FakeTransport()
    run(plan(final, slots=8), 8, transport)
    names = transport.names()
    producers = [i for i, n in enumerate(names) if n.startswith("totals")]
    consumers = [i for i, n in enumerate(names) if n.startswith("final")]
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
    def outcome(name: str, attempt: int) -> TaskState:
        return TaskState.FAILED if name == "orders->clean[1]" else TaskState.FINISHED

    transport = FakeTransport(outcome)
    with pytest.raises(
        JobFailedError,
        match=r"task 'orders->clean\[1\]' \(operator 'orders->clean', subtask 1\) failed in "
        r"attempt 0 \(failover.max_attempts 1\): ValueError: boom",
    ):
        run(plan(two_stages("hybrid-selective"), slots=4), 4, transport)
    assert transport.cancelled == ["job-1"]


def test_cancelled_tasks_of_a_failed_job_do_not_hide_the_root_cause() -> None:
    def outcome(name: str, attempt: int) -> TaskState:
        if name == "orders->clean[0]":
            return TaskState.CANCELED
        return TaskState.FAILED if name == "orders->clean[2]" else TaskState.FINISHED

    with pytest.raises(JobFailedError, match=r"orders->clean\[2\]"):
        run(plan(two_stages("pipelined"), slots=4), 4, FakeTransport(outcome))


def test_job_start_end_and_failure_are_logged_at_info(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="hybrid_shuffle")
    run(plan(two_stages("blocking"), slots=2), 2, FakeTransport())
    failing = FakeTransport(lambda name, attempt: TaskState.FAILED)
    with pytest.raises(JobFailedError):
        run(plan(two_stages("blocking"), slots=2), 2, failing)
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any(m.startswith("job job-1: started") for m in messages)
    assert any(m.startswith("job job-1: finished") for m in messages)
    assert any(m.startswith("job job-1: failed (JobFailedError)") for m in messages)


# -- region failover ------------------------------------------------------------------------


def fails_once(task: str) -> Callable[[str, int], TaskState]:
    return lambda name, attempt: (
        TaskState.FAILED if name == task and attempt == 0 else TaskState.FINISHED
    )


def test_a_task_that_fails_once_runs_again_as_its_next_attempt_and_the_job_finishes() -> None:
    transport = FakeTransport(fails_once("orders->clean[1]"))
    scheduler, master = run(plan(two_stages("blocking"), slots=4), 4, transport, max_attempts=3)
    assert scheduler.restarts == 1
    reports = {r.name: r for r in scheduler.reports}
    assert reports["orders->clean[1]"].attempt == 1
    assert reports["orders->clean[0]"].attempt == 0
    # the failed attempt's partition was released, the new attempt's has its own id
    assert "job-1/by_customer/1.0" in master.released
    assert "job-1/by_customer/1.1" in master.registered


def test_a_failed_consumer_of_blocking_partitions_rereads_them_and_no_producer_runs_again() -> None:
    transport = FakeTransport(fails_once("totals[2]"))
    run(plan(two_stages("blocking"), slots=4), 4, transport, max_attempts=3)
    assert "totals[2]#1" in transport.attempts()
    assert not [a for a in transport.attempts() if a.startswith("orders") and a.endswith("#1")]


@pytest.mark.parametrize("mode", ["hybrid-selective", "pipelined"])
def test_a_failed_consumer_of_partitions_that_cannot_be_reread_restarts_their_producers(
    mode: str,
) -> None:
    transport = FakeTransport(fails_once("totals[2]"))
    scheduler, _ = run(plan(two_stages(mode), slots=4), 4, transport, max_attempts=3)
    assert {f"orders->clean[{i}]#1" for i in range(4)} <= set(transport.attempts())
    assert {f"totals[{i}]#1" for i in range(4)} <= set(transport.attempts())
    assert scheduler.restarts == 1


def test_a_task_failing_in_every_attempt_fails_the_job_naming_them() -> None:
    failing = FakeTransport(
        lambda name, attempt: TaskState.FAILED if name == "totals[0]" else TaskState.FINISHED
    )
    with pytest.raises(JobFailedError) as err:
        run(plan(two_stages("blocking"), slots=4), 4, failing, max_attempts=3)
    assert "failed in attempts 0, 1, 2 (failover.max_attempts 3): ValueError: boom" in str(
        err.value
    )
    assert (err.value.operator, err.value.subtask, err.value.attempts) == ("totals", 0, 3)
    assert failing.cancelled == ["job-1"]


def test_a_schema_error_is_not_retried_since_it_would_fail_the_same_way() -> None:
    failing = FakeTransport(
        lambda name, attempt: TaskState.FAILED if name == "totals[0]" else TaskState.FINISHED,
        error=lambda name: SchemaMismatchError("column 'x' is int64 in one batch"),
    )
    with pytest.raises(SchemaMismatchError, match="column 'x'"):
        run(plan(two_stages("blocking"), slots=4), 4, failing, max_attempts=3)
    assert "totals[0]#1" not in failing.attempts()


def test_an_executor_lost_after_its_producers_finished_is_replaced_and_they_run_again() -> None:
    pool = FakePool(list(range(2)))

    def outcome(name: str, attempt: int) -> TaskState:
        if name == "totals[0]" and attempt == 0:
            pool.dying.append(1)  # executor 1 dies while the consumers read
        return TaskState.FINISHED

    transport = FakeTransport(outcome)
    scheduler, _ = run(plan(two_stages("blocking"), slots=2), 2, transport, 3, pool)
    assert pool.replaced == [1]
    on_1 = {s.deployment.name for s in transport.submitted[:4] if s.executor == 1}
    rerun = {a.split("#")[0] for a in transport.attempts() if a.endswith("#1")}
    assert on_1 and on_1 <= rerun  # its producers ran again: their partitions were lost
    assert not any(a.startswith("orders") for a in rerun - on_1)  # the others were re-read
    assert scheduler.restarts >= 1


def test_a_hung_zombie_gets_its_executor_replaced_and_tasks_beside_it_run_again() -> None:
    """A cancelled attempt that never reports: after the grace its executor is replaced,
    and a current task that ran on the same executor is restarted, not forgotten."""
    pool = FakePool(list(range(2)))
    transport = FakeTransport(fails_once("totals[1]"))
    p = plan(two_stages("blocking"), slots=2)
    scheduler = Scheduler(
        p,
        "job-1",
        PartitionTracker(RecordingMaster()),
        pool,
        transport,
        1 << 20,
        5.0,
        FailoverConfig(max_attempts=3, backoff=0.0),
    )
    # a zombie and a current task on executor 0, neither reporting
    scheduler._pending = []
    zombie, current = object(), object()
    scheduler._running[zombie] = _Running(("x", 0), 0, "x[0]", 0, zombie=True, cancelled_at=0.0)
    task = p.regions[0].tasks[0]
    scheduler._running[current] = _Running(task, 0, "t", 0)
    scheduler._current[task] = current
    scheduler._deployed.add(task)
    scheduler.slots.acquire(1)
    scheduler.slots.task_started(0)
    scheduler.slots.task_started(0)
    scheduler._reap_zombies(grace=0.0)
    assert pool.replaced == [0]
    assert scheduler._running == {}
    assert task not in scheduler._deployed and scheduler.restarts == 1
    assert scheduler.slots.free == 2


def test_narrow_vertices_fill_the_slots_wide_ones_leave_and_no_slot_takes_more_than_its_share() -> (
    None
):
    """Three sources of parallelism 1, their union and an aggregate of 4, pipelined on 4
    slots: 8 tasks, 2 a slot (Flink's subtask-i-to-slot-i put 5 on the first)."""
    b = Builder()
    sources = [b.source(f"s{i}", 1) for i in range(3)]
    union = b.union(*sources)
    sink = b.agg(union, "totals", "by_customer", "pipelined", partitions=4)
    transport = FakeTransport()
    run(plan(sink, slots=4), 4, transport)
    per_executor: dict[object, int] = {}
    for submitted in transport.submitted:
        per_executor[submitted.executor] = per_executor.get(submitted.executor, 0) + 1
    assert sorted(per_executor.values()) == [2, 2, 2, 2]
