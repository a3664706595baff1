"""Nothing lost: a killed executor, a crashing or always-failing function, a stuck one.

Failures are injected at a named phase of a running job, never on a timer: a
user function writes its process id to a marker file when the task reaches the
phase (before its first buffer, mid-write, mid-read) and waits (bounded) until
the test has killed that executor and released the rest.  Every recovered job
is compared row for row with the input or with pyarrow, in all four modes and
with both shuffle services, and leaves nothing behind.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import ray

import hybrid_shuffle as hs

from .conftest import assert_closed_cleanly, assert_no_leaks, wait_until
from .data import orders
from .phases import gate, kill_at

MODES = ["pipelined", "blocking", "hybrid-selective", "hybrid-full"]
SERVICES = ["executor-local", "external"]
ROWS = 40_000


def config(service: str) -> dict[str, object]:
    return {
        "parallelism": 2,
        "shuffle": {"service": service, "buffer_size": "64 KiB", "wait_timeout": 30},
        "failover": {"max_attempts": 3, "backoff": "50 ms"},
    }


@pytest.fixture(scope="module", params=SERVICES)
def session(request: pytest.FixtureRequest, local_ray: None) -> Iterator[hs.Session]:
    with hs.Session(config(request.param), slots=4) as s:
        yield s
    assert_closed_cleanly(s)


# -- phase gates ----------------------------------------------------------------------------


def crash_once(marker: Path) -> Callable[[pa.Table], pa.Table]:
    """Ends its executor's process (``os._exit(1)``) the first time it runs anywhere."""
    path = str(marker)

    def fn(table: pa.Table) -> pa.Table:
        if not os.path.exists(path):
            open(path, "w").close()
            os._exit(1)
        return table

    return fn


def pipeline(
    session: hs.Session,
    mode: str,
    producer: Callable[[pa.Table], pa.Table] | None = None,
    consumer: Callable[[pa.Table], pa.Table] | None = None,
    parallelism: int = 2,
) -> hs.Stream:
    job = session.job(f"failover-{mode}")
    stream = job.from_arrow(orders(ROWS), name="orders", parallelism=parallelism)
    stream = stream.map_batches(producer or (lambda t: t), name="produce")
    keyed = stream.key_by("customer", edge="by_customer", mode=mode, partitions=parallelism)
    return keyed.map_batches(consumer or (lambda t: t), name="consume")


def assert_all_rows(result: hs.JobResult) -> None:
    """Every input row exactly once: no duplicate from a restarted attempt, none missing."""
    expected = orders(ROWS)
    table = result.table.sort_by("order_id")
    assert table.num_rows == expected.num_rows
    assert table.select(expected.column_names).equals(expected)


def is_lost(refs: list[Any]) -> bool:
    try:
        ray.get(refs, timeout=5)
    except (ray.exceptions.OwnerDiedError, ray.exceptions.ObjectLostError):
        return True
    return False


def attempts(result: hs.JobResult, vertex_prefix: str) -> list[int]:
    return sorted(r.attempt for r in result.tasks if r.vertex.startswith(vertex_prefix))


# -- executors killed at a phase ---------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_a_producer_killed_mid_write_is_recomputed_and_no_row_is_lost_or_doubled(
    session: hs.Session, mode: str, tmp_path: Path
) -> None:
    marker, release = tmp_path / "mid-write", tmp_path / "release"
    killer = kill_at(session, marker, release)
    result = pipeline(session, mode, producer=gate(marker, release, at_call=3)).collect()
    killer.join(5)
    assert_all_rows(result)
    assert result.restarts >= 1
    assert max(attempts(result, "orders")) >= 1
    assert_no_leaks(session)


@pytest.mark.parametrize("mode", MODES)
def test_a_consumer_killed_mid_read_runs_again_and_no_row_is_lost_or_doubled(
    session: hs.Session, mode: str, tmp_path: Path
) -> None:
    marker, release = tmp_path / "mid-read", tmp_path / "release"
    killer = kill_at(session, marker, release)
    result = pipeline(session, mode, consumer=gate(marker, release, at_call=2)).collect()
    killer.join(5)
    assert_all_rows(result)
    assert result.restarts >= 1
    assert max(attempts(result, "consume")) >= 1
    if mode in ("blocking", "hybrid-full"):
        # the producers' partitions were re-read, not recomputed (unless the consumer
        # shared the killed executor with a producer, which took its partition along)
        killed_producer = session.config.shuffle.service == "executor-local" and max(
            attempts(result, "orders")
        )
        assert attempts(result, "orders") == [0, 0] or killed_producer
    assert_no_leaks(session)


@pytest.mark.parametrize("mode", MODES)
def test_a_producer_killed_before_its_first_buffer_runs_again(
    session: hs.Session, mode: str, tmp_path: Path
) -> None:
    marker, release = tmp_path / "first-buffer", tmp_path / "release"
    killer = kill_at(session, marker, release)
    result = pipeline(session, mode, producer=gate(marker, release, at_call=1)).collect()
    killer.join(5)
    assert_all_rows(result)
    assert result.restarts >= 1
    assert_no_leaks(session)


