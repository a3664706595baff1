"""Partition kernels: deterministic, balanced, null-safe, and every row placed once."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from hybrid_shuffle.shuffle.partitioner import (
    bucket_overlaps,
    hash_partition_ids,
    range_boundaries,
    range_bucket_mask,
    round_robin_ids,
    sample_keys,
    split_by_ids,
)

MIXED = pa.table(
    {
        "s": ["a", "bb", None, "", "a", "ccc", "bb", None],
        "i": [1, 2, 3, None, 1, 2, 2, None],
        "f": [0.0, -0.0, 1.5, None, 0.0, 2.5, 1.5, None],
        "d": pa.array([1, 2, 3, None, 1, 2, 2, None], pa.date32()),
    }
)


@pytest.mark.parametrize("key", ["s", "i", "f", "d"])
def test_equal_keys_get_equal_ids_also_across_batches(key: str) -> None:
    whole = hash_partition_ids(MIXED, [key], 4)
    pieces = np.concatenate([hash_partition_ids(MIXED.slice(i, 3), [key], 4) for i in (0, 3, 6)])
    assert np.array_equal(whole, pieces)
    values = MIXED.column(key).to_pylist()
    for a in range(len(values)):
        for b in range(len(values)):
            if values[a] == values[b]:  # None == None too: nulls hash alike
                assert whole[a] == whole[b]


def test_a_string_key_hashes_alike_in_every_arrow_form_of_it() -> None:
    values = ["a", "bb", None, "", "Customer#000000001", "ccc" * 40]
    forms = [
        pa.array(values, pa.string()),
        pa.array(values, pa.large_string()),
        pa.array(values, pa.string_view()),
        pa.array(values, pa.string()).dictionary_encode(),
        pa.array(values, pa.string()).slice(0),
    ]
    ids = [hash_partition_ids(pa.table({"k": f}), ["k"], 5).tolist() for f in forms]
    assert all(i == ids[0] for i in ids)
    sliced = hash_partition_ids(pa.table({"k": forms[0].slice(2)}), ["k"], 5).tolist()
    assert sliced == ids[0][2:]


def test_hash_is_the_same_in_another_process_with_another_hash_seed() -> None:
    here = hash_partition_ids(MIXED, ["s", "i"], 7).tolist()
    code = (
        "import pyarrow as pa;"
        "from hybrid_shuffle.shuffle.partitioner import hash_partition_ids;"
        "t = pa.table({'s': ['a','bb',None,'','a','ccc','bb',None],"
        " 'i': [1,2,3,None,1,2,2,None]});"
        "print(hash_partition_ids(t, ['s','i'], 7).tolist())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": ""},
    )
    assert out.stdout.strip() == str(here)


@pytest.mark.parametrize("strings", [False, True])
def test_sequential_keys_spread_evenly(strings: bool) -> None:
    keys = pa.array(np.arange(100_000))
    table = pa.table({"k": pc.cast(keys, pa.string()) if strings else keys})
    counts = np.bincount(hash_partition_ids(table, ["k"], 8), minlength=8)
    assert np.all(np.abs(counts - counts.mean()) < 0.25 * counts.mean())


def test_split_keeps_every_row_once_in_original_order() -> None:
    table = pa.table({"k": np.arange(1000)})
    ids = round_robin_ids(1000, 3, start=2)
    parts = split_by_ids(table, ids, 3)
    assert sum(p.num_rows for p in parts) == 1000
    for n, part in enumerate(parts):
        got = part.column("k").to_numpy()
        assert np.all(np.diff(got) > 0)
        assert np.all((got + 2) % 3 == n)


@pytest.mark.parametrize("kind", ["int", "string"])
def test_range_buckets_place_every_non_null_row_exactly_once(kind: str) -> None:
    rng = np.random.default_rng(3)
    values = rng.integers(0, 500, 5000)
    keys = pa.array(values) if kind == "int" else pc.cast(pa.array(values), pa.string())
    keys = pa.array(keys.to_pylist()[:-10] + [None] * 10, type=keys.type)
    n = 5
    samples = []
    for chunk in range(4):  # four producers, each samples its own sorted part
        part = keys.slice(chunk * 1250, 1250)
        ordered = part.take(pc.array_sort_indices(part, null_placement="at_end"))
        samples.append(sample_keys(ordered, 100))
    boundaries = range_boundaries(samples, n)
    assert len(boundaries) == n - 1
    masks = [
        range_bucket_mask(keys, boundaries, j, n).to_numpy(zero_copy_only=False) for j in range(n)
    ]
    hits = np.sum(masks, axis=0)
    valid = pc.is_valid(keys).to_numpy(zero_copy_only=False)
    assert np.all(hits[valid] == 1) and np.all(hits[~valid] == 0)
    sizes = [int(m.sum()) for m in masks]
    assert min(sizes) > 0.5 * (valid.sum() / n)  # roughly balanced


def test_bucket_overlap_never_skips_a_buffer_holding_rows_of_the_bucket() -> None:
    rng = np.random.default_rng(5)
    boundaries = pa.array([100, 200, 300])
    for _ in range(300):
        chunk = pa.array(np.sort(rng.integers(0, 400, rng.integers(1, 50))))
        bounds = pc.min_max(chunk)
        for bucket in range(4):
            has_rows = bool(pc.any(range_bucket_mask(chunk, boundaries, bucket, 4)).as_py())
            overlaps = bucket_overlaps(bounds["min"], bounds["max"], False, boundaries, bucket, 4)
            assert overlaps or not has_rows


def test_no_samples_means_everything_in_the_first_bucket() -> None:
    empty = range_boundaries([(pa.array([], pa.int64()), 0.0)], 3)
    keys = pa.array([5, 1, None])
    assert range_bucket_mask(keys, empty, 0, 3).to_pylist() == [True, True, False]
    assert range_bucket_mask(keys, empty, 2, 3).to_pylist() == [False, False, False]
