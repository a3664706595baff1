"""Hash partitioning and two-phase aggregation group rows exactly as one pyarrow
``group_by`` does, for the keys where that is easy to get wrong: floats (``0.0``
and ``-0.0``, NaNs with different payloads), nulls, uint64 keys at and above
2^63, and ``mean`` of integers whose sum passes 2^53.  The aggregations run on both
way a task runs them: the combiner on Arrow, the final phase on DuckDB (``on_duckdb``),
which stages float keys as their bits so that they group as pyarrow's do.
"""

from __future__ import annotations

import subprocess
import sys
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from hybrid_shuffle.operators import HashAggregate, PartialAggregate
from hybrid_shuffle.operators.dense_aggregate import dense_aggregate
from hybrid_shuffle.operators.duck.operators import on_duckdb
from hybrid_shuffle.shuffle.partitioner import hash_partition_ids, split_by_ids

ROWS = 20_000
#: float64 NaNs: quiet, quiet with a payload, negative, signalling, another payload
NAN64 = [0x7FF8000000000000, 0x7FF8000000000001, 0xFFF8000000000000, 0x7FF0000000000001]
NAN32 = [0x7FC00000, 0x7FC00001, 0xFFC00000, 0x7F800001]


def floats(bits: list[int], dtype: type[np.floating[Any]]) -> list[float]:
    unsigned = np.uint64 if dtype is np.float64 else np.uint32
    return list(np.array(bits, dtype=unsigned).view(dtype))


def pick(pool: list[Any], key_type: pa.DataType, seed: int) -> pa.Array:
    """ROWS values drawn from ``pool`` (with repeats), about 3% of them null."""
    rng = np.random.default_rng(seed)
    index = rng.integers(0, len(pool), ROWS)
    if pa.types.is_floating(key_type):  # from NumPy, so that NaN payloads are kept
        dtype = np.float64 if key_type == pa.float64() else np.float32
        values = np.array(pool, dtype=dtype)[index]
        return pa.array(values, key_type, mask=rng.random(ROWS) < 0.03)
    mask = rng.random(ROWS) < 0.03
    return pa.array([None if m else pool[i] for i, m in zip(index, mask, strict=True)], key_type)


SPECIAL64 = [0.0, -0.0, 1.5, -2.25, np.inf, -np.inf, *floats(NAN64, np.float64)]
SPECIAL32 = [0.0, -0.0, 1.5, -2.25, np.inf, *floats(NAN32, np.float32)]
KEYS: dict[str, pa.Array] = {
    "f64": pick(SPECIAL64, pa.float64(), 1),
    "f32": pick(SPECIAL32, pa.float32(), 2),
    "u64": pick([0, 5, 2**63 - 1, 2**63, 2**63 + 7, 2**64 - 1], pa.uint64(), 3),
    "i64": pick([-(2**63), -1, 0, 2**63 - 1], pa.int64(), 4),
    "small": pick(list(range(40)), pa.int32(), 5),  # the dense path's kind of key
    "dec": pick([Decimal("1.50"), Decimal("-1.50"), Decimal("0")], pa.decimal128(12, 2), 6),
    "str": pick(["", "a", "ab", "b"], pa.string(), 7),
    "fsb": pick([b"ab", b"cd", b"\x00\x00"], pa.binary(2), 8),
    "view": pick(["", "a", "ab"], pa.string_view(), 9),
    "mdn": pick(
        [pa.MonthDayNano([1, 2, 3]), pa.MonthDayNano([0, 0, 0])], pa.month_day_nano_interval(), 10
    ),
    "none": pa.nulls(ROWS),
}


def values(seed: int = 11) -> pa.Array:
    """int64 values whose group sums pass 2^53 (and may wrap in int64) but whose float64
    partial sums are exact in any order: multiples of 2^11 below 2^51 in magnitude."""
    rng = np.random.default_rng(seed)
    v = rng.integers(-(2**40), 2**40, ROWS) * 2**11
    return pa.array(v, pa.int64(), mask=rng.random(ROWS) < 0.05)


