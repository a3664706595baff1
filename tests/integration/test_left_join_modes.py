"""A left join equals pyarrow's ``left outer`` join in every mode, whenever the right
side ends: empty, before the left rows come (fast) or after every left row (slow).

The order is set by phases, not by timing: the right side's rows are a Ray task's
result that the right source fetches, and that task and the left side's
``map_batches`` wait for each other through marker files (every wait bounded).

The module also holds the job-level test of issue 9's grouping part (it shares
this module's Ray and session): ``key_by().aggregate()`` at parallelism 1, 3 and
4 groups float, null and uint64 keys exactly as one pyarrow ``group_by`` does.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import ray

import hybrid_shuffle as hs

from .conftest import assert_closed_cleanly, assert_no_leaks

MODES = ["pipelined", "blocking", "hybrid-selective", "hybrid-full"]
LEFT_ROWS = 20_000
PHASE_TIMEOUT = 120.0
RIGHT_MADE = "right-made"


@pytest.fixture(scope="module")
def session(local_ray: None) -> Iterator[hs.Session]:
    config = {"parallelism": 2, "shuffle": {"buffer_size": "16 KiB", "memory_budget": "32 MiB"}}
    with hs.Session(config, slots=4) as s:
        yield s
    assert_closed_cleanly(s)


def left_table() -> pa.Table:
    rng = np.random.default_rng(11)
    return pa.table(
        {
            "k": pa.array(rng.integers(0, 500, LEFT_ROWS), mask=rng.random(LEFT_ROWS) < 0.01),
            "v": np.arange(LEFT_ROWS, dtype=np.int64),
        }
    )


def right_table(keys: list[int]) -> pa.Table:
    return pa.table(
        {
            "k": pa.array(keys, pa.int64()),
            "w": pa.array([f"w{k}" for k in keys], pa.string()),
            "x": pa.array([k * 0.5 for k in keys], pa.float64()),
        }
    )


def wait_for(condition: Callable[[], bool], what: str) -> None:
    """A phase gate inside an executor or a Ray task: bounded, and names the phase."""
    deadline = time.monotonic() + PHASE_TIMEOUT
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"phase not reached within {PHASE_TIMEOUT:.0f} s: {what}")
        time.sleep(0.005)


def left_rows_seen(markers: Path) -> int:
    return sum(int(p.read_text() or 0) for p in markers.glob("left-*"))


def left_gate(markers: Path, after_right: bool) -> Callable[[pa.Table], pa.Table]:
    """The left side's map: waits until the right rows exist (if ``after_right``) and
    records how many rows it passed on."""

    def gate(table: pa.Table) -> pa.Table:
        if after_right:
            wait_for((markers / RIGHT_MADE).exists, "the right side's rows were made")
        name = uuid.uuid4().hex
        tmp = markers / f"writing-{name}"  # not a left-* name: readers skip it
        tmp.write_text(str(table.num_rows))
        tmp.rename(markers / f"left-{name}")  # a reader never sees a half-written count
        return table

    return gate


def deferred_right(table: pa.Table, markers: Path, after_left: bool) -> Any:
    """An ObjectRef of ``table``, made (by a Ray task) once every left row went through
    the left map if ``after_left``, else at once."""

    def make() -> pa.Table:
        if after_left:
            wait_for(lambda: left_rows_seen(markers) >= LEFT_ROWS, "every left row mapped")
        (markers / RIGHT_MADE).touch()
        return table

    return ray.remote(num_cpus=0)(make).remote()


def run_left_join(
    session: hs.Session, mode: str, right: pa.Table, markers: Path, right_first: bool
) -> pa.Table:
    job = session.job(f"left-join-{mode}")
    left = job.from_arrow(left_table(), name="left", parallelism=2).map_batches(
        left_gate(markers, after_right=right_first), name="left_gate"
    )
    # one zero-row piece gives the planner the right schema; the rows come from the task
    pieces = [right.schema.empty_table(), deferred_right(right, markers, not right_first)]
    right_stream = job.from_arrow(pieces, name="right", parallelism=2)
    joined = left.join(right_stream, on="k", how="left", mode=mode, partitions=4, name="j")
    result = joined.collect()
    assert {e.mode for e in result.edges.values() if e.name.startswith("j.")} == {mode}
    return result.table


def assert_left_join_equals_pyarrow(got: pa.Table, right: pa.Table) -> None:
    want = left_table().join(right, keys="k", join_type="left outer")
    assert got.schema.names == want.schema.names
    assert got.schema.types == want.schema.types
    assert got.num_rows == want.num_rows
    order = [("v", "ascending")]
    assert got.sort_by(order).equals(want.sort_by(order))


@pytest.mark.parametrize("mode", MODES)
def test_left_join_with_an_empty_right_side_keeps_every_left_row_with_null_right_columns(
    session: hs.Session, tmp_path: Path, mode: str
) -> None:
    right = right_table([])
    got = run_left_join(session, mode, right, tmp_path, right_first=True)
    assert got.num_rows == LEFT_ROWS
    assert got.column("w").null_count == got.column("x").null_count == LEFT_ROWS
    assert_left_join_equals_pyarrow(got, right)
    assert_no_leaks(session)


@pytest.mark.parametrize("mode", MODES)
def test_left_join_keeps_left_rows_that_arrive_after_the_right_side_ended(
    session: hs.Session, tmp_path: Path, mode: str
) -> None:
    # two keys: most join subtasks get no right row at all, and need the right schema
    right = right_table([0, 3])
    got = run_left_join(session, mode, right, tmp_path, right_first=True)
    assert_left_join_equals_pyarrow(got, right)
    assert_no_leaks(session)


@pytest.mark.parametrize("mode", MODES)
def test_left_join_holds_left_rows_until_a_right_side_that_comes_last_has_ended(
    session: hs.Session, tmp_path: Path, mode: str
) -> None:
    right = right_table(list(range(0, 500, 3)))
    got = run_left_join(session, mode, right, tmp_path, right_first=False)
    assert_left_join_equals_pyarrow(got, right)
    assert_no_leaks(session)


@pytest.mark.parametrize("keys", [[], [0, 3]], ids=["empty", "two-keys"])
def test_left_join_has_the_right_columns_where_an_unplannable_right_side_sent_no_row(
    session: hs.Session, keys: list[int]
) -> None:
    job = session.job("left-join-unplanned")
    left = job.from_arrow(left_table(), name="left", parallelism=2)
    right = job.from_arrow(right_table(keys), name="right", parallelism=2).map_batches(
        lambda t: t, name="right_map"
    )
    joined = left.join(right, on="k", how="left", mode="hybrid-selective", partitions=4)
    try:
        got = joined.to_arrow()
    finally:
        assert_no_leaks(session)
    assert_left_join_equals_pyarrow(got, right_table(keys))


# -- grouping: the engine against one pyarrow group_by ------------------------------------

GROUP_ROWS = 12_000
NAN_BITS = [0x7FF8000000000000, 0x7FF8000000000001, 0xFFF8000000000000, 0x7FF0000000000001]
AGGREGATE = {"v": ["sum", "count", "min", "max", "mean"]}


def grouping_table() -> pa.Table:
    """Float keys with both zeros, four NaN payloads and nulls; uint64 keys at and above
    2^63; int64 values whose group sums pass 2^53 while every float64 partial sum stays
    exact (multiples of 2^11 below 2^51), so means must equal pyarrow's exactly."""
    rng = np.random.default_rng(5)
    nans = np.array(NAN_BITS, dtype=np.uint64).view(np.float64)
    pool = np.concatenate([[0.0, -0.0, 1.5, -2.25, np.inf], nans])
    f = pa.array(pool[rng.integers(0, len(pool), GROUP_ROWS)], mask=rng.random(GROUP_ROWS) < 0.03)
    big = np.array([0, 5, 2**63 - 1, 2**63, 2**63 + 7, 2**64 - 1], dtype=np.uint64)
    u = pa.array(big[rng.integers(0, len(big), GROUP_ROWS)], mask=rng.random(GROUP_ROWS) < 0.03)
    v = rng.integers(-(2**40), 2**40, GROUP_ROWS) * 2**11
    return pa.table(
        {"f": f, "u": u, "v": pa.array(v, pa.int64(), mask=rng.random(GROUP_ROWS) < 0.05)}
    )


