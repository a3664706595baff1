"""The external partition store ("external"): partitions live in one store actor per
node, not in the executors, give pyarrow's rows in every mode, spill past the store's
memory budget, and a store that dies is reported once and replaced.

Phases are gated on marker files, never on sleeps; every wait is bounded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import ray

import hybrid_shuffle as hs
from hybrid_shuffle.shuffle.api import (
    PartitionDescriptor,
    PartitionId,
    PollRequest,
    ProducerDescriptor,
)
from hybrid_shuffle.shuffle.external.service import ExternalShuffleMaster
from hybrid_shuffle.shuffle.partition_type import partition_type
from hybrid_shuffle.shuffle.routing import Partitioner, PartitionerKind

from .conftest import assert_closed_cleanly, assert_no_leaks, spill_files, wait_until
from .data import customers, orders

MODES = ["pipelined", "blocking", "hybrid-selective", "hybrid-full"]
BUDGET = 4 * 2**20  # the store's memory budget: the spill test writes well past it
CREDITS = 2
CONFIG: dict[str, Any] = {
    "parallelism": 2,
    "shuffle": {
        "service": "external",
        "buffer_size": "64 KiB",
        "wait_timeout": 30,
        "memory_budget": BUDGET,
        "credits": CREDITS,
    },
    "failover": {"max_attempts": 1},
}
PHASE_TIMEOUT = 30.0


@pytest.fixture(scope="module")
def session(local_ray: None) -> Iterator[hs.Session]:
    with hs.Session(CONFIG, slots=4) as s:
        yield s
    assert_closed_cleanly(s)


@pytest.fixture(scope="module")
def data() -> tuple[pa.Table, pa.Table]:
    return orders(50_000), customers()


def external(session: hs.Session) -> ExternalShuffleMaster:
    master = session.master.master("external")
    assert isinstance(master, ExternalShuffleMaster)
    return master


def assert_stores_hold_nothing(session: hs.Session) -> None:
    """Every store released everything of the finished jobs (partitions and refs)."""
    session.master.wait_for_releases(30)
    stores = external(session).stores()
    assert stores, "no partition store was started"
    for name, store in stores:
        assert name.startswith(f"{session.session_id}-store-")
        assert ray.get(store.partitions_occupying_local_resources.remote(), timeout=30) == set()
        wait_until(
            lambda s=store: ray.get(s.owned_objects.remote(), timeout=30) == 0,
            10.0,
            f"{name} released its refs",
        )


def assert_clean(session: hs.Session) -> None:
    assert_no_leaks(session)  # executors: no partition, no ref; no spill file
    assert_stores_hold_nothing(session)


# -- the same rows as pyarrow, in every mode ---------------------------------------------


def aggregation(session: hs.Session, table: pa.Table, mode: str) -> hs.Stream:
    job = session.job(f"ext-agg-{mode}")
    return (
        job.from_arrow(table, name="orders")
        .key_by("customer", edge="by_customer", mode=mode)
        .aggregate({"cents": ["sum", "count", "max"]}, name="totals")
    )


@pytest.mark.parametrize("mode", MODES)
def test_hash_aggregation_gives_pyarrows_rows(
    session: hs.Session, data: tuple[pa.Table, pa.Table], mode: str
) -> None:
    table = data[0]
    result = aggregation(session, table, mode).collect()
    want = (
        table.group_by("customer")
        .aggregate([("cents", "sum"), ("cents", "count"), ("cents", "max")])
        .sort_by("customer")
    )
    got = result.table.select(want.column_names).sort_by("customer")
    assert got.num_rows > 10_000
    assert got.equals(want)
    assert result.edges["by_customer"].mode == mode
    assert_clean(session)


@pytest.mark.parametrize("descending", [False, True])
def test_a_sort_on_a_string_key_gives_pyarrows_order(
    session: hs.Session, data: tuple[pa.Table, pa.Table], descending: bool
) -> None:
    """A range edge on a string key through the store: producers write their rows as
    they came (not sorted), each of 3 consumers keeps its key interval's rows of every
    buffer, and the result is pyarrow's order (nulls last)."""
    table = data[0]
    job = session.job(f"ext-sort-{descending}")
    result = (
        job.from_arrow(table, name="orders", parallelism=2)
        .sort("customer", descending=descending, edge="to_sort", partitions=3)
        .collect()
    )
    order = "descending" if descending else "ascending"
    want = table.sort_by([("customer", order)])
    assert result.table.column("customer").equals(want.column("customer"))
    assert sorted(result.table.column("order_id").to_pylist()) == list(range(table.num_rows))
    assert_clean(session)