def keyed(*keys: str) -> pa.Table:
    return pa.table({**{k: KEYS[k] for k in keys}, "v": values(), "row": np.arange(ROWS)})


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 8])
@pytest.mark.parametrize(
    "keys", [[k] for k in KEYS] + [["f64", "u64", "str"], ["none", "f32"]], ids="+".join
)
def test_rows_pyarrow_groups_together_get_one_partition(keys: list[str], n: int) -> None:
    table = keyed(*keys)
    ids = hash_partition_ids(table, keys, n)
    assert ids.min() >= 0 and ids.max() < n
    groups = table.group_by(keys, use_threads=False).aggregate([("row", "list")])
    for rows in groups.column("row_list").to_pylist():
        assert len(set(ids[rows].tolist())) == 1
    pieces = [hash_partition_ids(table.slice(i, 3_001), keys, n) for i in range(0, ROWS, 3_001)]
    assert np.array_equal(np.concatenate(pieces), ids)  # the same in any batching


def test_float_zeros_are_two_pyarrow_groups_in_one_partition_and_nans_too() -> None:
    zeros = pa.table({"k": pa.array([0.0, -0.0, 0.0, -0.0])})
    nans = pa.table({"k": pa.array(floats(NAN64, np.float64))})
    # pyarrow 26 groups floats by their bits: both zeros and every NaN payload apart
    assert zeros.group_by("k").aggregate([]).num_rows == 2
    assert nans.group_by("k").aggregate([]).num_rows == len(NAN64)
    for table in (zeros, nans):
        assert len(set(hash_partition_ids(table, ["k"], 64).tolist())) == 1


def test_new_key_kinds_hash_the_same_in_another_process() -> None:
    code = (
        "import numpy as np, pyarrow as pa;"
        "from hybrid_shuffle.shuffle.partitioner import hash_partition_ids;"
        "f = np.array([0x7FF8000000000001, 0x8000000000000000], np.uint64).view(np.float64);"
        "t = pa.table({'u': pa.array([2**63, 2**64 - 1], pa.uint64()), 'f': f});"
        "print(hash_partition_ids(t, ['u'], 7).tolist(), hash_partition_ids(t, ['f'], 7).tolist())"
    )
    here = pa.table(
        {
            "u": pa.array([2**63, 2**64 - 1], pa.uint64()),
            "f": floats([0x7FF8000000000001, 0x8000000000000000], np.float64),
        }
    )
    want = " ".join(str(hash_partition_ids(here, [k], 7).tolist()) for k in ("u", "f"))
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "777", "PATH": ""},
    )
    assert out.stdout.strip() == want


AGGREGATIONS = {"v": ["sum", "count", "min", "max", "mean"]}
PYARROW = [("v", fn) for fn in AGGREGATIONS["v"]]


