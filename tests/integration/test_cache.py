"""Caches across jobs (FLIP-205): filled once, read by later runs, recomputed when lost.

Recomputation is made visible by a pass-through function upstream of the cache
that appends a line to a file per batch: a run that reads the cache adds none.
Every result is compared row for row with pyarrow, and every test ends with the
session's leak check once its caches are invalidated.
"""

from __future__ import annotations

import gc
import runpy
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import ray

import hybrid_shuffle as hs

from .conftest import assert_closed_cleanly, assert_no_leaks, wait_until
from .data import customers, orders
from .phases import gate, kill_at

MODES = ["pipelined", "blocking", "hybrid-selective", "hybrid-full"]
ROWS = 60_000


def config(service: str = "executor-local", **shuffle: object) -> dict[str, object]:
    return {
        "parallelism": 2,
        "shuffle": {"service": service, "buffer_size": "64 KiB", "wait_timeout": 30, **shuffle},
        "failover": {"max_attempts": 3, "backoff": "50 ms"},
    }


@pytest.fixture(scope="module")
def session(local_ray: None) -> Iterator[hs.Session]:
    with hs.Session(config(), slots=2) as s:
        yield s
    assert_closed_cleanly(s)


def counted(path: Path) -> Callable[[pa.Table], pa.Table]:
    """A pass-through that appends a line to ``path`` per batch it sees."""
    name = str(path)

    def fn(table: pa.Table) -> pa.Table:
        with open(name, "a") as f:
            f.write(f"{table.num_rows}\n")
        return table

    return fn