def join_reference(left: pa.Table, right: pa.Table) -> pa.Table:
    joined = left.join(right, keys="customer", join_type="inner")
    return joined.select(sorted(joined.column_names)).sort_by("order_id")


@pytest.mark.parametrize("mode", MODES)
def test_join_gives_pyarrows_rows(
    session: hs.Session, data: tuple[pa.Table, pa.Table], mode: str
) -> None:
    left, right = data
    job = session.job(f"ext-join-{mode}")
    o = job.from_arrow(left, name="orders")
    c = job.from_arrow(right, name="customers")
    result = o.join(c, on="customer", edge="by_cust", mode=mode).collect()
    want = join_reference(left, right)
    got = result.table.select(want.column_names).sort_by("order_id")
    assert got.num_rows > 40_000
    assert got.equals(want)
    assert_clean(session)


def wait_for_file(path: Path) -> None:
    """A phase gate inside an executor: bounded, and names the phase."""
    deadline = time.monotonic() + PHASE_TIMEOUT
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"phase not reached within {PHASE_TIMEOUT:.0f} s: {path.name}")
        time.sleep(0.01)


def running_tasks(session: hs.Session) -> int:
    """Tasks running in the executors now (asked of the actors directly: safe while the
    main thread runs a job)."""
    return sum(ray.get([e.running_tasks.remote() for e in session.executors], timeout=30))


ROWS = 200_000  # 3.2 MB: 50 buffers of 64 KiB


def stalled_pipelined_job(
    session: hs.Session, name: str, consumer: Any, counter: Path | None = None
) -> hs.Stream:
    """One producer, one consumer over a pipelined edge; the producer appends the row
    count of every batch it passes on to ``counter``, if given."""

    def count(batch: pa.Table) -> pa.Table:
        if counter is not None:
            with open(counter, "a") as f:
                f.write(f"{batch.num_rows}\n")
        return batch

    table = pa.table({"k": np.arange(ROWS), "v": np.ones(ROWS)})
    return (
        session.job(name)
        .from_arrow(table, name="numbers", parallelism=1)
        .map_batches(count, name="count")
        .rebalance(edge="to_slow", mode="pipelined", partitions=1)
        .map_batches(consumer, name="slow")
    )


def rows_in(counter: Path) -> int:
    return sum(int(line) for line in counter.read_text().split()) if counter.exists() else 0


def test_pipelined_edge_keeps_credit_backpressure_across_the_store(
    session: hs.Session, tmp_path: Path
) -> None:
    """While the consumer stalls on its first batch, its producer is held at the credit
    bound: it has passed on only a few buffers' worth of its input (not all of it, as it
    would with unbounded sends to the store), the store's partition never held more than
    ``credits`` unread buffers, and nothing spilled."""
    stalled, go, counter = tmp_path / "stalled", tmp_path / "go", tmp_path / "rows"

    def stall_once(batch: pa.Table) -> pa.Table:
        if not stalled.exists():
            stalled.touch()
            wait_for_file(go)
        return batch.slice(0, 0)

    seen: dict[str, int] = {}

    def probe() -> None:
        try:
            wait_until(stalled.exists, PHASE_TIMEOUT, "the consumer's first batch")
            time.sleep(1.0)  # unbounded, the producer would pass on all 50 buffers meanwhile
            seen["rows"] = rows_in(counter)
        finally:
            go.touch()

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    result = stalled_pipelined_job(session, "ext-credit", stall_once, counter).collect()
    prober.join(PHASE_TIMEOUT)
    assert 0 < seen["rows"] < ROWS // 4  # a handful of 4,000-row buffers, not all 50
    assert rows_in(counter) == ROWS
    edge = result.edges["to_slow"]
    assert edge.buffers > 20
    assert edge.peak_backlog_buffers <= CREDITS
    assert edge.spilled_bytes == 0
    assert edge.blocked_seconds > 0
    assert_clean(session)


