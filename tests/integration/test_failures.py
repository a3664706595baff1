"""Bad input and dead actors end in one clear error, never a hang, and nothing leaks."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest
import ray

import hybrid_shuffle as hs

from .conftest import assert_closed_cleanly, assert_no_leaks, wait_until
from .data import orders

CONFIG = {"parallelism": 2, "shuffle": {"buffer_size": "64 KiB", "wait_timeout": 30}}


@pytest.fixture(scope="module")
def session(local_ray: None) -> Iterator[hs.Session]:
    with hs.Session(CONFIG, slots=4) as s:
        yield s
    assert_closed_cleanly(s)


def boom(batch: pa.Table) -> pa.Table:
    raise ValueError("bad row in batch")


@pytest.mark.parametrize("mode", ["pipelined", "hybrid-selective", "blocking"])
def test_user_error_names_the_task_and_the_cause(session: hs.Session, mode: str) -> None:
    job = session.job("boom")
    stream = (
        job.from_arrow(orders(10_000), name="orders")
        .key_by("customer", edge="by_customer", mode=mode)
        .map_batches(boom, name="explode")
    )
    with pytest.raises(hs.JobFailedError) as err:
        stream.collect()
    assert str(err.value).startswith("task 'explode[")
    assert "ValueError: bad row in batch" in str(err.value)
    assert_no_leaks(session)


def test_missing_column_at_run_time_is_named(session: hs.Session) -> None:
    job = session.job("missing")
    stream = (
        job.from_arrow(orders(1_000), name="orders")
        .map_batches(lambda t: t.drop_columns(["cents"]), name="drop")
        .key_by("customer", edge="by_customer")
        .aggregate({"cents": "sum"}, name="totals")
    )
    with pytest.raises(hs.HybridShuffleError, match="'cents'"):
        stream.collect()
    assert_no_leaks(session)


def test_missing_column_known_from_the_schema_fails_before_running(session: hs.Session) -> None:
    job = session.job("missing-early")
    stream = job.from_arrow(orders(100), name="orders").select("custmer")
    with pytest.raises(hs.PlanError, match="custmer"):
        stream.explain()


def test_join_key_type_mismatch_is_named(session: hs.Session) -> None:
    job = session.job("types")
    left = job.from_arrow(pa.table({"k": [1, 2, 3]}), name="left")
    right = job.from_arrow(pa.table({"k": ["1", "2"], "x": [1, 2]}), name="right")
    with pytest.raises(hs.PlanError, match="'k'"):
        left.join(right, on="k").explain()


def test_an_executor_killed_between_jobs_is_replaced_before_probes_and_the_next_job(
    local_ray: None,
) -> None:
    with hs.Session(CONFIG, slots=2) as session:
        job = session.job("after-kill")
        first = (
            job.from_arrow(orders(10_000), name="orders")
            .key_by("customer")
            .aggregate({"cents": "sum"})
        )
        expected = first.collect().table.sort_by("customer")
        victim = session.executors[0]
        ray.kill(victim)
        wait_until(lambda: session.pool.dead() == [0], 30, "Ray reports the executor dead")
        assert_no_leaks(session)  # the probes replace it instead of raising ActorDiedError
        assert session.executors[0] is not victim and len(session.executors) == 2
        again = first.collect()
        assert again.table.sort_by("customer").equals(expected)
        assert again.restarts == 0
    assert_closed_cleanly(session)


class _Pinned:
    def ping(self) -> int:
        return 1


def test_an_executor_pinned_to_a_node_that_is_gone_is_lost_not_a_ray_traceback(
    local_ray: None,
) -> None:
    """An actor pinned (hard affinity) to a node removed before it started can never run,
    and Ray says so with ``ActorUnschedulableError``, not a ``RayActorError``: a task on
    it is an ``ExecutorLostError``, as on a dead one, which the scheduler replaces and
    recomputes; a probe of it answers None, as a dead one's does."""
    from hybrid_shuffle.actor_process import start_pinned
    from hybrid_shuffle.runtime.transport import RayTransport

    actor = start_pinned(_Pinned, "hs-test-unplaceable", "ab" * 28, 1)
    try:
        with pytest.raises(hs.ExecutorLostError, match=r"^executor 3 died while running task 't'"):
            RayTransport().report(actor.ping.remote(), 30, 3, "t")
        assert RayTransport.answers([actor.ping.remote()], 30) == [None]
    finally:
        ray.kill(actor)