def exact_rows(table: pa.Table, keys: list[str]) -> list[tuple[Any, ...]]:
    """Rows as tuples, float keys as their bits (NaN payloads and -0.0 kept), sorted."""
    columns: list[list[Any]] = []
    for key in keys:
        column = table.column(key)
        if pa.types.is_floating(column.type):
            bits = column.fill_null(0.0).to_numpy().view(np.uint64).tolist()
            valid = column.is_valid().to_numpy().tolist()
            columns.append([b if ok else None for b, ok in zip(bits, valid, strict=True)])
        else:
            columns.append(column.to_pylist())
    columns += [table.column(f"v_{fn}").to_pylist() for fn in AGGREGATE["v"]]
    return sorted(zip(*columns, strict=True), key=repr)


@pytest.mark.parametrize("partitions", [1, 3, 4])
@pytest.mark.parametrize("keys", [["f"], ["u"], ["f", "u"]], ids="+".join)
def test_key_by_aggregate_groups_float_null_and_uint64_keys_as_pyarrow_at_any_parallelism(
    session: hs.Session, keys: list[str], partitions: int
) -> None:
    table = grouping_table()
    job = session.job(f"grouping-{'-'.join(keys)}-{partitions}")
    stream = job.from_arrow(table, name="rows", parallelism=3)
    got = stream.key_by(*keys, edge="by_key", partitions=partitions).aggregate(AGGREGATE)
    result = got.to_arrow()
    want = table.group_by(keys, use_threads=False).aggregate([("v", fn) for fn in AGGREGATE["v"]])
    assert result.schema == want.schema
    assert exact_rows(result, keys) == exact_rows(want, keys)
    assert_no_leaks(session)


