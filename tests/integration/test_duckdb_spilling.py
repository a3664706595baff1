"""The DuckDB operators through real jobs: it spills within ``operators.memory``, stays
exact, leaves no file behind, and runs each task's DuckDB on ``operators.threads``.

With ``operators.memory: 64 MiB`` (``OPERATORS_MIN_MEMORY``, the smallest budget the
engine honours) each subtask's aggregate, sort or co_group state here is well past the
budget, so DuckDB spills to the task's temp directory, and that shows as the vertex's
``spilled_bytes``; the vertex reports the budget as given, and its peak stays within
1.5x of it (issue 37).  The data are made so that exactness is checked with
vectorized NumPy, never a Python loop over rows: every row's value is a function of
its key (so a wrong pairing shows), and the row ids must come back exactly once.
"""

from __future__ import annotations

import glob
import os
import sys
from collections.abc import Iterable, Iterator

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import hybrid_shuffle as hs
from hybrid_shuffle.operators.base import Operator
from hybrid_shuffle.operators.context import OperatorContext

from .conftest import assert_closed_cleanly, assert_no_leaks

#: the smallest budget the engine honours (``config.OPERATORS_MIN_MEMORY``)
MEMORY = 64 << 20
#: an odd 64-bit constant: multiplying by it modulo 2^64 is a bijection (distinct keys)
MIX = np.uint64(0x9E3779B97F4A7C15)


def config(threads: int = 1) -> dict[str, object]:
    return {
        "parallelism": 2,
        "operators": {"memory": MEMORY, "threads": threads},
        "shuffle": {"buffer_size": "4 MiB", "memory_budget": "128 MiB"},
    }


@pytest.fixture(scope="module")
def session(local_ray: None) -> Iterator[hs.Session]:
    with hs.Session(config(), slots=2) as s:
        yield s
    assert_closed_cleanly(s)


def mixed(ids: np.ndarray) -> np.ndarray:
    """Distinct int64 keys spread over the whole range, one per id."""
    with np.errstate(over="ignore"):
        return (ids.astype(np.uint64) * MIX).view(np.int64)


def spilled(result: hs.JobResult, vertex: str) -> None:
    v = result.vertices[vertex]
    assert v.spilled_bytes > 0, v
    assert 0 < v.peak_memory_bytes <= 1.5 * MEMORY, v
    assert v.memory == MEMORY, v  # the figure in force, as configured


def task_dirs(session: hs.Session) -> list[str]:
    """The task attempts' directories (operators' runs, DuckDB's temp directory) still
    under the session's spill directory: each goes with its task."""
    assert glob.glob(os.path.join(session.spill_dir, "*", "operators"))  # where they were
    return glob.glob(os.path.join(session.spill_dir, "*", "operators", "*"))


def once_each(ids: np.ndarray, n: int) -> bool:
    """``ids`` is a permutation of ``0..n-1``."""
    return (
        len(ids) == n
        and ids.min() == 0
        and ids.max() == n - 1
        and bool((np.bincount(ids, minlength=n) == 1).all())
    )


@pytest.mark.slow
def test_an_aggregate_of_20m_distinct_keys_spills_and_is_exact(session: hs.Session) -> None:
    rows = 20_000_000
    rng = np.random.default_rng(1)
    ids = rng.permutation(rows).astype(np.int32)
    data = pa.table({"k": mixed(ids), "v": ids})
    result = (
        session.job("duck_agg")
        .from_arrow(data)
        .key_by("k")
        .aggregate({"v": "sum"}, name="totals", combine=False)
        .collect()
    )
    got = result.table
    del data
    assert got.num_rows == rows  # pyarrow's group_by: one row per distinct key
    v_sum = got.column("v_sum").to_numpy()
    # each key's sum is its one value, and every value comes back once
    assert (got.column("k").to_numpy() == mixed(v_sum)).all()
    assert once_each(v_sum, rows)
    spilled(result, "totals")
    assert result.vertices["totals"].rows_in == rows
    del got, result
    assert_no_leaks(session)  # no spill file left, among the rest
    assert task_dirs(session) == []


