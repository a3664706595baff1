"""Operators fed the way a task feeds them (many batches, any order), against plain
pyarrow; the aggregate and the sort as a task runs them (on DuckDB, ``on_duckdb``)."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from decimal import Decimal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from hybrid_shuffle.errors import PlanError
from hybrid_shuffle.operators import (
    Filter,
    HashAggregate,
    HashJoin,
    MapBatches,
    Select,
    SortPartition,
)
from hybrid_shuffle.operators.base import Operator
from hybrid_shuffle.operators.duck.operators import on_duckdb


def run(op: Operator, batches: Iterable[tuple[int, pa.Table]]) -> pa.Table:
    op.open()
    out: list[pa.Table] = []
    try:
        for index, table in batches:
            out.extend(op.process(table, index))
        for index in range(op.num_inputs):
            out.extend(op.end_input(index))
        out.extend(op.finish())
    finally:
        op.close()
    return pa.concat_tables(out)


def data(rows: int = 100_000) -> pa.Table:
    rng = np.random.default_rng(9)
    key = pc.cast(pa.array(rng.integers(0, 300, rows)), pa.string())
    key = pc.if_else(pa.array(rng.random(rows) < 0.01), pa.scalar(None, pa.string()), key)
    return pa.table(
        {
            "k": key,
            "n": pa.array(rng.integers(0, 1000, rows), mask=rng.random(rows) < 0.05),
            "x": pa.array(rng.random(rows), mask=rng.random(rows) < 0.05),
        }
    )


def batches(table: pa.Table, size: int, index: int = 0) -> list[tuple[int, pa.Table]]:
    return [(index, table.slice(i, size)) for i in range(0, table.num_rows, size)]


def test_aggregate_over_many_batches_equals_one_pyarrow_group_by() -> None:
    table = data()
    spec = {"n": ["sum", "count", "min", "max", "mean"], "x": ["sum", "mean"]}
    op = on_duckdb(HashAggregate(["k"], spec, "agg"))
    got = run(op, batches(table, 997)).sort_by("k")
    want = (
        table.group_by("k")
        .aggregate(
            [
                ("n", "sum"),
                ("n", "count"),
                ("n", "min"),
                ("n", "max"),
                ("n", "mean"),
                ("x", "sum"),
                ("x", "mean"),
            ]
        )
        .sort_by("k")
    )
    assert got.column_names == [
        "k",
        "n_sum",
        "n_count",
        "n_min",
        "n_max",
        "n_mean",
        "x_sum",
        "x_mean",
    ]
    for name in ["k", "n_sum", "n_count", "n_min", "n_max"]:
        assert got.column(name).equals(want.column(name)), name
    for name in ["n_mean", "x_sum", "x_mean"]:
        np.testing.assert_allclose(got.column(name).to_numpy(), want.column(name).to_numpy())


def test_aggregate_of_an_all_null_group_is_null_and_counts_zero() -> None:
    table = pa.table({"k": ["a", "a"], "n": pa.array([None, None], pa.int64())})
    op = on_duckdb(HashAggregate(["k"], {"n": ["sum", "count", "mean"]}, "agg"))
    got = run(op, [(0, table)])
    assert got.to_pylist() == [{"k": "a", "n_sum": None, "n_count": 0, "n_mean": None}]


def test_aggregate_names_a_missing_column_and_an_unknown_function() -> None:
    with pytest.raises(PlanError, match="aggregate 'agg': column 'amount' not in input"):
        HashAggregate(["k"], {"amount": "sum"}, "agg").output_schema([data(10).schema])
    with pytest.raises(PlanError, match="'median' is not an aggregation"):
        HashAggregate(["k"], {"n": "median"}, "agg")
    with pytest.raises(PlanError, match="cannot sum column 'k' of type string"):
        HashAggregate(["k"], {"k": "sum"}, "agg").output_schema([data(10).schema])


@pytest.mark.parametrize("how", ["inner", "left"])
def test_join_with_interleaved_inputs_equals_one_pyarrow_join(how: str) -> None:
    left = data(20_000)
    right = pa.table({"k": [str(i) for i in range(0, 300, 2)], "label": list(range(150))})
    arrivals = batches(left, 1500, 0)[:5] + batches(right, 40, 1) + batches(left, 1500, 0)[5:]
    got = run(on_duckdb(HashJoin(["k"], how, "j")), arrivals)
    want = left.join(right, keys="k", join_type="left outer" if how == "left" else "inner")
    key = [("k", "ascending"), ("n", "ascending"), ("x", "ascending")]
    assert got.num_rows == want.num_rows
    assert got.sort_by(key).equals(want.select(got.column_names).sort_by(key))


def test_join_key_type_mismatch_names_the_column_and_both_types() -> None:
    left = pa.schema([("k", pa.int64())])
    right = pa.schema([("k", pa.string())])
    with pytest.raises(PlanError) as err:
        HashJoin(["k"], "inner", "j").output_schema([left, right])
    assert str(err.value) == (
        "join 'j': key column 'k' is int64 on the left but string on the right; cast one side "
        "so both have the same type"
    )


@pytest.mark.parametrize("descending", [False, True])
def test_sort_puts_nulls_last_in_both_directions(descending: bool) -> None:
    table = pa.table({"v": [3, None, 1, 2, None]})
    op = on_duckdb(SortPartition(["v"], descending, "s"))
    got = run(op, batches(table, 2)).column("v").to_pylist()
    assert got == ([3, 2, 1, None, None] if descending else [1, 2, 3, None, None])


def test_filter_takes_an_expression_or_a_mask_function() -> None:
    table = pa.table({"v": [1, 5, 10]})
    assert run(Filter(pc.field("v") > 2, "f"), [(0, table)]).column("v").to_pylist() == [5, 10]
    by_mask = Filter(lambda t: t.column("v").to_numpy() < 6, "f")
    assert run(by_mask, [(0, table)]).column("v").to_pylist() == [1, 5]


def test_map_batches_accepts_pandas_and_rejects_other_types() -> None:
    table = pa.table({"v": [1, 2]})
    doubled = MapBatches(lambda t: pd.DataFrame({"v": t.column("v").to_numpy() * 2}), "m")
    assert run(doubled, [(0, table)]).column("v").to_pylist() == [2, 4]
    with pytest.raises(PlanError, match="map_batches 'm': the function returned a list"):
        run(MapBatches(lambda t: [1], "m"), [(0, table)])


def test_select_names_the_missing_column_and_the_columns_there_are() -> None:
    with pytest.raises(PlanError) as err:
        Select(["custmer"], "s").output_schema([pa.schema([("customer", pa.string())])])
    assert str(err.value) == "select 's': column 'custmer' not in input; columns are: customer"


def test_float_max_and_min_skip_nan_unless_a_group_has_nothing_else() -> None:
    nan = float("nan")
    table = pa.table({"k": ["a", "a", "b", "b", "c"], "x": [1.0, nan, nan, nan, None]})
    op = on_duckdb(HashAggregate(["k"], {"x": ["min", "max"]}, "agg"))
    got = run(op, batches(table, 1)).sort_by("k")
    want = table.group_by("k").aggregate([("x", "min"), ("x", "max")]).sort_by("k")
    assert got.column("x_max").to_pylist()[0] == 1.0 == want.column("x_max").to_pylist()[0]
    for name in ("x_min", "x_max"):  # NaN only where a group had nothing else
        assert pc.is_nan(got.column(name)).equals(pc.is_nan(want.column(name))), name
        assert pc.is_null(got.column(name)).equals(pc.is_null(want.column(name))), name


def test_integer_sums_wrap_as_pyarrows_do() -> None:
    table = pa.table(
        {
            "k": [1, 1, 2],
            "i": pa.array([2**62, 2**62, -5], pa.int64()),
            "u": pa.array([2**64 - 1, 5, 1], pa.uint64()),
            "s": pa.array([100, 100, -5], pa.int8()),
        }
    )
    op = on_duckdb(HashAggregate(["k"], {"i": "sum", "u": "sum", "s": "sum"}, "agg"))
    got = run(op, batches(table, 1)).sort_by("k")
    want = table.group_by("k").aggregate([("i", "sum"), ("u", "sum"), ("s", "sum")])
    assert got.equals(want.sort_by("k").select(got.column_names))
    assert got.column("i_sum").to_pylist() == [-(2**63), -5]  # wrapped, as pyarrow's


@pytest.mark.parametrize("which", ["aggregate", "sort"])
def test_close_in_the_middle_of_the_input_stops_the_work(which: str) -> None:
    """A task that fails or is cancelled mid-input only closes its operators: a DuckDB
    operator's query (running in a thread of its own) must stop, and nothing stays alive."""
    op = on_duckdb(
        HashAggregate(["k"], {"n": "sum"}, "stopped")
        if which == "aggregate"
        else SortPartition(["k"], False, "stopped")
    )
    op.open()
    for _, table in batches(data(50_000), 5_000)[:4]:
        assert list(op.process(table)) == []
    op.close()
    op.close()  # idempotent
    assert [t.name for t in threading.enumerate() if "stopped" in t.name] == []


def test_a_decimal_sum_past_its_type_is_an_error_never_a_wrapped_value() -> None:
    """A ``decimal(38, 2)`` column's sum has Spark's type, ``decimal(38, 2)``
    (``aggregation``): three of its largest values outgrow it, which is a ``PlanError``
    naming the column (DuckDB's int128 sum overflows), float keys or not (pyarrow's
    ``group_by`` sum would wrap there)."""
    top = Decimal(f"{10**38 - 1}e-2")  # the type's largest value
    table = pa.table({"k": [1, 1, 1], "d": pa.array([top] * 3, pa.decimal128(38, 2))})
    op = on_duckdb(HashAggregate(["k"], {"d": "sum"}, "agg"))
    with pytest.raises(PlanError, match="'d'"):
        run(op, batches(table, 1))
