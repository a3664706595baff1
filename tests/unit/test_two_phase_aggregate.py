"""Partial (map-side) then final aggregation, and the dense integer-key path, against
one ``pyarrow`` ``group_by`` over the whole input.  The final phase runs as a task runs
it (on DuckDB, ``on_duckdb``); the combiner and its dense path run on Arrow
(``PartialAggregate`` is a per-batch step: it stays there)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from hybrid_shuffle.operators import HashAggregate, PartialAggregate
from hybrid_shuffle.operators.aggregation import Aggregation
from hybrid_shuffle.operators.dense_aggregate import dense_aggregate
from hybrid_shuffle.operators.duck.operators import on_duckdb
from hybrid_shuffle.shuffle.partitioner import hash_partition_ids, split_by_ids

SPEC = {"n": ["sum", "count", "min", "max", "mean"], "x": ["sum", "count", "mean"]}
PYARROW = [(c, fn) for c, fns in SPEC.items() for fn in fns]


def integer_keyed(
    rows: int, keys: int, seed: int = 3, key_type: pa.DataType | None = None
) -> pa.Table:
    """Keys centred on 0 (from 0 for unsigned types), 1% null keys, 5% null values."""
    rng = np.random.default_rng(seed)
    key_type = key_type or pa.int64()
    low = 0 if pa.types.is_unsigned_integer(key_type) else -(keys // 2)
    k = pa.array(rng.integers(low, low + keys, rows), mask=rng.random(rows) < 0.01)
    return pa.table(
        {
            "k": k.cast(key_type),
            "n": pa.array(rng.integers(-1000, 1000, rows), mask=rng.random(rows) < 0.05),
            "x": pa.array(rng.random(rows), mask=rng.random(rows) < 0.05),
        }
    )


def two_phase(table: pa.Table, producers: int, consumers: int, batch: int) -> pa.Table:
    """What a job does: combine in each producer, hash-partition partials, merge."""
    partials: list[list[pa.Table]] = [[] for _ in range(consumers)]
    rows = -(-table.num_rows // producers)
    for p in range(producers):
        combiner = PartialAggregate(["k"], SPEC, "agg")
        combiner.open()
        part = table.slice(p * rows, rows)
        out = [
            t
            for i in range(0, part.num_rows, batch)
            for t in combiner.process(part.slice(i, batch))
        ]
        out += combiner.end_input(0)
        combiner.close()
        for t in out:
            ids = hash_partition_ids(t, ["k"], consumers)
            for c, piece in enumerate(split_by_ids(t, ids, consumers)):
                partials[c].append(piece)
    results = []
    for c in range(consumers):
        final = on_duckdb(HashAggregate(["k"], SPEC, "agg", phase="final"))
        final.open()
        for t in partials[c]:
            final.process(t)
        results.extend(final.finish())
        final.close()
    return pa.concat_tables(results)


def assert_same_groups(got: pa.Table, want: pa.Table) -> None:
    order = [("k", "ascending")]
    got, want = got.sort_by(order), want.sort_by(order)
    assert got.num_rows == want.num_rows
    for name in want.column_names:
        if name.endswith("_mean") or name.startswith("x_"):
            np.testing.assert_allclose(
                got.column(name).to_numpy(zero_copy_only=False).astype(float),
                want.column(name).to_numpy(zero_copy_only=False).astype(float),
                rtol=1e-9,
            )
        else:
            assert got.column(name).equals(want.column(name)), name


@pytest.mark.parametrize("keys", [50, 100_000, 10**9])  # dense, dense and wide, hashed
def test_partials_merged_after_a_hash_exchange_equal_one_group_by(keys: int) -> None:
    table = integer_keyed(60_000, keys)
    got = two_phase(table, producers=3, consumers=4, batch=7_000)
    want = table.group_by("k").aggregate(PYARROW)
    assert_same_groups(got, want.select(got.column_names))


def test_combiner_sends_one_row_per_key_when_keys_repeat() -> None:
    table = integer_keyed(50_000, 100)
    combiner = PartialAggregate(["k"], {"x": "sum"}, "agg")
    combiner.open()
    emitted = [t for i in range(0, 50_000, 5_000) for t in combiner.process(table.slice(i, 5_000))]
    emitted += combiner.end_input(0)
    assert len(emitted) == 1
    assert emitted[0].num_rows == len(set(table.column("k").to_pylist()))


def test_combiner_passes_partials_on_when_keys_do_not_repeat() -> None:
    table = pa.table({"k": np.arange(40_000), "x": np.ones(40_000)})
    combiner = PartialAggregate(["k"], {"x": "sum"}, "agg")
    combiner.open()
    per_batch = [list(combiner.process(table.slice(i, 10_000))) for i in range(0, 40_000, 10_000)]
    assert [sum(t.num_rows for t in out) for out in per_batch] == [10_000] * 4
    assert list(combiner.end_input(0)) == []


@pytest.mark.parametrize("key_type", [pa.int8(), pa.int32(), pa.uint16(), pa.int64()])
def test_dense_path_gives_group_by_types_and_values(key_type: pa.DataType) -> None:
    table = integer_keyed(20_000, 100, key_type=key_type)
    aggs = [("n", "sum", "n_sum"), ("n", "count", "n_count"), ("x", "sum", "x_sum")]
    want = table.group_by("k").aggregate([(c, fn) for c, fn, _ in aggs])
    got = dense_aggregate(table, ["k"], aggs, want.schema)
    assert got is not None and got.schema == want.schema
    assert_same_groups(got, want)


def test_dense_path_keeps_all_null_sums_null_and_the_null_key_group() -> None:
    table = pa.table(
        {"k": pa.array([1, 1, None, 3], pa.int64()), "n": pa.array([None, None, 5, 2], pa.int64())}
    )
    aggs = [("n", "sum", "n_sum"), ("n", "count", "n_count")]
    schema = table.group_by("k").aggregate([("n", "sum"), ("n", "count")]).schema
    got = dense_aggregate(table, ["k"], aggs, schema)
    assert got is not None
    assert got.to_pylist() == [
        {"k": 1, "n_sum": None, "n_count": 0},
        {"k": 3, "n_sum": 2, "n_count": 1},
        {"k": None, "n_sum": 5, "n_count": 1},
    ]


@pytest.mark.parametrize(
    "values",
    [
        pa.array(["a", None, "b", None, "c"]),
        pa.array([True, None, False, None, True]),
        pa.array([None, None, None, None, None], pa.null()),
    ],
    ids=["string", "bool", "null"],
)
def test_dense_path_counts_a_column_it_cannot_add_nulls_apart(values: pa.Array) -> None:
    """Only numbers are summed; any column is counted, its nulls left out."""
    table = pa.table({"k": pa.array([1, 2, 2, 3, 3], pa.int64()), "s": values})
    want = table.group_by("k").aggregate([("s", "count")])
    got = dense_aggregate(table, ["k"], [("s", "count", "s_count")], want.schema)
    assert got is not None
    assert_same_groups(got, want)
    combined = Aggregation(["k"], {"s": "count"}, "a").partial(table)  # the combiner's path
    assert combined.sort_by("k").column("s_count").equals(want.sort_by("k").column("s_count"))


@pytest.mark.parametrize(
    "table, aggs",
    [
        (pa.table({"k": ["a"], "n": [1]}), [("n", "sum", "n_sum")]),  # not an integer key
        (pa.table({"k": [0, 10**9], "n": [1, 2]}), [("n", "sum", "n_sum")]),  # range too wide
        (pa.table({"k": [0, 1], "n": [1, 2]}), [("n", "min", "n_min")]),  # min/max
        (pa.table({"k": [0, 1], "n": [2**62, 2**62]}), [("n", "sum", "n_sum")]),  # inexact
    ],
)
def test_dense_path_declines_what_it_cannot_do_exactly(table: pa.Table, aggs: list) -> None:  # type: ignore[type-arg]
    schema = table.group_by("k").aggregate([(c, fn) for c, fn, _ in aggs]).schema
    assert dense_aggregate(table, ["k"], aggs, schema) is None
