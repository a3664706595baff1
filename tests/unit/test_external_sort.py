"""ExternalSorter and SortPartition against pyarrow's sort_by, spilling, within the budget.

``ExternalSorter`` is the Arrow kernel's: its runs, merge passes and ``peak <= 1.5 *
memory`` account are tested as they are.  ``SortPartition`` runs on both kernels
(``kernels``); what its spilling does on Arrow is checked on ``arrow`` only (the DuckDB
twin spills within its task database's ``memory_limit``, whose 64 MiB floor is far
above these tables: ``tests/integration/test_duckdb_spilling.py`` makes it spill).
Rows with equal sort keys may come out in any order (DuckDB's sort is not stable), so
a sort's output is compared on its key columns, and as a whole after a total order.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from hybrid_shuffle.operators import SortPartition
from hybrid_shuffle.operators.context import OperatorContext
from hybrid_shuffle.operators.external_sort import ExternalSorter
from hybrid_shuffle.operators.sort_keys import count_before, key_table

from .kernels import on_kernel


def data(rows: int = 80_000, seed: int = 3) -> pa.Table:
    """Keys with duplicates and nulls, a float key with NaN and nulls, a payload."""
    rng = np.random.default_rng(seed)
    k = pa.array(rng.integers(0, 2000, rows), mask=rng.random(rows) < 0.02)
    s = pc.cast(pa.array(rng.integers(0, 40, rows)), pa.string())
    s = pc.if_else(pa.array(rng.random(rows) < 0.03), pa.scalar(None, pa.string()), s)
    x = np.where(rng.random(rows) < 0.02, np.nan, rng.integers(0, 30, rows) / 4)
    return pa.table(
        {
            "k": k,
            "s": s,
            "x": pa.array(x, mask=rng.random(rows) < 0.02),
            "payload": pa.array(rng.random(rows)),
        }
    )


def same(got: pa.Table, want: pa.Table) -> None:
    """Row for row, column for column; NaN equals NaN, null equals only null."""
    assert got.column_names == want.column_names
    assert got.num_rows == want.num_rows
    for name in got.column_names:
        a, b = got.column(name), want.column(name)
        assert a.type == b.type, name
        assert pc.is_null(a).equals(pc.is_null(b)), name
        if pa.types.is_floating(a.type):
            assert pc.is_nan(a).equals(pc.is_nan(b)), name
            a, b = pc.if_else(pc.is_nan(a), 0.0, a), pc.if_else(pc.is_nan(b), 0.0, b)
        assert a.equals(b), name


def spill_context(tmp_path: Path, memory: int) -> OperatorContext:
    return OperatorContext(memory, str(tmp_path / "spill"))


def left_behind(tmp_path: Path) -> list[str]:
    spill = tmp_path / "spill"
    return os.listdir(spill) if spill.exists() else []


def batches(table: pa.Table, size: int) -> list[pa.Table]:
    return [table.slice(i, size) for i in range(0, table.num_rows, size)]


KEYS = {
    "int": [("k", "ascending")],
    "int descending": [("k", "descending")],
    "string descending": [("s", "descending")],
    "multi-column": [("s", "ascending"), ("k", "descending"), ("x", "ascending")],
    "float": [("x", "descending"), ("k", "ascending")],
}


@pytest.mark.parametrize("keys", list(KEYS.values()), ids=list(KEYS))
def test_a_spilling_sort_equals_pyarrow_row_for_row(
    tmp_path: Path, keys: list[tuple[str, str]]
) -> None:
    table = data()
    memory = table.nbytes // 5
    context = spill_context(tmp_path, memory)
    sorter = ExternalSorter(keys, context, memory, "sort")
    for part in batches(table, 3001):
        sorter.add(part)
    out = list(sorter.sorted_batches())
    # the payload breaks every tie, so the order is a single one
    order = [(c, o, "at_end") for c, o in keys] + [("payload", "ascending", "at_end")]
    got = pa.concat_tables(out)
    same(got.select([c for c, _ in keys]), table.sort_by(order).select([c for c, _ in keys]))
    same(got.sort_by(order), table.sort_by(order))
    assert sorter.rows == table.num_rows
    assert context.metrics.spilled_bytes > 0 and context.metrics.spill_runs >= 3
    assert context.metrics.peak_memory_bytes <= 1.5 * memory
    assert max(t.nbytes for t in out) <= memory and len(out) > 5
    assert left_behind(tmp_path) == []


def test_runs_beyond_the_fan_in_are_merged_in_passes(tmp_path: Path) -> None:
    table = data(40_000)
    memory = table.nbytes // 20  # a tiny budget: many runs, merged two or three at a time
    context = spill_context(tmp_path, memory)
    sorter = ExternalSorter([("k", "ascending"), ("s", "descending")], context, memory, "sort")
    for part in batches(table, 997):
        sorter.add(part)
    got = pa.concat_tables(list(sorter.sorted_batches()))
    order = [("k", "ascending", "at_end"), ("s", "descending", "at_end")]
    same(got.select(["k", "s"]), table.sort_by(order).select(["k", "s"]))
    assert context.metrics.spill_runs > 20
    assert context.metrics.spilled_bytes > 2 * table.nbytes  # runs were merged into runs
    assert context.metrics.peak_memory_bytes <= 1.5 * memory
    assert left_behind(tmp_path) == []


@pytest.mark.parametrize("shape", ["sorted", "reversed", "one key"])
def test_the_merge_handles_disjoint_and_identical_runs(tmp_path: Path, shape: str) -> None:
    """Sorted input makes runs of disjoint ranges (one run emits at a time); one key makes
    every row tie with every bound."""
    rows = 60_000
    k = {
        "sorted": np.arange(rows),
        "reversed": np.arange(rows)[::-1].copy(),
        "one key": np.zeros(rows, dtype=np.int64),
    }[shape]
    table = pa.table({"k": k, "v": np.arange(rows)})
    memory = table.nbytes // 5
    context = spill_context(tmp_path, memory)
    sorter = ExternalSorter([("k", "ascending")], context, memory, "sort")
    for part in batches(table, 1000):
        sorter.add(part)
    got = pa.concat_tables(list(sorter.sorted_batches()))
    assert got.column("k").equals(table.sort_by("k").column("k"))
    assert sorted(got.column("v").to_pylist()) == list(range(rows))
    assert context.metrics.spill_runs >= 4
    assert context.metrics.peak_memory_bytes <= 1.5 * memory


def test_within_the_budget_nothing_spills(tmp_path: Path) -> None:
    table = data(50_000)
    context = spill_context(tmp_path, 4 * table.nbytes)
    sorter = ExternalSorter([("s", "ascending")], context, context.memory, "sort")
    for part in batches(table, 5000):
        sorter.add(part)
    got = pa.concat_tables(list(sorter.sorted_batches()))
    assert got.column("s").equals(table.sort_by([("s", "ascending", "at_end")]).column("s"))
    assert context.metrics.spilled_bytes == 0 and not (tmp_path / "spill").exists()


def test_a_batch_larger_than_the_budget_is_spilled_in_parts(tmp_path: Path) -> None:
    table = data(80_000)
    memory = table.nbytes // 4
    context = spill_context(tmp_path, memory)
    sorter = ExternalSorter([("k", "descending")], context, memory, "sort")
    sorter.add(table)
    got = pa.concat_tables(list(sorter.sorted_batches()))
    assert got.column("k").equals(table.sort_by([("k", "descending", "at_end")]).column("k"))
    assert context.metrics.spill_runs >= 4
    assert context.metrics.peak_memory_bytes <= 1.5 * memory


def test_dictionary_keys_sort_by_their_values(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    parts = [
        pa.table(
            {"d": pa.array([f"v{x}" for x in rng.integers(0, 30 + i, 4000)]).dictionary_encode()}
        )
        for i in range(20)
    ]
    context = spill_context(tmp_path, sum(p.nbytes for p in parts) // 4)
    sorter = ExternalSorter([("d", "ascending")], context, context.memory, "sort")
    for part in parts:
        sorter.add(part)
    got = pa.concat_tables(list(sorter.sorted_batches())).column("d").to_pylist()
    assert got == sorted(v for p in parts for v in p.column("d").to_pylist())
    assert context.metrics.spilled_bytes > 0


@pytest.mark.parametrize("inclusive", [False, True])
def test_count_before_orders_as_the_sort_does(inclusive: bool) -> None:
    """Nulls after NaN after numbers (ascending), whatever the bound; ties per ``inclusive``."""
    values = pa.array(
        [1.0, 2.0, 2.0, 2.0, 5.0, float("nan"), float("nan"), None, None], pa.float64()
    )
    keys = [("v", "ascending")]
    sorted_ = key_table(pa.table({"v": values}), keys)
    cases = {2.0: (1, 4), 3.0: (4, 4), 0.0: (0, 0), float("nan"): (5, 7), None: (7, 9)}
    for bound, (before, through) in cases.items():
        row = key_table(pa.table({"v": pa.array([bound], pa.float64())}), keys)
        assert count_before(sorted_, row, keys, inclusive) == (through if inclusive else before)
    # a long input takes several probe steps
    long = key_table(pa.table({"v": pa.array(np.repeat(np.arange(1000.0), 7))}), keys)
    row = key_table(pa.table({"v": pa.array([500.0])}), keys)
    assert count_before(long, row, keys, inclusive) == 7 * 500 + (7 if inclusive else 0)


@pytest.mark.parametrize("descending", [False, True])
def test_sort_partition_spills_and_keeps_nulls_last(
    tmp_path: Path, descending: bool, kernel: str
) -> None:
    table = data()
    memory = table.nbytes // 4
    context = spill_context(tmp_path, memory)
    op = on_kernel(SortPartition(["k", "s"], descending, "s"), kernel)
    op.open(context)
    for part in batches(table, 4000):
        assert list(op.process(part, 0)) == []
    out = list(op.end_input(0)) + list(op.finish())
    op.close()
    order = "descending" if descending else "ascending"
    want = table.sort_by([("k", order, "at_end"), ("s", order, "at_end")])
    got = pa.concat_tables(out)
    assert got.select(["k", "s"]).equals(want.select(["k", "s"]))
    assert got.column("k")[-1].as_py() is None
    total = [(c, "ascending", "at_end") for c in table.column_names]
    same(got.sort_by(total), table.sort_by(total))  # every row once
    if kernel == "arrow":  # the Arrow kernel's spilling (see the module docstring)
        assert len(out) > 5 and context.metrics.spilled_bytes > 0
        assert context.metrics.peak_memory_bytes <= 1.5 * memory
    assert left_behind(tmp_path) == []


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("by", [["k"], ["s"], ["x", "k"], ["s", "x", "k"]], ids="+".join)
def test_sort_partition_orders_the_keys_as_pyarrow_does(
    by: list[str], descending: bool, kernel: str
) -> None:
    """Nulls last and NaN after every number (before the nulls) in both directions, on
    int, string and float keys; the DuckDB twin hands a descending float key to Arrow."""
    table = data(30_000)
    op = on_kernel(SortPartition(by, descending, "s"), kernel)
    op.open()
    out = [t for part in batches(table, 4000) for t in op.process(part, 0)]
    out += [*op.end_input(0), *op.finish()]
    op.close()
    order = "descending" if descending else "ascending"
    want = table.sort_by([(c, order, "at_end") for c in by])
    got = pa.concat_tables(out)
    same(got.select(by), want.select(by))
    total = [(c, "ascending", "at_end") for c in table.column_names]
    same(got.sort_by(total), table.sort_by(total))


def test_sort_partition_of_no_rows_still_emits_the_schema(kernel: str) -> None:
    op = on_kernel(SortPartition(["k"], False, "s"), kernel)
    op.open()
    op.process(data(0), 0)
    (out,) = op.finish()
    op.close()
    assert out.num_rows == 0 and out.schema == data(0).schema


def test_sorters_sharing_a_budget_spill_the_larger_buffer_and_leave_a_small_side_whole(
    tmp_path: Path,
) -> None:
    from hybrid_shuffle.operators.external_sort import SharedBuffers

    memory = 1 << 20
    context = OperatorContext(memory, str(tmp_path / "spill"))
    shared = SharedBuffers(memory)
    keys = [("k", "ascending")]
    big = ExternalSorter(keys, context, memory // 2, "big", shared=shared)
    small = ExternalSorter(keys, context, memory // 2, "small", shared=shared)
    rng = np.random.default_rng(5)
    small_rows = pa.table({"k": rng.integers(0, 100, 5_000), "v": rng.random(5_000)})
    small.add(small_rows)
    large = pa.table({"k": rng.integers(0, 10**6, 400_000), "v": rng.random(400_000)})
    for i in range(0, large.num_rows, 10_000):
        big.add(large.slice(i, 10_000))
    # big's runs are longer than a fixed half would allow (its buffer reached past it)
    assert max(run.rows for run in big._runs) * 24 > memory // 2
    assert small.buffered_rows == small_rows.num_rows  # never spilled: big made the room
    assert big.buffered_rows < large.num_rows
    assert context.metrics.spilled_bytes > 0
    got = pa.concat_tables(big.sorted_batches())
    assert got.column("k").to_pylist() == sorted(large.column("k").to_pylist())
    got_small = pa.concat_tables(small.sorted_batches())
    assert got_small.num_rows == small_rows.num_rows
    assert context.metrics.peak_memory_bytes <= 1.5 * memory


@pytest.mark.parametrize("descending", [False, True])
def test_sort_partition_gives_back_negative_zeros_as_they_were(
    descending: bool, kernel: str
) -> None:
    """-0.0 and 0.0 tie, and each row keeps its own (DuckDB would write the key back
    normalized to 0.0 if it sorted on the column itself)."""
    rng = np.random.default_rng(8)
    x = rng.choice(np.array([0.0, -0.0, 1.0, -2.0, np.nan]), 20_000)
    table = pa.table({"x": x, "i": np.arange(20_000)})
    op = on_kernel(SortPartition(["x"], descending, "s"), kernel)
    op.open()
    out = [t for part in batches(table, 3000) for t in op.process(part, 0)]
    out += [*op.end_input(0), *op.finish()]
    op.close()
    got = pa.concat_tables(out)
    got_x = got.column("x").to_numpy()
    assert (np.signbit(got_x) == np.signbit(x[got.column("i").to_numpy()])).all()
    order = "descending" if descending else "ascending"
    want = table.sort_by([("x", order, "at_end")]).column("x").to_numpy()
    assert np.array_equal(got_x, want, equal_nan=True)  # -0.0 == 0.0: the zeros tie
