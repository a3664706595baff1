"""``SortPartition`` as a task runs it (``on_duckdb``: in memory on Arrow while the
partition fits in half its memory, else on DuckDB) against pyarrow's sort_by, and
``sort_keys.counts_before``, which cuts sorted streams in pyarrow's order.

The order tests run on both paths (``path``: ``duckdb`` sets the limit of its
held batches to 0).  Nothing spills here: the DuckDB operator's 64 MiB floor is
far above these tables (``tests/integration/test_duckdb_spilling.py`` makes it spill).
Rows with equal sort keys may come out in any order (DuckDB's sort is not stable), so a
sort's output is compared on its key columns, and as a whole after a total order.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from hybrid_shuffle.operators import SortPartition
from hybrid_shuffle.operators.context import OperatorContext
from hybrid_shuffle.operators.duck.operators import on_duckdb
from hybrid_shuffle.operators.duck.sort import DuckSort
from hybrid_shuffle.operators.sort_keys import counts_before, key_table


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


def batches(table: pa.Table, size: int) -> list[pa.Table]:
    return [table.slice(i, size) for i in range(0, table.num_rows, size)]


@pytest.fixture(params=["arrow", "duckdb"])
def path(request: pytest.FixtureRequest) -> str:
    """Where a sort that fits in memory runs: on Arrow (as a task runs it) or on DuckDB."""
    return str(request.param)


def opened(
    op: SortPartition, context: OperatorContext | None = None, path: str = "arrow"
) -> DuckSort:
    """``op`` as a task runs it, opened; on ``path`` ``duckdb`` it sorts on DuckDB however
    little it holds."""
    run = on_duckdb(op)
    assert isinstance(run, DuckSort)
    run.open(context)
    if path == "duckdb":
        run.held.limit = 0
    return run


def sorted_by(
    op: SortPartition,
    table: pa.Table,
    batch: int,
    context: OperatorContext | None = None,
    path: str = "arrow",
) -> pa.Table:
    """``op`` as a task runs it over ``table`` in batches of ``batch`` rows."""
    run = opened(op, context, path)
    try:
        out = [t for part in batches(table, batch) for t in run.process(part, 0)]
        out += [*run.end_input(0), *run.finish()]
    finally:
        run.close()
    return pa.concat_tables(out)


KEYS = {
    "int": (["k"], "ascending"),
    "int descending": (["k"], "descending"),
    "string descending": (["s"], "descending"),
    "multi-column": (["s", "k", "x"], "ascending"),
    "float": (["x", "k"], "descending"),
}


@pytest.mark.parametrize("keys", list(KEYS.values()), ids=list(KEYS))
def test_the_sort_equals_pyarrow_row_for_row(keys: tuple[list[str], str]) -> None:
    by, direction = keys
    table = data()
    context = OperatorContext(table.nbytes // 5)
    got = sorted_by(SortPartition(by, direction == "descending", "s"), table, 3001, context)
    # the payload breaks every tie, so the order is a single one
    order = [(c, direction, "at_end") for c in by] + [("payload", "ascending", "at_end")]
    same(got.select(by), table.sort_by(order).select(by))
    same(got.sort_by(order), table.sort_by(order))
    assert context.metrics.spilled_bytes == 0


@pytest.mark.parametrize("shape", ["sorted", "reversed", "one key"])
def test_the_sort_handles_sorted_reversed_and_identical_keys(shape: str, path: str) -> None:
    rows = 60_000
    k = {
        "sorted": np.arange(rows),
        "reversed": np.arange(rows)[::-1].copy(),
        "one key": np.zeros(rows, dtype=np.int64),
    }[shape]
    table = pa.table({"k": k, "v": np.arange(rows)})
    got = sorted_by(SortPartition(["k"], False, "s"), table, 1000, path=path)
    assert got.column("k").equals(table.sort_by("k").column("k"))
    assert sorted(got.column("v").to_pylist()) == list(range(rows))


def test_dictionary_keys_sort_by_their_values(path: str) -> None:
    rng = np.random.default_rng(5)
    parts = [
        pa.table(
            {"d": pa.array([f"v{x}" for x in rng.integers(0, 30 + i, 4000)]).dictionary_encode()}
        )
        for i in range(20)
    ]
    table = pa.concat_tables(parts, promote_options="permissive")
    got = sorted_by(SortPartition(["d"], False, "s"), table, 4000, path=path)
    assert got.schema == table.schema
    assert got.column("d").to_pylist() == sorted(
        v for p in parts for v in p.column("d").to_pylist()
    )


@pytest.mark.parametrize("inclusive", [False, True])
def test_counts_before_orders_as_the_sort_does(inclusive: bool) -> None:
    """Nulls after NaN after numbers (ascending), whatever the bound; ties per ``inclusive``
    (``key_groups.align`` cuts sorted streams with it)."""
    values = pa.array(
        [1.0, 2.0, 2.0, 2.0, 5.0, float("nan"), float("nan"), None, None], pa.float64()
    )
    keys = [("v", "ascending")]
    sorted_ = key_table(pa.table({"v": values}), keys)
    cases = {2.0: (1, 4), 3.0: (4, 4), 0.0: (0, 0), float("nan"): (5, 7), None: (7, 9)}
    for bound, (before, through) in cases.items():
        row = key_table(pa.table({"v": pa.array([bound], pa.float64())}), keys)
        assert counts_before([sorted_], row, keys, inclusive) == [through if inclusive else before]
    # a long input takes several probe steps; two tables are searched together
    long = key_table(pa.table({"v": pa.array(np.repeat(np.arange(1000.0), 7))}), keys)
    row = key_table(pa.table({"v": pa.array([500.0])}), keys)
    want = 7 * 500 + (7 if inclusive else 0)
    assert counts_before([long, sorted_], row, keys, inclusive) == [want, 5]


@pytest.mark.parametrize("descending", [False, True])
def test_sort_partition_under_a_small_memory_keeps_nulls_last(
    descending: bool,
) -> None:
    table = data()
    memory = table.nbytes // 4
    context = OperatorContext(memory)
    op = on_duckdb(SortPartition(["k", "s"], descending, "s"))
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
    assert context.metrics.peak_memory_bytes > 0
    assert context.metrics.spilled_bytes == 0


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("by", [["k"], ["s"], ["x", "k"], ["s", "x", "k"]], ids="+".join)
def test_sort_partition_orders_the_keys_as_pyarrow_does(
    by: list[str], descending: bool, path: str
) -> None:
    """Nulls last and NaN after every number (before the nulls) in both directions, on
    int, string and float keys (descending, DuckDB's NaN would come first: ``sort_key``)."""
    table = data(30_000)
    op = opened(SortPartition(by, descending, "s"), path=path)
    out = [t for part in batches(table, 4000) for t in op.process(part, 0)]
    out += [*op.end_input(0), *op.finish()]
    op.close()
    order = "descending" if descending else "ascending"
    want = table.sort_by([(c, order, "at_end") for c in by])
    got = pa.concat_tables(out)
    same(got.select(by), want.select(by))
    total = [(c, "ascending", "at_end") for c in table.column_names]
    same(got.sort_by(total), table.sort_by(total))


def test_sort_partition_of_no_rows_still_emits_the_schema(path: str) -> None:
    op = opened(SortPartition(["k"], False, "s"), path=path)
    op.process(data(0), 0)
    (out,) = op.finish()
    op.close()
    assert out.num_rows == 0 and out.schema == data(0).schema


@pytest.mark.parametrize("descending", [False, True])
def test_sort_partition_gives_back_negative_zeros_as_they_were(descending: bool, path: str) -> None:
    """-0.0 and 0.0 tie, and each row keeps its own (DuckDB would write the key back
    normalized to 0.0 if it sorted on the column itself)."""
    rng = np.random.default_rng(8)
    x = rng.choice(np.array([0.0, -0.0, 1.0, -2.0, np.nan]), 20_000)
    table = pa.table({"x": x, "i": np.arange(20_000)})
    op = opened(SortPartition(["x"], descending, "s"), path=path)
    out = [t for part in batches(table, 3000) for t in op.process(part, 0)]
    out += [*op.end_input(0), *op.finish()]
    op.close()
    got = pa.concat_tables(out)
    got_x = got.column("x").to_numpy()
    assert (np.signbit(got_x) == np.signbit(x[got.column("i").to_numpy()])).all()
    order = "descending" if descending else "ascending"
    want = table.sort_by([("x", order, "at_end")]).column("x").to_numpy()
    assert np.array_equal(got_x, want, equal_nan=True)  # -0.0 == 0.0: the zeros tie


def test_a_partition_within_half_its_memory_is_sorted_on_arrow_and_counted_as_held() -> None:
    """The held batches are the operator's memory (its peak); DuckDB never runs."""
    table = data()
    context = OperatorContext(4 * table.nbytes)
    got = sorted_by(SortPartition(["k", "s"], False, "s"), table, 4000, context)
    want = table.sort_by([("k", "ascending", "at_end"), ("s", "ascending", "at_end")])
    assert got.select(["k", "s"]).equals(want.select(["k", "s"]))
    assert context.metrics.peak_memory_bytes >= table.nbytes
    assert context.metrics.database_peak_bytes == 0


def test_a_partition_past_half_its_memory_sends_what_it_held_to_duckdb() -> None:
    """The batches held before the limit was passed are sorted with the rest, once."""
    table = data()
    context = OperatorContext(table.nbytes)  # holds half, then DuckDB
    got = sorted_by(SortPartition(["x", "k"], True, "s"), table, 4000, context)
    order = [("x", "descending", "at_end"), ("k", "descending", "at_end")]
    same(got.select(["x", "k"]), table.sort_by(order).select(["x", "k"]))
    total = [(c, "ascending", "at_end") for c in table.column_names]
    same(got.sort_by(total), table.sort_by(total))
    assert context.metrics.database_peak_bytes > 0


def test_a_key_pyarrow_cannot_sort_is_sorted_on_duckdb() -> None:
    keys = [pa.MonthDayNano([0, 0, n % 7]) for n in range(5000)]
    table = pa.table({"i": pa.array(keys, pa.month_day_nano_interval()), "v": np.arange(5000)})
    context = OperatorContext.unbounded()
    got = sorted_by(SortPartition(["i"], False, "s"), table, 1000, context)
    nanoseconds = [v.nanoseconds for v in got.column("i").to_pylist()]
    assert nanoseconds == sorted(n % 7 for n in range(5000))
    assert context.metrics.database_peak_bytes > 0