@pytest.mark.slow
def test_a_sort_past_the_memory_floor_spills_and_is_exact(session: hs.Session) -> None:
    rows = 16_000_000  # 12 bytes a row: 96 MB per subtask, past the 64 MiB floor
    rng = np.random.default_rng(2)
    ids = np.arange(rows, dtype=np.int32)
    keys = rng.integers(-(2**62), 2**62, rows)
    data = pa.table({"k": keys, "id": ids})
    result = session.job("duck_sort").from_arrow(data).sort("k", name="sorted").collect()
    got = result.table
    assert got.num_rows == rows
    k = got.column("k").to_numpy()
    assert (k[1:] >= k[:-1]).all()  # one ascending order over both partitions
    got_ids = got.column("id").to_numpy()
    assert once_each(got_ids, rows)
    assert (k == keys[got_ids]).all()  # every row kept its key
    spilled(result, "sorted")
    del got, result
    assert_no_leaks(session)  # no spill file left, among the rest
    assert task_dirs(session) == []


@pytest.mark.slow
def test_a_sort_given_four_times_its_memory_spills_within_one_and_a_half_times_it(
    session: hs.Session,
) -> None:
    """Issue 37's honest budget: one subtask receives 4x ``operators.memory`` of rows;
    its sort spills, reports the budget as given, and peaks within 1.5x of it."""
    rows = 4 * MEMORY // 12 + 1  # 12 bytes a row (int64 key, int32 id)
    rng = np.random.default_rng(5)
    keys = rng.integers(-(2**62), 2**62, rows)
    data = pa.table({"k": keys, "id": np.arange(rows, dtype=np.int32)})
    assert data.nbytes > 4 * MEMORY
    job = session.job("four_times")
    result = job.from_arrow(data, parallelism=1).sort("k", name="sorted", partitions=1).collect()
    got = result.table
    assert result.vertices["sorted"].subtasks == 1
    k = got.column("k").to_numpy()
    assert got.num_rows == rows and (k[1:] >= k[:-1]).all()
    got_ids = got.column("id").to_numpy()
    assert once_each(got_ids, rows)
    assert (k == keys[got_ids]).all()
    spilled(result, "sorted")
    del got, result
    assert_no_leaks(session)
    assert task_dirs(session) == []


def pair_ids(left: pa.Table, right: pa.Table) -> pa.Table:
    """A co_group function: each key of the call with its left and right ids."""
    return left.join(right, "k", join_type="full outer", use_threads=False)


