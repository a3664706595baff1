"""Pipelined producers stop at their credit bound; hybrid ones spill past the budget."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pytest

import hybrid_shuffle as hs

from .conftest import assert_closed_cleanly, assert_no_leaks
from .data import orders

BUFFER = 64 * 2**10
BUDGET = 1 * 2**20
CREDITS = 2


@pytest.fixture(scope="module")
def session(local_ray: None) -> Iterator[hs.Session]:
    config = {
        "parallelism": 2,
        "shuffle": {
            "buffer_size": BUFFER,
            "memory_budget": BUDGET,
            "credits": CREDITS,
        },
    }
    with hs.Session(config, slots=2) as s:
        yield s
    assert_closed_cleanly(s)


class StallOnce:
    """A consumer that stops for ``seconds`` on its first batch, then keeps up."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.stalled = False

    def __call__(self, batch: pa.Table) -> pa.Table:
        if not self.stalled:
            self.stalled = True
            time.sleep(self.seconds)
        return batch.slice(0, 0)


def stalled_job(session: hs.Session, mode: str) -> hs.JobResult:
    table = pa.table({"k": np.arange(400_000), "v": np.ones(400_000)})  # 6.4 MB, 100 buffers
    job = session.job(f"stall-{mode}")
    return (
        job.from_arrow(table, name="numbers", parallelism=1)
        .rebalance(edge="to_slow", mode=mode, partitions=1)
        .map_batches(StallOnce(2.0), name="slow")
        .collect()
    )


def test_pipelined_producer_stops_at_its_credit_bound(session: hs.Session) -> None:
    edge = stalled_job(session, "pipelined").edges["to_slow"]
    assert edge.buffers > 50
    assert edge.peak_backlog_buffers <= CREDITS
    assert edge.peak_memory_bytes <= (CREDITS + 1) * BUFFER * 1.5
    assert edge.spilled_bytes == 0
    assert edge.blocked_seconds > 1.0  # it waited out the stall
    assert_no_leaks(session)


def test_hybrid_producer_does_not_stop_and_spills_past_the_budget(session: hs.Session) -> None:
    edge = stalled_job(session, "hybrid-selective").edges["to_slow"]
    assert edge.blocked_seconds == 0
    assert edge.peak_backlog_buffers > 50  # wrote everything while the consumer stalled
    assert edge.peak_memory_bytes <= BUDGET // 2  # the executor's share of the budget
    assert edge.spilled_bytes > 3 * BUDGET
    assert_no_leaks(session)


@pytest.mark.parametrize("mode", ["blocking", "hybrid-selective", "hybrid-full"])
def test_shuffling_three_times_the_budget_completes_and_reports_spill(
    session: hs.Session, mode: str
) -> None:
    table = orders(300_000)
    assert table.nbytes > 3 * BUDGET
    job = session.job(f"big-{mode}")
    result = (
        job.from_arrow(table, name="orders", parallelism=2)
        .key_by("customer", edge="by_customer", mode=mode)
        .aggregate({"cents": ["sum"]}, name="totals")
        .collect()
    )
    want = table.group_by("customer").aggregate([("cents", "sum")]).sort_by("customer")
    assert result.table.sort_by("customer").column("cents_sum").equals(want.column("cents_sum"))
    assert result.edges["by_customer"].bytes > 3 * BUDGET
    assert result.spilled_bytes > 0
    assert_no_leaks(session)