def two_phase(table: pa.Table, keys: list[str], consumers: int, producers: int = 3) -> pa.Table:
    """What a job does: combine per producer, hash-partition the partials, merge."""
    partials: list[list[pa.Table]] = [[] for _ in range(consumers)]
    rows = -(-table.num_rows // producers)
    for p in range(producers):
        combiner = PartialAggregate(keys, AGGREGATIONS, "agg")
        combiner.open()
        part = table.slice(p * rows, rows)
        out = [
            t
            for i in range(0, part.num_rows, 2_500)
            for t in combiner.process(part.slice(i, 2_500))
        ]
        out += combiner.end_input(0)
        combiner.close()
        for t in out:
            for c, piece in enumerate(
                split_by_ids(t, hash_partition_ids(t, keys, consumers), consumers)
            ):
                partials[c].append(piece)
    results: list[pa.Table] = []
    for c in range(consumers):
        final = on_duckdb(HashAggregate(keys, AGGREGATIONS, "agg", phase="final"))
        final.open()
        for t in partials[c]:
            final.process(t)
        results.extend(final.finish())
        final.close()
    return pa.concat_tables(results)


def exact_key(column: pa.ChunkedArray | pa.Array) -> list[Any]:
    """A key column as comparable Python values: floats as their bits, nulls as None."""
    if not pa.types.is_floating(column.type):
        return column.to_pylist()
    width = np.uint64 if column.type == pa.float64() else np.uint32
    bits = pc.fill_null(column, 0.0).to_numpy(zero_copy_only=False).view(width).tolist()
    valid = pc.is_valid(column).to_numpy(zero_copy_only=False).tolist()
    return [b if ok else None for b, ok in zip(bits, valid, strict=True)]


def as_rows(table: pa.Table, keys: list[str]) -> list[tuple[Any, ...]]:
    """Every row as a tuple (keys exactly, then the aggregates), in a canonical order."""
    columns = [exact_key(table.column(k)) for k in keys]
    columns += [table.column(f"v_{fn}").to_pylist() for fn in AGGREGATIONS["v"]]
    return sorted(zip(*columns, strict=True), key=repr)


@pytest.mark.parametrize("consumers", [1, 3, 4])
@pytest.mark.parametrize(
    "keys", [["f64"], ["f32"], ["u64"], ["i64"], ["small"], ["none", "f64"]], ids="+".join
)
def test_two_phase_grouping_equals_one_pyarrow_group_by_at_any_parallelism(
    keys: list[str],
    consumers: int,
) -> None:
    table = keyed(*keys)
    got = two_phase(table, keys, consumers)
    want = table.group_by(keys, use_threads=False).aggregate(PYARROW)
    assert got.schema == want.schema
    assert as_rows(got, keys) == as_rows(want, keys)  # means too: their sums are exact


def test_mean_of_integers_adds_float64_values_as_pyarrow_does() -> None:
    # pyarrow's mean adds the values as float64: 2^53 + 1 + 1 stays 2^53 (the exact sum
    # would give another mean), and 2^62 + 2^62 does not wrap as an int64 sum does
    table = pa.table({"k": [1, 1, 1, 2, 2], "v": [2**53, 1, 1, 2**62, 2**62]})
    for dense in (True, False):
        keyed_table = table if dense else table.set_column(0, "k", pa.array(["a"] * 3 + ["b"] * 2))
        op = on_duckdb(HashAggregate(["k"], {"v": ["mean", "sum"]}, "agg"))
        op.open()
        op.process(keyed_table)
        got = pa.concat_tables(op.finish())
        op.close()
        want = keyed_table.group_by("k").aggregate([("v", "mean"), ("v", "sum")])
        assert got.to_pylist() == want.to_pylist()


@pytest.mark.parametrize(
    "keys",
    [
        [2**63, 2**63 + 3, 2**63 + 40, 2**63],  # unsigned, above int64
        [2**64 - 40, 2**64 - 1, 2**64 - 1],  # the top of uint64
    ],
)
def test_dense_path_groups_uint64_keys_at_and_above_2_63(keys: list[int]) -> None:
    table = pa.table(
        {"k": pa.array([*keys, None], pa.uint64()), "n": [1, 2, 3, 4, 5][: len(keys) + 1]}
    )
    aggs = [("n", "sum", "n_sum"), ("n", "count", "n_count")]
    want = table.group_by("k").aggregate([("n", "sum"), ("n", "count")])
    got = dense_aggregate(table, ["k"], aggs, want.schema)
    assert got is not None
    assert sorted(got.to_pylist(), key=repr) == sorted(want.to_pylist(), key=repr)


@pytest.mark.parametrize("low", [-(2**63), 2**63 - 41])
def test_dense_path_groups_int64_keys_at_the_ends_of_their_range(low: int) -> None:
    table = pa.table({"k": pa.array([low, low + 40, low, None], pa.int64()), "n": [1, 2, 3, 4]})
    aggs = [("n", "sum", "n_sum")]
    want = table.group_by("k").aggregate([("n", "sum")])
    got = dense_aggregate(table, ["k"], aggs, want.schema)
    assert got is not None
    assert sorted(got.to_pylist(), key=repr) == sorted(want.to_pylist(), key=repr)