@pytest.mark.slow
def test_a_co_group_past_the_memory_floor_spills_and_is_exact(session: hs.Session) -> None:
    """Each side is a DuckDB ``ORDER BY`` (``duck/sorter.py``): 48 MB a side per subtask,
    both sorted at once within the 64 MiB floor.  Half the keys are on both sides."""
    rows = 8_000_000
    rng = np.random.default_rng(4)
    left_ids = rng.permutation(rows).astype(np.int32)
    right_ids = (rng.permutation(rows) + rows // 2).astype(np.int32)
    left = pa.table({"k": mixed(left_ids), "id": left_ids})
    right = pa.table({"k": mixed(right_ids), "w": right_ids})
    job = session.job("duck_co_group")
    result = (
        job.from_arrow(left).co_group(job.from_arrow(right), "k", pair_ids, name="paired").collect()
    )
    got = result.table.sort_by("k")
    want = pair_ids(left, right).sort_by("k")
    del left, right
    assert got.column_names == ["k", "id", "w"]
    assert got.num_rows == rows + rows // 2
    k = got.column("k").to_numpy()
    assert (k[1:] > k[:-1]).all()  # each key in exactly one call
    assert got.equals(want)  # pyarrow's one join of the whole inputs
    spilled(result, "paired")
    del got, want, result
    assert_no_leaks(session)  # no spill file left, among the rest
    assert task_dirs(session) == []


#: a translated Spark stage's semi and anti joins with a non-equi condition, as TPC-H
#: Q21's (``EXISTS`` another supplier, ``NOT EXISTS`` another late one): ``input`` is
#: read three times, so it is staged into a DuckDB temp table and the query runs at the
#: end of the input
SEMI_AND_ANTI = """
    SELECT a.id, a.late FROM input a
    SEMI JOIN input b ON a.k = b.k AND a.id <> b.id
    ANTI JOIN (SELECT k, id FROM input WHERE late) c ON a.k = c.k AND a.id <> c.id
"""


@pytest.mark.slow
def test_a_sql_stage_of_semi_and_anti_joins_spills_and_is_exact(session: hs.Session) -> None:
    """The joins of TPC-H Q21's stage past the 64 MiB floor: the ids below ``rows / 2``
    come in groups of three of one key, the rest alone, and the odd ids are late; each
    subtask stages its half and joins it with itself twice, so DuckDB spills.  Checked
    row for row against DuckDB's own answer over the whole table (no memory limit)."""
    rows = 6_000_000
    rng = np.random.default_rng(5)
    ids = rng.permutation(rows).astype(np.int64)
    keys = np.where(ids < rows // 2, ids // 3, ids)
    data = pa.table({"k": mixed(keys), "id": ids, "late": ids % 2 == 1})
    result = (
        session.job("duck_semi_anti")
        .from_arrow(data)
        .key_by("k")
        .sql(SEMI_AND_ANTI, name="joined")
        .collect()
    )
    got = result.table.sort_by("id")
    oracle = duckdb.connect()
    oracle.register("input", data)
    want = oracle.execute(f"SELECT * FROM ({SEMI_AND_ANTI}) ORDER BY id").to_arrow_table()
    oracle.close()
    del data
    # a group with one late member keeps that one (its others see it); with two, none
    assert got.num_rows == rows // 12
    assert pc.all(got.column("late")).as_py()
    assert got.equals(want)
    spilled(result, "joined")
    del got, want, result
    assert_no_leaks(session)  # no spill file left, among the rest
    assert task_dirs(session) == []


class ThreadsProbe(Operator):
    """Chained after a DuckDB operator, so in its task: records the ``threads`` its
    task's database has (``open``) and adds it to every row it passes on."""

    uses_memory = True  # a stateful operator's context, which holds the task's database

    def __init__(self, name: str) -> None:
        self.name = name

    def open(self, context: OperatorContext | None = None) -> None:
        assert context is not None
        self.threads = int(context.database.setting("threads"))

    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        return [table.append_column("threads", pa.array([self.threads] * table.num_rows))]


@pytest.mark.parametrize("threads", [1, 2])
def test_a_tasks_duckdb_runs_on_operators_threads(local_ray: None, threads: int) -> None:
    rng = np.random.default_rng(3)
    data = pa.table({"k": rng.integers(0, 1_000, 50_000), "v": rng.integers(0, 9, 50_000)})
    with hs.Session(config(threads), slots=2) as s:
        totals = s.job("threads").from_arrow(data).key_by("k").aggregate({"v": "sum"}, "totals")
        # the probe is the engine's kind of operator, not a user function: ship its class
        s.transport.ship_by_value(sys.modules[ThreadsProbe.__module__])
        result = totals._chain("probe", "probe", ThreadsProbe).collect()
        got = result.table
        assert "totals->probe" in result.vertices  # chained: in the aggregate's task
        assert set(got.column("threads").to_pylist()) == {threads}
        want = data.group_by("k").aggregate([("v", "sum")])
        assert got.select(["k", "v_sum"]).sort_by("k").equals(want.sort_by("k"))
        assert_no_leaks(s)
    assert_closed_cleanly(s)
