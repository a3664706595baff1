"""``DenseBuild`` (a build side indexed by key value) answers exactly as ``Table.join``:
same schema, same rows, for inner and left joins, unique and duplicate build keys,
nulls on both sides, keys outside the build range, several key types; and it
declines (``None``) where it cannot, leaving the join to pyarrow."""

from __future__ import annotations

import datetime

import numpy as np
import pyarrow as pa
import pytest

from hybrid_shuffle.operators import HashJoin
from hybrid_shuffle.operators.dense_join import DenseBuild

HOW = {"inner": "inner", "left": "left outer"}


def as_type(array: pa.Array, key_type: pa.DataType) -> pa.Array:
    """int64 values as ``key_type`` (a date32 is cast through int32, as Arrow requires)."""
    return (
        array.cast(pa.int32()).cast(key_type) if key_type == pa.date32() else array.cast(key_type)
    )


def tables(
    key_type: pa.DataType, duplicates: bool, seed: int, rows: int = 3_000
) -> tuple[pa.Table, pa.Table]:
    rng = np.random.default_rng(seed)
    build_keys = np.arange(100, 600)
    if duplicates:
        build_keys = np.concatenate([build_keys, rng.choice(build_keys, 200)])
    right_keys = as_type(pa.array(build_keys, mask=rng.random(build_keys.size) < 0.05), key_type)
    right = pa.table(
        {
            "k": right_keys,
            "v": pa.array(rng.random(build_keys.size)),  # collides with the left's v
            "label": pa.array([f"l{i % 7}" for i in range(build_keys.size)]),
        }
    )
    probe = rng.integers(0, 700, rows)  # some keys below, inside and above the build range
    left = pa.table(
        {
            "id": np.arange(rows),
            "k": as_type(pa.array(probe, mask=rng.random(rows) < 0.05), key_type),
            "v": pa.array(rng.integers(0, 9, rows)),
        }
    )
    return left, right


def canonical(table: pa.Table) -> pa.Table:
    return table.sort_by([(c, "ascending") for c in table.column_names])


@pytest.mark.parametrize("how", ["inner", "left"])
@pytest.mark.parametrize("duplicates", [False, True])
@pytest.mark.parametrize("key_type", [pa.int64(), pa.int32(), pa.uint16(), pa.date32()])
def test_dense_build_equals_pyarrow_join(key_type: pa.DataType, duplicates: bool, how: str) -> None:
    left, right = tables(key_type, duplicates, seed=hash((str(key_type), duplicates, how)) % 1000)
    want = left.join(right, "k", join_type=HOW[how], right_suffix="_right", use_threads=False)
    build = DenseBuild.create(right, "k", how, want.schema, left.schema, "_right")
    assert build is not None
    got = pa.concat_tables([build.probe(left.slice(i, 700), "k") for i in range(0, 3_000, 700)])
    assert got.schema == want.schema
    assert canonical(got).equals(canonical(want))


def test_timestamp_keys_and_an_empty_probe_batch() -> None:
    base = datetime.datetime(2024, 1, 1)
    stamps = [base + datetime.timedelta(microseconds=i) for i in range(50)]
    right = pa.table({"t": pa.array(stamps, pa.timestamp("us"))})
    right = right.append_column("x", pa.array(range(50)))
    left = pa.table({"t": right["t"].take(pa.array([3, 3, 49, 0])), "y": [1, 2, 3, 4]})
    want = left.join(right, "t", join_type="left outer", use_threads=False)
    build = DenseBuild.create(right, "t", "left", want.schema, left.schema, "_right")
    assert build is not None
    assert canonical(build.probe(left, "t")).equals(canonical(want))
    assert build.probe(left.slice(0, 0), "t").num_rows == 0


def test_declines_sparse_string_and_all_null_keys() -> None:
    left = pa.table({"k": pa.array([1, 2], pa.int64())})
    sparse = pa.table({"k": pa.array([0, 10**12], pa.int64()), "x": [1, 2]})
    strings = pa.table({"k": ["a", "b"], "x": [1, 2]})
    nulls = pa.table({"k": pa.array([None, None], pa.int64()), "x": [1, 2]})
    for right in (sparse, nulls):
        schema = left.join(right, "k").schema
        assert DenseBuild.create(right, "k", "inner", schema, left.schema, "_right") is None
    str_left = pa.table({"k": ["a"]})
    schema = str_left.join(strings, "k").schema
    assert DenseBuild.create(strings, "k", "inner", schema, str_left.schema, "_right") is None


@pytest.mark.parametrize("how", ["inner", "left"])
def test_hash_join_operator_uses_it_and_matches_pyarrow(how: str) -> None:
    left, right = tables(pa.int64(), duplicates=True, seed=3)
    op = HashJoin(["k"], how, "j")
    op.open()
    out = [*op.process(right, 1), *op.end_input(1)]
    for i in range(0, left.num_rows, 500):
        out += op.process(left.slice(i, 500), 0)
    out += [*op.end_input(0), *op.finish()]
    assert op._dense is not None  # the indexed path ran
    want = left.join(right, "k", join_type=HOW[how], right_suffix="_right", use_threads=False)
    assert canonical(pa.concat_tables(out)).equals(canonical(want))