def calls(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def per_customer(table: pa.Table) -> pa.Table:
    """What the cached stream holds, computed by pyarrow in one process."""
    grouped = table.group_by("customer").aggregate([("amount", "sum"), ("order_id", "count")])
    return grouped.sort_by("customer")


def prepared(
    session: hs.Session, log: Path, mode: str = "blocking", name: str | None = None
) -> hs.CachedStream:
    """Orders per customer (hash-partitioned on ``customer``), cached."""
    job = session.job(f"prepare-{mode}")
    rows = job.from_arrow(orders(ROWS), name="orders").map_batches(counted(log), name="count")
    agg = rows.key_by("customer", edge="by_customer", mode=mode).aggregate(
        {"amount": "sum", "order_id": "count"}, name="per_customer"
    )
    return agg.cache(name)


def equal(result: pa.Table, expected: pa.Table, by: str = "customer") -> None:
    got = result.select(expected.column_names).sort_by(by)
    assert got.num_rows == expected.num_rows
    for column in expected.column_names:
        a, b = got.column(column), expected.sort_by(by).column(column)
        if pa.types.is_floating(b.type):
            assert pc.all(pc.less(pc.abs(pc.subtract(a, b)), 1e-6)).as_py() in (True, None)
            assert a.null_count == b.null_count
        else:
            assert a.equals(b), column


def assert_recomputed(
    session: hs.Session, cached: hs.CachedStream, result: hs.JobResult, log: Path, once: int
) -> None:
    """The run filled ``cached`` again from its lineage (one more pass upstream, ``once``
    calls) and its rows equal pyarrow's; invalidated, the cache leaves nothing behind."""
    equal(result.table, per_customer(orders(ROWS)))
    assert result.caches == {cached.name: "recomputed"}
    assert calls(log) == 2 * once
    cached.invalidate()
    assert_no_leaks(session)


@pytest.mark.parametrize("mode", MODES)
def test_a_cache_filled_once_is_read_by_a_new_branch_and_by_another_job(
    session: hs.Session, tmp_path: Path, mode: str
) -> None:
    log = tmp_path / "calls"
    cached = prepared(session, log, mode, name=f"per-customer-{mode}")
    expected = per_customer(orders(ROWS))
    assert f"fills cache 'per-customer-{mode}' (empty)" in cached.explain()

    first = cached.collect()
    equal(first.table, expected)
    assert first.caches == {f"per-customer-{mode}": "filled"}
    computed = calls(log)
    assert computed > 0

    # a new branch of the same job, with an exchange of this mode after the read
    big = cached.filter(pc.field("order_id_count") > 3).rebalance(mode=mode)
    assert "reads cache" in big.explain()
    branch = big.collect()
    equal(branch.table, expected.filter(pc.field("order_id_count") > 3))
    assert branch.caches == {f"per-customer-{mode}": "read"}

    # another job of the session
    other = session.job(f"report-{mode}")
    top = other.from_cache(cached).sort("amount_sum", descending=True, mode=mode)
    report = top.collect()
    amounts = report.table.column("amount_sum")
    valid = amounts.drop_null().to_numpy()
    assert (valid[:-1] >= valid[1:]).all()  # descending (float sums differ in the last bits)
    assert amounts.slice(len(valid)).null_count == len(amounts) - len(valid)  # nulls last
    equal(report.table, expected)
    assert report.caches == {f"per-customer-{mode}": "read"}

    assert calls(log) == computed  # neither read ran the lineage again
    (info,) = [c for c in session.caches() if c.name == f"per-customer-{mode}"]
    assert (info.state, info.rows, info.hits, info.fills) == ("filled", expected.num_rows, 2, 1)
    assert info.bytes > 0 and info.partitions == 2
    assert info.holders == ("executor 0", "executor 1")
    cached.invalidate()
    assert_no_leaks(session)


def test_a_key_by_on_the_keys_a_cache_is_partitioned_by_needs_no_exchange(
    session: hs.Session, tmp_path: Path
) -> None:
    cached = prepared(session, tmp_path / "calls")
    job = session.job("regroup")
    regrouped = job.from_cache(cached).key_by("customer").aggregate({"amount_sum": "max"})
    plan = regrouped.explain()
    # before the fill, the layout comes from the lineage: 2 partitions, hash(customer)
    assert "needs no exchange on customer" in plan
    assert "edges:\n" in plan and "hash(customer) after" not in plan
    result = regrouped.collect()
    assert result.caches == {cached.name: "filled"}  # it filled the cache first
    assert result.edges == {}  # the read and the aggregate ran in one chain
    expected = per_customer(orders(ROWS)).select(["customer", "amount_sum"])
    equal(result.table.rename_columns(["customer", "amount_sum"]), expected)
    # a different key, or a different count, still exchanges
    again = job.from_cache(cached).key_by("order_id_count").aggregate({"amount_sum": "sum"})
    assert "needs no exchange" not in again.explain()
    other = job.from_cache(cached).key_by("customer", partitions=3).aggregate({"amount_sum": "sum"})
    assert "needs no exchange" not in other.explain()
    cached.invalidate()
    assert_no_leaks(session)


def test_a_join_of_a_cache_with_another_stream_hashes_only_the_other_side(
    session: hs.Session, tmp_path: Path
) -> None:
    cached = prepared(session, tmp_path / "calls")
    cached.fill()
    job = session.job("segments")
    joined = job.from_cache(cached).join(
        job.from_arrow(customers(), name="customers", parallelism=3), on="customer", how="left"
    )
    assert "needs no exchange on customer" in joined.explain()
    result = joined.collect()
    expected = per_customer(orders(ROWS)).join(customers(), "customer", join_type="left outer")
    got = result.table.select(expected.column_names).sort_by("customer")
    assert got.num_rows == expected.num_rows
    assert got.column("segment").equals(expected.sort_by("customer").column("segment"))
    cached.invalidate()
    assert_no_leaks(session)


def test_invalidate_releases_the_partitions_and_the_next_read_recomputes(
    session: hs.Session, tmp_path: Path
) -> None:
    log = tmp_path / "calls"
    cached = prepared(session, log)
    info = cached.fill()
    assert info.state == "filled" and info.fills == 1
    assert any(session.partitions_occupying_local_resources().values())
    once = calls(log)

    cached.invalidate()
    assert cached.info().state == "empty"
    assert_no_leaks(session)  # nothing of the cache is held any more

    result = session.job("after").from_cache(cached).collect()
    assert cached.info().fills == 2
    assert_recomputed(session, cached, result, log, once)
    cached.invalidate()  # idempotent
    assert_no_leaks(session)


def test_an_executor_dead_between_jobs_takes_cached_partitions_and_they_are_recomputed(
    session: hs.Session, tmp_path: Path
) -> None:
    log = tmp_path / "calls"
    cached = prepared(session, log)
    cached.fill()
    once = calls(log)
    ray.kill(session.executors[1])  # it holds partition 1 of the cache
    # once Ray reports the death, the session marks the cache (a read before that finds
    # the partition gone midway, and recovers as the next test shows)
    wait_until(lambda: cached.info().state == "lost", 30, "the cache marked lost")

    result = session.job("after-death").from_cache(cached).collect()
    assert_recomputed(session, cached, result, log, once)


def test_an_executor_killed_while_a_job_reads_the_cache_leaves_the_result_equal(
    session: hs.Session, tmp_path: Path
) -> None:
    log = tmp_path / "calls"
    cached = prepared(session, log)
    cached.fill()
    once = calls(log)
    marker, release = tmp_path / "reading", tmp_path / "release"
    killer = kill_at(session, marker, release)
    job = session.job("read-and-die")
    reading = job.from_cache(cached).map_batches(gate(marker, release, 1), name="slow")
    result = reading.collect()
    killer.join(5)
    assert_recomputed(session, cached, result, log, once)  # lost mid-read: filled again


def test_a_cache_no_one_can_read_any_more_is_released_and_its_name_freed(
    session: hs.Session, tmp_path: Path
) -> None:
    cached = prepared(session, tmp_path / "calls", name="dropped")
    branch = cached.filter(pc.field("order_id_count") > 1)
    cached.fill()
    del cached
    gc.collect()
    assert "dropped" in [c.name for c in session.caches()]  # a branch still reaches it
    del branch
    gc.collect()
    assert "dropped" not in [c.name for c in session.caches()]
    assert_no_leaks(session)  # its partitions were released
    prepared(session, tmp_path / "again", name="dropped")  # the name is free again


def test_a_cache_beyond_the_memory_budget_spills_and_reads_back_equal(local_ray: None) -> None:
    with hs.Session(config(memory_budget="256 KiB"), slots=2) as small:
        cached = prepared(small, Path("/dev/null"))
        info = cached.fill()
        assert 0 < info.spilled_bytes <= info.bytes
        result = small.job("read").from_cache(cached).collect()
        equal(result.table, per_customer(orders(ROWS)))
        cached.invalidate()
        assert_no_leaks(small)
    assert_closed_cleanly(small)


def test_with_the_external_store_a_cache_survives_an_executor_death(
    local_ray: None, tmp_path: Path
) -> None:
    log = tmp_path / "calls"
    with hs.Session(config("external"), slots=2) as external:
        cached = prepared(external, log)
        info = cached.fill()
        assert all(h.startswith("store") or "node" in h for h in info.holders), info.holders
        once = calls(log)
        ray.kill(external.executors[0])
        ray.kill(external.executors[1])
        result = external.job("after-death").from_cache(cached).collect()
        equal(result.table, per_customer(orders(ROWS)))
        assert result.caches == {cached.name: "read"}
        assert calls(log) == once
        cached.invalidate()
        assert_no_leaks(external)
    assert_closed_cleanly(external)


def test_a_cache_of_another_session_is_refused_naming_both(
    session: hs.Session, local_ray: None, tmp_path: Path
) -> None:
    cached = prepared(session, tmp_path / "calls")
    with hs.Session(config(), slots=1) as other:
        with pytest.raises(hs.CacheSessionError, match=cached.name) as caught:
            other.job("elsewhere").from_cache(cached)
        assert session.session_id in str(caught.value)
    with pytest.raises(hs.PlanError, match=r"pass what stream\.cache"):
        session.job("x").from_cache(session.job("y").from_arrow(orders(10)))  # type: ignore[arg-type]
    with pytest.raises(hs.PlanError, match="is taken"):
        session.job("z").from_arrow(orders(10)).cache(cached.name)
    cached.invalidate()


def test_a_bad_job_reading_an_empty_cache_fails_before_the_cache_is_filled(
    session: hs.Session,
) -> None:
    """The lineage's schema is known (no user function), so the reading job's missing
    column is found by planning, before the lineage runs."""
    job = session.job("known")
    cached = job.from_arrow(orders(ROWS)).key_by("customer").aggregate({"amount": "sum"}).cache()
    bad = session.job("bad").from_cache(cached).key_by("no_such_column").aggregate({"x": "sum"})
    with pytest.raises(hs.PlanError, match="no_such_column"):
        bad.collect()
    assert (cached.info().state, cached.info().fills) == ("empty", 0)
    assert_no_leaks(session)


def test_closing_the_session_releases_its_caches(local_ray: None, tmp_path: Path) -> None:
    s = hs.Session(config(), slots=2)
    cached = prepared(s, tmp_path / "calls")
    cached.fill()
    s.close()
    assert_closed_cleanly(s)  # executors gone, spill directory removed
    cached.invalidate()  # a no-op once closed
    with pytest.raises(hs.SessionClosedError):
        cached.collect()


def test_a_read_and_a_fill_in_one_run_of_two_branches(session: hs.Session, tmp_path: Path) -> None:
    """A run that fills one cache while it reads another (a cache of a cache read)."""
    log = tmp_path / "calls"
    base = prepared(session, log)
    job = session.job("derived")
    derived = job.from_cache(base).filter(pc.field("order_id_count") >= 2).cache("derived")
    first = derived.collect()
    assert first.caches == {base.name: "filled", "derived": "filled"}
    # the derived cache keeps the base's partitioning through the filter
    assert derived.info().partitioning == "hash(customer) into 2"
    second = job.from_cache(derived).collect()
    assert second.caches == {"derived": "read"}
    expected = per_customer(orders(ROWS)).filter(pc.field("order_id_count") >= 2)
    equal(second.table, expected)
    derived.invalidate()
    base.invalidate()
    assert_no_leaks(session)


def test_the_cache_example_runs_and_checks_its_answers(local_ray: None) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "cache_across_jobs.py"
    main = runpy.run_path(str(example), run_name="example")["main"]
    assert main(["--rows", "20000"]) == 0
