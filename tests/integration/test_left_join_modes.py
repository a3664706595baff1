"""A left join equals pyarrow's ``left outer`` join in every mode, whenever the right
side ends: empty, before the left rows come (fast) or after every left row (slow).

The order is set by phases, not by timing: the right side's rows are a Ray task's
result that the right source fetches, and that task and the left side's
``map_batches`` wait for each other through marker files (every wait bounded).
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
        done = markers / f"left-{uuid.uuid4().hex}"
        tmp = done.with_suffix(".tmp")
        tmp.write_text(str(table.num_rows))
        tmp.rename(done)  # a reader never sees a half-written count
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


@pytest.mark.xfail(
    strict=True,
    reason="a right side whose schema is unknown before running (map_batches) and that sends "
    "no row carries no schema to the join: needs the writer's schema_on_empty and an input "
    "gate that delivers zero-row tables (issue 9)",
)
def test_left_join_has_the_right_columns_when_an_unplannable_right_side_is_empty(
    session: hs.Session,
) -> None:
    job = session.job("left-join-unplanned")
    left = job.from_arrow(left_table(), name="left", parallelism=2)
    right = job.from_arrow(right_table([]), name="right", parallelism=2).map_batches(
        lambda t: t, name="right_map"
    )
    got = left.join(right, on="k", how="left", mode="hybrid-selective", name="j").to_arrow()
    assert_no_leaks(session)
    assert_left_join_equals_pyarrow(got, right_table([]))
