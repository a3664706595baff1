"""A join on DuckDB through a real job: past ``operators.memory`` it spills to
the task's temp directory, stays exact and leaves no file behind.

Each join subtask stages about 96 MB of rows (both sides), past its task's
``operators.memory: 64 MiB`` (the smallest budget the engine honours), so DuckDB spills
the staged rows and its hash table.  Every key is on both sides once, and a row's
values are functions of its id, so exactness is checked with vectorized NumPy.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pytest

import hybrid_shuffle as hs

from .conftest import assert_closed_cleanly, assert_no_leaks
from .test_duckdb_spilling import config, mixed, once_each, spilled, task_dirs


@pytest.fixture(scope="module")
def session(local_ray: None) -> Iterator[hs.Session]:
    with hs.Session(config(), slots=2) as s:
        yield s
    assert_closed_cleanly(s)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["hash", "sort-merge"])
def test_a_join_past_the_memory_floor_spills_and_is_exact(
    session: hs.Session, strategy: str
) -> None:
    rows = 8_000_000  # 12 bytes a row on each side: 96 MB staged per subtask
    rng = np.random.default_rng(3)
    probe_ids = rng.permutation(rows).astype(np.int32)
    build_ids = rng.permutation(rows).astype(np.int32)
    job = session.job(f"duck_join_{strategy}")
    probe = job.from_arrow(pa.table({"k": mixed(probe_ids), "id": probe_ids}))
    build = job.from_arrow(pa.table({"k": mixed(build_ids), "w": build_ids}))
    result = probe.join(build, on="k", name="joined", strategy=strategy).collect()
    got = result.table
    assert got.column_names == ["k", "id", "w"]
    assert got.num_rows == rows
    ids = got.column("id").to_numpy()
    assert once_each(ids, rows)
    assert (got.column("w").to_numpy() == ids).all()  # each probe row met its build row
    assert (got.column("k").to_numpy() == mixed(ids)).all()
    spilled(result, "joined")
    del got, result
    assert_no_leaks(session)  # no spill file left, among the rest
    assert task_dirs(session) == []
