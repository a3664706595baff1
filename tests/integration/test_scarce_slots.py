"""Two slots: blocking and hybrid jobs of 8 tasks run; pipelined ones fail before running."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pyarrow as pa
import pytest

import hybrid_shuffle as hs

from .conftest import assert_closed_cleanly, assert_no_leaks
from .data import orders


@pytest.fixture(scope="module")
def session(local_ray: None) -> Iterator[hs.Session]:
    config = {"parallelism": 4, "shuffle": {"buffer_size": "64 KiB", "memory_budget": "8 MiB"}}
    with hs.Session(config, slots=2) as s:
        yield s
    assert_closed_cleanly(s)


def eight_tasks(session: hs.Session, table: pa.Table, mode: str) -> hs.Stream:
    job = session.job(f"eight-{mode}")
    source = job.from_arrow(table, name="orders", parallelism=4)
    return source.key_by("customer", edge="by_customer", mode=mode, partitions=4).aggregate(
        {"cents": ["sum", "count"]}, name="totals"
    )


@pytest.mark.parametrize("mode", ["blocking", "hybrid-selective", "hybrid-full"])
def test_eight_tasks_complete_on_two_slots(session: hs.Session, mode: str) -> None:
    table = orders(50_000)
    result = eight_tasks(session, table, mode).collect()
    assert len(result.tasks) == 8
    want = table.group_by("customer").aggregate([("cents", "sum"), ("cents", "count")])
    got = result.table.sort_by("customer")
    assert got.column("cents_sum").equals(want.sort_by("customer").column("cents_sum"))
    assert_no_leaks(session)


def test_pipelined_job_needing_more_slots_fails_before_running(session: hs.Session) -> None:
    stream = eight_tasks(session, orders(1_000), "pipelined")
    with pytest.raises(hs.SlotsExceededError):
        stream.explain()  # known from the plan alone: nothing is deployed
    with pytest.raises(hs.SlotsExceededError) as err:
        stream.collect()
    assert "needs 4 slots at once but the session has 2" in str(err.value)
    assert "set edges by_customer to hybrid-selective or blocking" in str(err.value)
    assert_no_leaks(session)


def slow_source(batch: pa.Table) -> pa.Table:
    time.sleep(0.05)
    return batch


def timeline(session: hs.Session, mode: str) -> hs.EdgeMetrics:
    job = session.job(f"timeline-{mode}")
    source = job.from_arrow(orders(40_000), name="orders", parallelism=1)
    result = (
        source.map_batches(slow_source, name="slow")
        .rebalance(edge="to_sink", mode=mode, partitions=1)
        .collect()
    )
    return result.edges["to_sink"]


@pytest.mark.parametrize("mode", ["hybrid-selective", "hybrid-full"])
def test_hybrid_consumer_reads_before_its_producer_finished(session: hs.Session, mode: str) -> None:
    edge = timeline(session, mode)
    first = edge.first_buffer_at[0][0]
    assert first < edge.producer_finished_at[0] - 0.2
    assert edge.consumed_before_produced()
    assert_no_leaks(session)


def test_blocking_consumer_never_reads_before_its_producer_finished(session: hs.Session) -> None:
    edge = timeline(session, "blocking")
    assert edge.first_buffer_at[0][0] >= edge.producer_finished_at[0]
    assert not edge.consumed_before_produced()


@pytest.mark.parametrize("descending", [False, True])
def test_global_sort_keeps_nan_and_null_keys_last(session: hs.Session, descending: bool) -> None:
    values = [3.0, float("nan"), None, -1.0, 7.5, None, float("nan"), 0.0] * 500
    job = session.job("nan-sort")
    got = (
        job.from_arrow(pa.table({"x": values}), name="xs", parallelism=2)
        .sort("x", descending=descending, edge="to_sort", partitions=3)
        .to_arrow()
        .column("x")
        .to_pylist()
    )
    assert len(got) == len(values)
    numbers = [v for v in got if v is not None and v == v]
    assert numbers == sorted(numbers, reverse=descending)
    assert got[: len(numbers)] == numbers  # every NaN and null after the numbers
    assert sum(v is None for v in got) == 1000 and sum(v != v for v in got if v) == 1000
