"""Where tasks run on real executors: groups apart, balanced, co-located together."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pyarrow as pa
import pytest

import hybrid_shuffle as hs

from .conftest import assert_closed_cleanly, assert_no_leaks
from .data import orders

MODES = ["pipelined", "blocking", "hybrid-selective", "hybrid-full"]


@pytest.fixture(scope="module")
def session(local_ray: None) -> Iterator[hs.Session]:
    with hs.Session({"parallelism": 2, "shuffle": {"buffer_size": "64 KiB"}}, slots=4) as s:
        yield s
    assert_closed_cleanly(s)


def executors(result: hs.JobResult, prefix: str) -> dict[int, int]:
    """Subtask -> the executor it ran on, for the vertices whose name starts so."""
    return {r.subtask: r.executor_index for r in result.tasks if r.vertex.startswith(prefix)}


def at_once(result: hs.JobResult) -> dict[int, int]:
    """Per executor, the most tasks of the job that ran on it at the same time."""
    events: dict[int, list[tuple[float, int]]] = {}
    for r in result.tasks:
        events.setdefault(r.executor_index, []).extend([(r.started_at, 1), (r.finished_at, -1)])
    most: Counter[int] = Counter()
    for executor, points in events.items():
        running = 0
        for _, step in sorted(points, key=lambda p: (p[0], p[1])):  # an end before a start
            running += step
            most[executor] = max(most[executor], running)
    return dict(most)


@pytest.mark.parametrize("mode", MODES)
def test_three_narrow_sources_a_union_and_an_aggregate_run_at_most_two_tasks_a_slot_at_once(
    session: hs.Session, mode: str
) -> None:
    job = session.job(f"spread-{mode}")
    table = orders(3_000)
    parts = [
        job.from_arrow(table.slice(i * 1000, 1000), name=f"s{i}", parallelism=1) for i in range(3)
    ]
    union = parts[0].union(*parts[1:])
    totals = union.key_by("customer", mode=mode, partitions=4).aggregate({"amount": "sum"})
    result = totals.collect()
    assert max(at_once(result).values()) <= 2, at_once(result)  # 8 tasks on 4 slots
    assert result.table.num_rows == table.group_by("customer").aggregate([]).num_rows
    assert_no_leaks(session)


def test_slot_sharing_groups_never_share_an_executor(session: hs.Session) -> None:
    job = session.job("groups")
    rows = job.from_arrow(orders(4_000), name="orders").slot_sharing_group("ingest")
    totals = rows.key_by("customer", mode="pipelined").aggregate({"amount": "sum"}, name="totals")
    result = totals.slot_sharing_group("aggregate").collect()
    ingest, aggregate = executors(result, "orders"), executors(result, "totals")
    assert len(ingest) == len(aggregate) == 2
    assert not set(ingest.values()) & set(aggregate.values())
    expected = orders(4_000).group_by("customer").aggregate([("amount", "sum")])
    assert result.table.num_rows == expected.num_rows
    assert_no_leaks(session)


def test_co_located_operators_run_each_subtask_on_one_executor(session: hs.Session) -> None:
    job = session.job("co-located")
    left = (
        job.from_arrow(orders(2_000), name="left")
        .key_by("customer")
        .aggregate({"amount": "sum"}, name="left_totals")
    )
    right = (
        job.from_arrow(orders(2_000, seed=5), name="right")
        .key_by("customer")
        .aggregate({"cents": "sum"}, name="right_totals")
    )
    right.co_locate_with(left)
    result = left.join(right, on="customer", mode="blocking").collect()
    assert executors(result, "left_totals") == executors(result, "right_totals")
    assert isinstance(result.table, pa.Table)
    assert_no_leaks(session)
