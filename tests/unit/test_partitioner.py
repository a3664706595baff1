"""Partition kernels: deterministic, balanced, null-safe, and every row placed once."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from hybrid_shuffle.shuffle.api import KeyRange, PartitionDescriptor, PartitionId
from hybrid_shuffle.shuffle.metrics import WriteMetrics
from hybrid_shuffle.shuffle.partition_type import partition_type
from hybrid_shuffle.shuffle.partitioner import (
    bucket_overlaps,
    hash_partition_ids,
    range_boundaries,
    range_bucket_mask,
    round_robin_ids,
    sample_keys,
    split_by_ids,
)
from hybrid_shuffle.shuffle.routing import Partitioner, PartitionerKind
from hybrid_shuffle.shuffle.writer import ResultPartitionWriter

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


def _byte_keys(rng: np.random.Generator, n: int, large: bool = False) -> pa.Array:
    """Binary keys of 0-11 bytes drawn from few byte values (long shared prefixes, zero
    bytes, 0xff, proper prefixes of each other), some null; sliced, so offsets start
    past zero."""
    alphabet = [0, 1, 127, 128, 255]
    values = [
        None if i % 97 == 0 else bytes(rng.choice(alphabet, rng.integers(0, 12)).tolist())
        for i in range(n + 7)
    ]
    return pa.array(values, pa.large_binary() if large else pa.binary()).slice(7)


class _Recorded:
    """A partition that records what the writer hands it."""

    def __init__(self, readers: int) -> None:
        self.descriptor = PartitionDescriptor(
            PartitionId("job/e/0.0"),
            "job",
            "e",
            0,
            1,
            readers,
            partition_type("blocking"),
            Partitioner(PartitionerKind.RANGE, ("k",)),
        )
        self.metrics = WriteMetrics("e", 0)
        self.sample: tuple[pa.Array, float] | None = None
        self.buffers: list[tuple[pa.Table, KeyRange | None]] = []
        self.schema: pa.Schema | None = None

    def add(self, subpartition: int, table: pa.Table, key_range: KeyRange | None = None) -> None:
        assert subpartition == 0 and self.sample is not None  # the sample comes first
        self.buffers.append((table, key_range))

    def publish_sample(self, sample: tuple[pa.Array, float]) -> None:
        self.sample = sample

    def finish(self, schema: pa.Schema | None = None) -> None:
        self.schema = schema

    def fail(self, reason: str) -> None:
        raise AssertionError(reason)

    def finished_buffers(self) -> None:
        return None


def _written(table: pa.Table, readers: int, buffer_size: int) -> _Recorded:
    partition = _Recorded(readers)
    writer = ResultPartitionWriter(partition, buffer_size)  # type: ignore[arg-type]
    for start in range(0, table.num_rows, 3000):
        writer.emit(table.slice(start, 3000))
    writer.finish()
    return partition


@pytest.mark.parametrize("key", ["binary", "int"])
def test_a_range_writer_s_buffers_and_sample_give_every_consumer_its_rows(key: str) -> None:
    """Every row is written once, after a sample that yields balanced buckets, in
    buffers whose key ranges are their rows'; a consumer that skips the buffers whose
    range cannot hold its bucket misses none of its rows.  An integer key without
    nulls is sorted, so a consumer reads about its share; a binary one goes as it came,
    and each consumer reads every buffer."""
    rng = np.random.default_rng(11)
    keys = (
        _byte_keys(rng, 20_000)
        if key == "binary"
        else pa.array(rng.integers(-500, 500, 20_000))  # no null: NumPy sorts it
    )
    table = pa.table({"k": keys, "row": np.arange(len(keys))})
    partition = _written(table, readers=3, buffer_size=16 << 10)
    got = pa.concat_tables([t for t, _ in partition.buffers])
    assert sorted(got.column("row").to_pylist()) == list(range(table.num_rows))
    assert len(partition.buffers) > 3
    assert partition.sample is not None
    boundaries = range_boundaries([partition.sample], 3)
    sizes = [pc.sum(range_bucket_mask(keys, boundaries, j, 3)).as_py() for j in range(3)]
    assert min(sizes) > 0.2 * len(keys)
    for bucket in range(3):
        read = 0
        for piece, key_range in partition.buffers:
            assert key_range is not None
            values = [v for v in piece.column("k").to_pylist() if v is not None]
            assert key_range.has_nulls == (len(values) < piece.num_rows)
            if values:
                assert key_range.min_key.as_py() == min(values)
                assert key_range.max_key.as_py() == max(values)
            if key_range.may_hold(boundaries, bucket, 3, take_nulls=bucket == 2):
                read += piece.num_rows
            else:
                mask = range_bucket_mask(piece.column("k"), boundaries, bucket, 3)
                assert not pc.any(mask).as_py()
        assert read < 0.5 * table.num_rows if key == "int" else read == table.num_rows


def test_a_sample_of_unsorted_keys_skips_nulls_and_weighs_the_rows_it_stands_for() -> None:
    keys = pa.chunked_array([[None, 5, 1, None], [3, float("nan"), 2, 4]], pa.float64())
    sample, weight = sample_keys(keys, 4)
    assert isinstance(sample, pa.Array)
    assert all(v is not None and v == v for v in sample.to_pylist())
    assert weight * len(sample) == 5  # the non-null, non-NaN rows
    nulls = pa.array([None] * 999 + [7.0])  # the evenly spaced rows miss the one value
    assert sample_keys(nulls, 10) == (pa.array([7.0]), 1.0)
    chunked = pa.chunked_array([[], [4, 1], [], [3], [2, 5, 0]], pa.int64())
    assert sample_keys(chunked, 3)[0].to_pylist() == [4, 3, 0]  # rows 0, 2 and 5


def test_a_range_writer_with_one_reader_writes_its_rows_as_they_came() -> None:
    table = pa.table({"k": _byte_keys(np.random.default_rng(12), 500), "row": np.arange(500)})
    partition = _written(table, readers=1, buffer_size=1 << 20)
    assert partition.sample is not None and len(partition.sample[0]) == 0
    assert [(t.column("row").to_pylist(), r) for t, r in partition.buffers] == [
        (list(range(500)), None)
    ]