@pytest.mark.parametrize("mode", MODES)
def test_user_code_that_exits_its_process_once_is_retried_on_a_new_executor(
    session: hs.Session, mode: str, tmp_path: Path
) -> None:
    pids = {info["pid"] for info in session.executor_info}
    result = pipeline(session, mode, consumer=crash_once(tmp_path / "crashed")).collect()
    assert_all_rows(result)
    assert result.restarts >= 1
    assert {info["pid"] for info in session.executor_info} != pids  # one was replaced
    assert len(session.executors) == session.slots
    assert_no_leaks(session)


def test_finished_partitions_outlive_their_executor_only_in_the_external_store(
    session: hs.Session, tmp_path: Path
) -> None:
    """Blocking, one producer, one consumer: the producer finishes on slot 0 and the
    consumer runs on slot 1; the producer's executor is killed while the consumer reads."""
    started, release = tmp_path / "consumer-started", tmp_path / "release"
    producer_pid = tmp_path / "producer"
    job = session.job("outlive")
    result_stream = (
        job.from_arrow(orders(ROWS), name="orders", parallelism=1)
        .map_batches(gate(producer_pid, tmp_path / "never", at_call=10**9), name="produce")
        .key_by("customer", edge="by_customer", mode="blocking", partitions=1)
        .map_batches(gate(started, release, at_call=1), name="consume")
    )
    victim: list[int] = []

    def kill_the_producer() -> None:
        try:
            wait_until(started.exists, 60, "the consumer's first batch")
            producer = next(
                r for r in session.executor_info if r["pid"] != int(started.read_text())
            )
            del producer  # the consumer's executor is spared; slot 0 ran the producer
            victim.append(0)
            ray.kill(session.executors[0])
        finally:
            release.touch()

    thread = threading.Thread(target=kill_the_producer, daemon=True)
    thread.start()
    result = result_stream.collect()
    thread.join(5)
    assert_all_rows(result)
    assert victim == [0]
    if session.config.shuffle.service == "external":
        assert result.restarts == 0  # the store kept the partition: nothing ran again
        assert attempts(result, "orders") == [0]
    else:
        assert attempts(result, "orders") == [1]  # lost with its executor: recomputed
    assert_no_leaks(session)


# -- failing for good, and bounded waits ---------------------------------------------------


def always_fails(table: pa.Table) -> pa.Table:
    raise ValueError("bad row in batch\nsecond line")


def test_a_function_failing_every_attempt_fails_the_job_naming_operator_subtask_attempts(
    session: hs.Session,
) -> None:
    with pytest.raises(hs.JobFailedError) as err:
        pipeline(session, "blocking", consumer=always_fails).collect()
    message = str(err.value)
    assert "operator 'consume', subtask " in message
    assert "failed in attempts 0, 1, 2 (failover.max_attempts 3)" in message
    assert message.endswith("ValueError: bad row in batch")
    assert err.value.attempts == 3 and err.value.operator == "consume"
    assert_no_leaks(session)
    # the session stays usable
    assert_all_rows(pipeline(session, "blocking").collect())


def stuck(table: pa.Table) -> pa.Table:
    time.sleep(3600)
    return table


@pytest.mark.parametrize("mode", ["pipelined", "hybrid-selective"])
def test_a_stuck_function_ends_in_a_job_timeout_naming_the_job_and_its_tasks(
    session: hs.Session, mode: str
) -> None:
    pids = {info["pid"] for info in session.executor_info}
    started = time.monotonic()
    with pytest.raises(hs.JobTimeoutError) as err:
        pipeline(session, mode, producer=stuck).collect(timeout=2)
    assert time.monotonic() - started < 15
    assert isinstance(err.value, hs.WaitTimeoutError) and isinstance(err.value, TimeoutError)
    message = str(err.value)
    assert f"job 'failover-{mode}' did not finish within 2 s" in message
    assert "orders->produce[0]" in message
    # the executors stuck in the function were replaced; nothing runs on, nothing leaks
    assert {info["pid"] for info in session.executor_info} != pids
    assert session.running_tasks() == {i: 0 for i in range(session.slots)}
    assert_no_leaks(session)
    assert_all_rows(pipeline(session, mode).collect())


def test_job_timeout_in_yaml_is_the_default_of_collect(local_ray: None) -> None:
    with hs.Session(
        {"failover": {"job_timeout": "1 s"}, "shuffle": {"wait_timeout": 30}}, slots=2
    ) as s:
        job = s.job("yaml-timeout")
        stream = job.from_arrow(orders(1_000), name="orders", parallelism=1).map_batches(stuck)
        with pytest.raises(hs.JobTimeoutError, match="did not finish within 1 s"):
            stream.collect()
        # the session stays usable, and collect's own timeout overrides the YAML's: the
        # next job may wait for the stuck executor's replacement to start, which takes more
        # than 1 s on a loaded machine
        again = job.from_arrow(orders(1_000), name="again", parallelism=1)
        assert again.collect(timeout=120).table.num_rows == 1_000