def test_a_failing_consumer_ends_a_producer_waiting_for_credit_in_the_store(
    session: hs.Session, tmp_path: Path
) -> None:
    """The consumer fails while its producer waits for credit inside the store: the job
    fails with the user's error, the producer's wait ends (its task stops long before
    ``wait_timeout``) and the store keeps nothing."""
    stalled, go = tmp_path / "stalled", tmp_path / "go"

    def fail_once_stalled(batch: pa.Table) -> pa.Table:
        stalled.touch()
        wait_for_file(go)
        raise ValueError("bad batch")

    def release() -> None:
        try:
            wait_until(stalled.exists, PHASE_TIMEOUT, "the consumer's first batch")
            time.sleep(0.5)  # the producer reaches its credit bound meanwhile
        finally:
            go.touch()

    threading.Thread(target=release, daemon=True).start()
    with pytest.raises(hs.JobFailedError, match="ValueError: bad batch"):
        stalled_pipelined_job(session, "ext-fail", fail_once_stalled).collect()
    wait_until(lambda: running_tasks(session) == 0, 10.0, "every task of the failed job ended")
    assert_clean(session)


# -- where partitions live ---------------------------------------------------------------


def test_partitions_live_in_the_store_not_in_the_executors(
    session: hs.Session, data: tuple[pa.Table, pa.Table], tmp_path: Path
) -> None:
    """While a blocking edge's consumer runs (so its producers have finished), the edge's
    partitions are in the store and no executor holds any."""
    reading, go = tmp_path / "reading", tmp_path / "go"

    def gate(batch: pa.Table) -> pa.Table:
        reading.touch()
        wait_for_file(go)
        return batch

    seen: dict[str, Any] = {}

    def probe() -> None:
        try:
            wait_until(reading.exists, PHASE_TIMEOUT, "the consumer's first batch")
            seen["executors"] = [
                ray.get(e.partitions_occupying_local_resources.remote(), timeout=30)
                for e in session.executors
            ]
            seen["stores"] = [
                ray.get(s.partitions_occupying_local_resources.remote(), timeout=30)
                for _, s in external(session).stores()
            ]
        finally:
            go.touch()

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    job = session.job("ext-where")
    result = (
        job.from_arrow(data[0], name="orders")
        .key_by("customer", edge="to_store", mode="blocking")
        .map_batches(gate, name="gate")
        .collect()
    )
    prober.join(PHASE_TIMEOUT)
    assert result.table.num_rows == data[0].num_rows
    assert seen["executors"] == [set()] * session.slots
    held = set().union(*seen["stores"])
    assert len([p for p in held if "/to_store/" in p]) == 2  # one per producer subtask
    assert_clean(session)


def test_store_spills_past_its_memory_budget_and_leaves_no_file(
    session: hs.Session, data: tuple[pa.Table, pa.Table]
) -> None:
    left = orders(300_000, seed=3)
    right = data[1]
    job = session.job("ext-spill")
    o = job.from_arrow(left, name="orders")
    c = job.from_arrow(right, name="customers")
    result = o.join(c, on="customer", edge="by_cust", mode="blocking").collect()
    assert result.edges["by_cust.left"].bytes > 2 * BUDGET
    assert result.spilled_bytes > 0
    want = join_reference(left, right)
    assert result.table.select(want.column_names).sort_by("order_id").equals(want)
    # the stores delete a released partition's file when the release reaches them;
    # releases are sent without waiting, so wait for them before looking at the disk
    session.master.wait_for_releases(30)
    assert spill_files(session) == []
    assert_clean(session)