def test_key_by_aggregate_without_the_combiner_groups_as_pyarrow_too(session: hs.Session) -> None:
    table = grouping_table()
    job = session.job("grouping-uncombined")
    stream = job.from_arrow(table, name="rows", parallelism=3)
    got = stream.key_by("f", "u", edge="by_key", partitions=3).aggregate(AGGREGATE, combine=False)
    want = table.group_by(["f", "u"], use_threads=False).aggregate(
        [("v", fn) for fn in AGGREGATE["v"]]
    )
    assert exact_rows(got.to_arrow(), ["f", "u"]) == exact_rows(want, ["f", "u"])
    assert_no_leaks(session)


@pytest.mark.parametrize("pipelined_side_first", [True, False])
def test_a_join_of_a_pipelined_and_a_blocking_input_runs_whichever_source_comes_first(
    local_ray: None, pipelined_side_first: bool
) -> None:
    """The region reading a blocking input deploys after the region producing it, even
    when its pipelined source was declared first (regions used to follow the order of
    their first vertex, and that job could never deploy)."""
    left = pa.table({"k": np.arange(1_000) % 50, "a": np.arange(1_000)})
    right = pa.table({"k": np.arange(50), "v": np.arange(50) * 10})
    config = {"edges": {"j.left": {"mode": "pipelined"}, "j.right": {"mode": "blocking"}}}
    with hs.Session(config, slots=4) as mixed:  # in the module's Ray, with these edges
        job = mixed.job("mixed")
        if pipelined_side_first:
            a = job.from_arrow(left, name="a", parallelism=2)
            b = job.from_arrow(right, name="b", parallelism=2)
        else:
            b = job.from_arrow(right, name="b", parallelism=2)
            a = job.from_arrow(left, name="a", parallelism=2)
        got = a.join(b, on="k", edge="j").collect(timeout=120).table
    expected = left.join(right, "k")
    assert (
        got.sort_by([("a", "ascending")])
        .select(["k", "a", "v"])
        .equals(expected.sort_by([("a", "ascending")]).select(["k", "a", "v"]))
    )
