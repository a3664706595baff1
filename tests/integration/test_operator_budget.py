"""An honest budget (issue 37): an operator given ``operators.memory`` that receives four
times as much data spills, and its peak stays within 1.5x of the figure.

Each test opens a stateful operator as a task does (``on_duckdb`` over the planning
operator, an ``OperatorContext`` with the budget and the task's ``TaskDatabase``) at the
smallest budget the engine honours, pushes 4x that many bytes through it in batches,
and checks the answer with vectorized NumPy, the spill, and the peak the task would
report (``task_peak_memory``).  No Ray: the budget is the operator's and its database's.
It sits with the integration tests for its data (256 MiB an operator, tens of seconds),
out of ``./dev test --quick``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from hybrid_shuffle.config import OPERATORS_MIN_MEMORY
from hybrid_shuffle.operators import HashAggregate, HashJoin, SortPartition
from hybrid_shuffle.operators.base import Operator
from hybrid_shuffle.operators.context import OperatorContext, task_peak_memory
from hybrid_shuffle.operators.duck.database import TaskDatabase
from hybrid_shuffle.operators.duck.operators import on_duckdb

BUDGET = OPERATORS_MIN_MEMORY
#: rows of 16 bytes (an int64 key, an int64 value): four budgets of them
ROWS = 4 * BUDGET // 16
BATCH = 1 << 20
LEFT, RIGHT = 0, 1


def batches(seed: int) -> Iterator[pa.Table]:
    """``ROWS`` rows in batches: ``k`` a permutation of ``0..ROWS-1``, ``v == -k``."""
    keys = np.random.default_rng(seed).permutation(ROWS).astype(np.int64)
    for start in range(0, ROWS, BATCH):
        k = keys[start : start + BATCH]
        yield pa.table({"k": k, "v": -k})


def run(
    op: Operator, tmp_path: Path, inputs: list[tuple[int, Iterator[pa.Table]]]
) -> tuple[pa.Table, OperatorContext]:
    """``op``'s output over ``inputs`` (each input's batches, then its end), run as a task
    runs it, with the budget; its context keeps the metrics."""
    database = TaskDatabase(1, BUDGET, str(tmp_path / "duckdb"))
    context = OperatorContext(BUDGET, database=database)
    duck = on_duckdb(op)
    duck.open(context)
    out: list[pa.Table] = []
    try:
        for index, tables in inputs:
            for table in tables:
                out += duck.process(table, index)
            out += duck.end_input(index)
        out += duck.finish()
    finally:
        duck.close()
        database.close()
    assert not (tmp_path / "duckdb").exists() or not any((tmp_path / "duckdb").iterdir())
    return pa.concat_tables(out), context


def within_budget(context: OperatorContext) -> None:
    metrics = context.metrics
    assert metrics.memory == BUDGET  # the figure in force is the one given
    assert metrics.spilled_bytes > 0, metrics  # 4x the budget cannot stay in memory
    assert 0 < task_peak_memory([metrics]) <= 1.5 * BUDGET, metrics


@pytest.mark.slow  # far from its bounds (0.8x); the aggregate and the join are the tight ones
def test_a_sort_of_four_budgets_spills_and_peaks_within_one_and_a_half(tmp_path: Path) -> None:
    got, context = run(SortPartition(["k"], False, "sorted"), tmp_path, [(0, batches(1))])
    k = got.column("k").to_numpy()
    assert len(k) == ROWS and (k == np.arange(ROWS)).all()
    assert (got.column("v").to_numpy() == -k).all()
    within_budget(context)


def test_an_aggregate_of_four_budgets_spills_and_peaks_within_one_and_a_half(
    tmp_path: Path,
) -> None:
    op = HashAggregate(["k"], {"v": "sum"}, "totals")
    got, context = run(op, tmp_path, [(0, batches(2))])
    order = np.argsort(got.column("k").to_numpy())
    k = got.column("k").to_numpy()[order]
    assert (k == np.arange(ROWS)).all()  # one group per distinct key
    assert (got.column("v_sum").to_numpy()[order] == -k).all()
    within_budget(context)


def test_a_join_of_four_budgets_spills_and_peaks_within_one_and_a_half(tmp_path: Path) -> None:
    """Two budgets on each side: every key meets its one partner."""
    half = ROWS // 2

    def side(seed: int, name: str) -> Iterator[pa.Table]:
        for t in batches(seed):
            t = t.filter(pc.less(t.column("k"), half))
            yield pa.table({"k": t.column("k"), name: t.column("v")})

    op = HashJoin(["k"], "inner", "joined")
    got, context = run(op, tmp_path, [(RIGHT, side(3, "w")), (LEFT, side(4, "v"))])
    k = got.column("k").to_numpy()
    assert len(k) == half and (np.sort(k) == np.arange(half)).all()
    assert (got.column("v").to_numpy() == got.column("w").to_numpy()).all()
    within_budget(context)