def test_a_killed_store_is_reported_once_and_replaced(
    session: hs.Session, data: tuple[pa.Table, pa.Table]
) -> None:
    aggregation(session, data[0], "blocking").collect()  # the store exists
    master = external(session)
    # a partition registered but not yet produced: the store holds it when it dies
    pid = PartitionId(f"ext-lost/{time.time_ns()}/0")
    descriptor = PartitionDescriptor(
        pid, "ext-lost", "e", 0, 1, 1, partition_type("blocking"), Partitioner(PartitionerKind.HASH)
    )
    registered = master.register_partition_with_producer(descriptor, ProducerDescriptor(-1, None))
    assert registered.producer_executor == -1
    assert registered.location_name.startswith("partition store on node ")
    [(old_name, old)] = master.stores()
    assert registered.location == old
    ray.kill(old, no_restart=True)

    lost: list[PartitionId] = []

    def reported() -> bool:
        lost.extend(master.lost_partitions())
        return bool(lost)

    wait_until(reported, 30.0, "the master saw the store die")
    assert lost == [pid]
    assert master.lost_partitions() == []  # reported once
    assert master.stores() == []  # forgotten: the next registration starts a fresh one

    result = aggregation(session, data[0], "hybrid-full").collect()
    assert result.table.num_rows > 10_000
    [(new_name, new)] = master.stores()
    assert new_name != old_name and new_name.startswith(old_name)
    assert ray.get(new.ready.remote(), timeout=30)["pid"] > 0
    assert_clean(session)


def test_a_poll_of_an_unknown_or_released_partition_is_answered_not_raised(
    session: hs.Session, data: tuple[pa.Table, pa.Table]
) -> None:
    aggregation(session, data[0], "blocking").collect()
    [(_, store)] = external(session).stores()
    pid = PartitionId("ext-none/e/0")
    request = PollRequest(pid, 0, 0, 0, 4, 0.01)
    [early] = ray.get(store.poll_many.remote([request], 0.01), timeout=30)
    assert early.error is None and early.buffers == [] and not early.end_of_partition
    ray.get(store.release_partitions.remote([pid]), timeout=30)
    [late] = ray.get(store.poll_many.remote([request], 0.01), timeout=30)
    assert late.error == f"partition {pid} was already released"


# -- a service per edge ------------------------------------------------------------------


def test_one_edge_on_the_store_in_an_executor_local_session(
    local_ray: None, data: tuple[pa.Table, pa.Table]
) -> None:
    config = {
        "parallelism": 2,
        "shuffle": {"buffer_size": "64 KiB", "wait_timeout": 30},
        "edges": {"by_cust.left": {"service": "external"}},
    }
    left, right = data
    with hs.Session(config, slots=2) as s:
        job = s.job("per-edge")
        o = job.from_arrow(left, name="orders")
        c = job.from_arrow(right, name="customers")
        joined = o.join(c, on="customer", edge="by_cust", mode="hybrid-selective")
        stream = joined.key_by("segment", edge="by_segment", mode="blocking").aggregate(
            {"cents": ["sum"]}, name="totals"
        )
        lines = {line.split()[0]: line for line in stream.explain().splitlines() if line}
        assert "service external" in lines["by_cust.left"]
        # one join reads from both services; explain names the service of every edge
        assert "service executor-local" in lines["by_cust.right"]
        assert "service executor-local" in lines["by_segment"]
        result = stream.collect()
        want = (
            left.join(right, keys="customer", join_type="inner")
            .group_by("segment")
            .aggregate([("cents", "sum")])
            .sort_by("segment")
        )
        assert result.table.select(want.column_names).sort_by("segment").equals(want)
        assert len(external(s).stores()) == 1
        assert_clean(s)
    assert_closed_cleanly(s)


def test_one_executor_local_edge_in_an_external_session(
    local_ray: None, data: tuple[pa.Table, pa.Table]
) -> None:
    """The reverse: a pipelined executor-local edge while the executors' default service
    is external (a poll that reaches an executor before its producer created the
    partition is answered "nothing yet", as the executor-local service answers it)."""
    config = {
        **CONFIG,
        "edges": {"by_customer": {"service": "executor-local", "mode": "pipelined"}},
    }
    table = data[0]
    with hs.Session(config, slots=4) as s:
        stream = aggregation(s, table, "pipelined")
        assert "service executor-local" in stream.explain()
        result = stream.collect()
        want = (
            table.group_by("customer")
            .aggregate([("cents", "sum"), ("cents", "count"), ("cents", "max")])
            .sort_by("customer")
        )
        assert result.table.select(want.column_names).sort_by("customer").equals(want)
        assert_clean(s)  # the result partitions went to the store
    assert_closed_cleanly(s)
