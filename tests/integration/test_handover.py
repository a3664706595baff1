"""Partitions that finished before their consumers deployed reach them in the deployment
(range edges with their samples), without polls; spilled partitions and consumers that
started while their producers ran are polled."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest

import hybrid_shuffle as hs

from .conftest import assert_closed_cleanly, assert_no_leaks
from .data import orders


@pytest.fixture(scope="module")
def session(local_ray: None) -> Iterator[hs.Session]:
    config = {"shuffle": {"buffer_size": "256 KiB", "memory_budget": "8 MiB"}}  # 2 MiB a slot
    with hs.Session(config, slots=4) as s:
        yield s
    assert_closed_cleanly(s)


def polls(result: hs.JobResult, edge: str) -> list[int]:
    return [r.polls for t in result.tasks for r in t.reads if r.edge == edge]


def totals(session: hs.Session, table: pa.Table, mode: str) -> hs.JobResult:
    job = session.job(f"handover-{mode}")
    return (
        job.from_arrow(table, name="orders", parallelism=2)
        .key_by("customer", edge="by_customer", mode=mode, partitions=2)
        .aggregate({"cents": "sum"}, name="totals", combine=False)
        .sort("cents_sum", edge="to_sort", mode=mode, partitions=2)
        .collect()
    )


@pytest.mark.parametrize("mode", ["blocking", "hybrid-selective"])
def test_partitions_finished_before_their_consumers_start_are_read_without_polling(
    session: hs.Session, mode: str
) -> None:
    table = orders(50_000)
    result = totals(session, table, mode)
    want = table.group_by("customer").aggregate([("cents", "sum")])
    assert result.table.num_rows == want.num_rows
    assert result.table.column("cents_sum").to_pylist() == sorted(
        want.column("cents_sum").to_pylist(), key=lambda v: (v is None, v)
    )
    if mode == "blocking":  # the buffers (and the range samples) came with the deployment
        assert polls(result, "by_customer") == [0, 0]
        assert polls(result, "to_sort") == [0, 0]
    else:  # the consumers started with their producers: they poll
        assert all(n > 0 for n in polls(result, "by_customer"))
    assert result.edges["by_customer"].rows == table.num_rows
    assert_no_leaks(session)


def test_a_spilled_blocking_partition_is_polled_and_read_whole(session: hs.Session) -> None:
    table = orders(400_000)  # 13 MB: about 3x what each producer may keep in memory
    result = totals(session, table, "blocking")
    assert result.edges["by_customer"].spilled_bytes > 0
    assert any(n > 0 for n in polls(result, "by_customer"))
    want = table.group_by("customer").aggregate([("cents", "sum")])
    assert result.table.num_rows == want.num_rows
    assert_no_leaks(session)