def test_an_aggregation_after_a_kill_matches_pyarrow(session: hs.Session, tmp_path: Path) -> None:
    marker, release = tmp_path / "agg", tmp_path / "release"
    killer = kill_at(session, marker, release)
    job = session.job("agg")
    result = (
        job.from_arrow(orders(ROWS), name="orders", parallelism=2)
        .map_batches(gate(marker, release, at_call=2), name="produce")
        .key_by("customer", edge="by_customer", mode="hybrid-full")
        .aggregate({"cents": "sum", "order_id": "count"}, name="totals")
        .collect()
    )
    killer.join(5)
    expected = (
        orders(ROWS).group_by("customer").aggregate([("cents", "sum"), ("order_id", "count")])
    )
    got = result.table.sort_by("customer")
    want = expected.sort_by("customer").select(got.column_names)
    assert got.equals(want.cast(got.schema))
    assert pc.sum(got["order_id_count"]).as_py() == ROWS
    assert_no_leaks(session)


def slowly(table: pa.Table) -> pa.Table:
    time.sleep(0.05)
    return table


@pytest.mark.parametrize("mode", ["pipelined", "hybrid-full"])
def test_a_job_failing_for_good_stops_its_other_tasks_by_cancelling_them(
    session: hs.Session, mode: str
) -> None:
    pids = [info["pid"] for info in session.executor_info]
    with pytest.raises(hs.JobFailedError, match="operator 'consume'"):
        pipeline(session, mode, producer=slowly, consumer=always_fails).collect()
    # the slow producers were still running: the cancel stopped them (no executor had to
    # be replaced for it), before collect() returned
    assert session.running_tasks() == {i: 0 for i in range(session.slots)}
    assert [info["pid"] for info in session.executor_info] == pids
    assert_no_leaks(session)


def test_a_partition_store_lost_mid_read_has_its_partitions_recomputed(
    session: hs.Session, tmp_path: Path
) -> None:
    if session.config.shuffle.service != "external":
        pytest.skip("partition stores belong to the external service")
    started, release = tmp_path / "consumer-started", tmp_path / "release"
    job = session.job("store-lost")
    stream = (
        job.from_arrow(orders(ROWS), name="orders", parallelism=2)
        .key_by("customer", edge="by_customer", mode="blocking", partitions=2)
        .map_batches(gate(started, release, at_call=1), name="consume")
    )

    def kill_the_store() -> None:
        try:
            wait_until(started.exists, 60, "a consumer's first batch")
            for _, store in session.master.stores():
                ray.kill(store)
        finally:
            release.touch()

    thread = threading.Thread(target=kill_the_store, daemon=True)
    thread.start()
    result = stream.collect()
    thread.join(5)
    assert_all_rows(result)
    assert result.restarts >= 1
    assert attempts(result, "orders") != [0, 0]  # the store's partitions were produced again
    assert_no_leaks(session)


@pytest.mark.parametrize("service", SERVICES)
def test_a_result_lost_after_the_job_ended_is_recomputed_before_it_is_read(
    local_ray: None, service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The phase: every task finished, the driver is about to read the sink's result
    partitions, and their holder dies (the executor, or with the external service the
    store).  Buffers of 1 MiB: Ray inlines objects under 100 KiB into the refs the
    driver receives, and those would survive their owner."""
    from hybrid_shuffle.runtime import execution

    read = execution._read_result
    killed: list[str] = []
    settings = config(service)
    settings["shuffle"] = {**settings["shuffle"], "buffer_size": "1 MiB"}  # type: ignore[dict-item]
    with hs.Session(settings, slots=4) as session:

        def kill_then_read(reader: Any, deployer: Any, plan: Any) -> Any:
            if not killed:
                held = deployer.tracker.descriptor(deployer.job_id, "result", 0)
                handed = deployer.tracker._partitions[held.partition.partition_id].handed_over
                victim = (
                    session.executors[held.producer_executor]
                    if held.producer_executor >= 0
                    else held.location
                )
                killed.append(held.location_name)
                ray.kill(victim)
                # the phase: the result's buffers are gone with their owner (Ray may
                # still serve them from the local store for a moment after the death)
                refs = [b.ref for b in handed.buffers[0]]
                wait_until(lambda: is_lost(refs), 30, "the result's buffers lost")
            return read(reader, deployer, plan)

        monkeypatch.setattr(execution, "_read_result", kill_then_read)
        result = pipeline(session, "blocking").collect()
        assert killed
        assert_all_rows(result)
        assert result.restarts >= 1
        assert max(attempts(result, "consume")) >= 1
        assert_no_leaks(session)
    assert_closed_cleanly(session)
