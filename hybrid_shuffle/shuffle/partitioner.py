"""Vectorized partition kernels: hash, round-robin and range.

Plain functions over Arrow and NumPy, no Ray, no per-row Python.  Hashes must
agree across processes and runs (Python's ``hash()`` of ``str`` does not), so
fixed-width keys are mixed with splitmix64 and variable-width keys (strings,
binary) hashed by DuckDB over their bytes (``bytes_hash``), then mixed.

What a hash partitioner guarantees: rows whose keys pyarrow's ``group_by`` and
``join`` treat as equal get the same partition, in any process, for any number
of partitions, so each group (or join key) is whole in one consumer and grouping
after the exchange equals one ``group_by`` over all rows.  The hash may be
coarser than pyarrow's equality (a partition then holds several groups, which
``group_by`` keeps apart), never finer:

* nulls of a column all hash alike (``group_by`` makes them one group; a join
  never matches them, so where they go does not matter to it);
* floats: pyarrow 26 compares float keys by their bits, so ``0.0`` and ``-0.0``
  are two groups and NaNs with different payloads are different groups.  Here
  ``-0.0`` hashes as ``0.0`` and every NaN alike, so keys equal by their bits
  or by their value always share a partition;
* integers by value within their type: unsigned keys are zero-extended (a uint64
  at or above 2^63 keeps its bits), signed ones sign-extended; temporal types by
  their integer value; decimals and intervals by their fixed-width bytes;
  strings, binary and their view and fixed-size forms by their bytes; booleans
  by value; dictionary keys by their decoded values (pyarrow goes by index,
  which is finer);
* a key of type null is null in every row: one partition.

Range partitioning (a global sort) works on one key: producers publish a
sample of their keys (``sample_keys``), every consumer derives the same
``range_boundaries`` from all samples, and bucket ``j`` holds the non-null keys
``boundaries[j-1] <= key < boundaries[j]`` (bucket 0 unbounded below, the last
bucket unbounded above).  Null and NaN keys belong to no bucket here; callers
route them (both sort last).  With no samples at all the boundaries are empty and
bucket 0 holds every key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hybrid_shuffle.shuffle.bytes_hash import bytes_hash

__all__ = [
    "bucket_overlaps",
    "hash_partition_ids",
    "one_array",
    "range_boundaries",
    "range_bucket_mask",
    "round_robin_ids",
    "sample_keys",
    "sort_order",
    "split_by_ids",
]

_NULL_HASH = np.uint64(0x9E3779B97F4A7C15)
#: the bits every NaN key is hashed as, whatever its sign and payload
_NAN_BITS = np.float64(np.nan).view(np.uint64)
#: NumPy types of the fixed-width values read straight from an Arrow data buffer
_WORDS = {1: np.uint8, 2: np.uint16, 4: np.uint32}


def _mix(x: np.ndarray, in_place: bool = False) -> np.ndarray:
    """splitmix64 finaliser, elementwise on uint64 (wrapping arithmetic); ``in_place``
    may reuse ``x`` when the caller owns it.  One scratch array, no other temporaries."""
    x = x if in_place and x.dtype == np.uint64 else x.astype(np.uint64, copy=True)
    shifted = np.empty_like(x)
    with np.errstate(over="ignore"):
        for shift, factor in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB), (31, 0)):
            np.right_shift(x, np.uint64(shift), out=shifted)
            np.bitwise_xor(x, shifted, out=x)
            if factor:
                np.multiply(x, np.uint64(factor), out=x)
    return x


def _float_hash(array: pa.Array) -> np.ndarray:
    """Floats by bits, with ``-0.0`` as ``0.0`` and one NaN (see the module docstring);
    no arithmetic on the values, so a NaN's payload cannot depend on the CPU."""
    values = pc.cast(array, pa.float64()).to_numpy(zero_copy_only=False)  # nulls: NaN
    bits = np.where(values == 0.0, 0.0, values).view(np.uint64)  # a copy we own
    bits[np.isnan(values)] = _NAN_BITS
    return _mix(bits, in_place=True)


def _integer_hash(array: pa.Array) -> np.ndarray:
    """Integers (and temporal values as integers) widened to 64 bits: unsigned ones
    as uint64 (a cast of a uint64 >= 2^63 to int64 would fail), signed ones as int64."""
    t = array.type
    if not pa.types.is_integer(t):
        array = array.view(pa.int64() if t.bit_width == 64 else pa.int32())
        t = array.type
    wide = pa.uint64() if pa.types.is_unsigned_integer(t) else pa.int64()
    if t != wide:
        array = pc.cast(array, wide)
    if array.null_count:
        array = pc.fill_null(array, 0)
    return _mix(array.to_numpy(zero_copy_only=False).view(np.uint64))


def _fixed_width_hash(array: pa.Array) -> np.ndarray:
    """Decimals and intervals by the bytes of each value, read from the data buffer
    (several 64-bit words for 128- and 256-bit values, combined as keys are)."""
    n = len(array)
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    width = array.type.bit_width // 8
    data = array.buffers()[1]
    if width < 8:
        words = np.frombuffer(data, _WORDS[width], n, array.offset * width).astype(np.uint64)
        return _mix(words, in_place=True)
    per_value = width // 8
    words = np.frombuffer(data, np.uint64, n * per_value, array.offset * width)
    words = words.reshape(n, per_value)
    hashed = _mix(words[:, 0])
    with np.errstate(over="ignore"):
        for j in range(1, per_value):
            hashed *= np.uint64(31)
            hashed += words[:, j]
            hashed = _mix(hashed, in_place=True)
    return hashed


def one_array(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``column`` as one array: its chunk itself when it has one (``combine_chunks``
    copies even then, a pass over fresh memory for every key of every batch)."""
    if not isinstance(column, pa.ChunkedArray):
        return column
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _column_hash(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    array = one_array(column)
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    t = array.type
    if pa.types.is_string_view(t) or pa.types.is_fixed_size_binary(t):
        array = pc.cast(array, pa.string() if pa.types.is_string_view(t) else pa.binary())
    elif pa.types.is_binary_view(t):
        array = pc.cast(array, pa.binary())
    t = array.type
    if (
        pa.types.is_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_string(t)
        or pa.types.is_large_binary(t)
    ):
        hashed = _mix(bytes_hash(array), in_place=True)
    elif pa.types.is_floating(t):
        hashed = _float_hash(array)
    elif pa.types.is_boolean(t):
        hashed = _mix(pc.fill_null(array, False).to_numpy(zero_copy_only=False).astype(np.uint64))
    elif pa.types.is_decimal(t) or pa.types.is_interval(t):
        hashed = _fixed_width_hash(array)
    elif pa.types.is_integer(t) or pa.types.is_temporal(t):
        hashed = _integer_hash(array)
    elif pa.types.is_null(t):
        return np.full(len(array), _NULL_HASH, dtype=np.uint64)
    else:
        raise TypeError(f"cannot hash-partition a column of type {t}; cast it to string first")
    if array.null_count:
        hashed = np.where(pc.is_null(array).to_numpy(zero_copy_only=False), _NULL_HASH, hashed)
    return hashed


def _id_dtype(n: int) -> type[np.integer[Any]]:
    """The narrowest id type: NumPy's stable sort is a radix sort up to 16 bits."""
    if n <= 1 << 8:
        return np.uint8
    return np.uint16 if n <= 1 << 16 else np.int64


def _key_hashes(table: pa.Table, keys: Sequence[str]) -> np.ndarray:
    """The uint64 row hash of ``keys`` (the per-column hashes combined), equal for equal
    keys in any process: what ``hash_partition_ids`` reduces.  A column's hash is mixed
    already, so one key's is used as it is and each further key's is mixed with the
    hash so far (mixing a single key's hash a second time made the ids take 1.4x as
    long: ``benchmarks run batch-steps``)."""
    combined: np.ndarray | None = None
    with np.errstate(over="ignore"):
        for key in keys:
            hashed = _column_hash(table.column(key))
            if combined is None:
                combined = hashed
            else:
                hashed += combined * np.uint64(31)
                combined = _mix(hashed, in_place=True)
    if combined is None:
        combined = _mix(np.zeros(table.num_rows, dtype=np.uint64), in_place=True)
    return combined


def _reduce(hashed: np.ndarray, n: int) -> np.ndarray:
    """``hashed % n``, of the narrowest integer type that holds ``n - 1``."""
    if n & (n - 1) == 0:  # a power of two: the same ids without a division
        return (hashed & np.uint64(n - 1)).astype(_id_dtype(n))
    return (hashed % np.uint64(n)).astype(_id_dtype(n))


def hash_partition_ids(table: pa.Table, keys: Sequence[str], n: int) -> np.ndarray:
    """Partition id in ``[0, n)`` of every row, equal for equal keys in any process
    (of the narrowest integer type that holds ``n - 1``)."""
    return _reduce(_key_hashes(table, keys), n)


def round_robin_ids(num_rows: int, n: int, start: int) -> np.ndarray:
    return ((np.arange(num_rows, dtype=np.int64) + start) % n).astype(_id_dtype(n))


def split_by_ids(table: pa.Table, ids: np.ndarray, n: int) -> list[pa.Table]:
    """``n`` tables, rows of each in their original order (one take, then zero-copy slices)."""
    ids = ids.astype(_id_dtype(n), copy=False)
    order = np.argsort(ids, kind="stable")  # a radix sort on 8/16-bit ids: linear
    counts = np.bincount(ids, minlength=n)
    grouped = table.take(pa.array(order))
    bounds = np.concatenate([[0], np.cumsum(counts)])
    return [grouped.slice(int(bounds[i]), int(counts[i])) for i in range(n)]


def sample_keys(keys: pa.Array | pa.ChunkedArray, max_samples: int) -> tuple[pa.Array, float]:
    """About ``max_samples`` of a key column's non-null keys, at evenly spaced rows (in
    any order: sorted or not), and the number of rows each sample stands for.  A column
    of several chunks is sampled chunk by chunk (never concatenated)."""
    # NaN sorts after every number, with the nulls: neither may become a boundary
    valid = len(keys) - pc.sum(pc.is_null(keys, nan_is_null=True)).as_py()
    if valid == 0:
        return one_array(keys.slice(0, 0)), 0.0
    count = min(len(keys), max_samples)
    positions = np.linspace(0, len(keys) - 1, count).round().astype(np.int64)
    picked = _take_rows(keys, positions)
    sample = picked.filter(pc.invert(pc.is_null(picked, nan_is_null=True)))
    if len(sample) == 0:  # the evenly spaced rows were all null: sample the others
        return sample_keys(keys.filter(pc.invert(pc.is_null(keys, nan_is_null=True))), count)
    return sample, valid / len(sample)


def _take_rows(column: pa.Array | pa.ChunkedArray, positions: np.ndarray) -> pa.Array:
    """``column.take(positions)`` for ascending ``positions``, as one array, taking from
    each chunk what falls in it (a chunked ``take`` concatenates the whole column)."""
    if not isinstance(column, pa.ChunkedArray):
        return column.take(pa.array(positions))
    starts = np.cumsum([0] + [len(c) for c in column.chunks])
    chunk_of = np.searchsorted(starts, positions, side="right") - 1
    parts = [
        column.chunk(int(c)).take(pa.array(positions[chunk_of == c] - starts[c]))
        for c in np.unique(chunk_of)
    ]
    return pa.concat_arrays(parts) if parts else one_array(column.slice(0, 0))


def sort_order(column: pa.Array | pa.ChunkedArray, descending: bool) -> np.ndarray | None:
    """The row order that sorts an integer column without nulls, from NumPy's introsort,
    or ``None`` for any other column (the range writer then leaves the rows unsorted).

    Not stable, and that is all it gives up: on 1.25M random int64 keys it takes a
    quarter of pyarrow's ``sort_indices`` (35 ms against 139 ms here; pyarrow's sort is
    a stable merge sort), and a range sort sorts every row twice (each producer before
    it publishes its sample, each consumer its partition).  Equal keys may come out in
    any order, which no sort of ours promises otherwise."""
    if not pa.types.is_integer(column.type) or column.null_count:
        return None
    values = column.to_numpy()
    order = np.argsort(values)
    return np.ascontiguousarray(order[::-1]) if descending else order


def range_boundaries(samples: Sequence[tuple[pa.Array, float]], n: int) -> pa.Array:
    """``n - 1`` ascending boundaries at the weighted quantiles of all samples."""
    parts = [(a, w) for a, w in samples if len(a)]
    if not parts or n <= 1:
        typed = [a for a, _ in samples]
        return typed[0].slice(0, 0) if typed else pa.array([])
    keys = pa.concat_arrays([a for a, _ in parts])
    weights = np.concatenate([np.full(len(a), w) for a, w in parts])
    order = pc.sort_indices(keys).to_numpy()
    keys = keys.take(pa.array(order))
    cumulative = np.cumsum(weights[order])
    targets = cumulative[-1] * np.arange(1, n) / n
    idx = np.minimum(np.searchsorted(cumulative, targets, side="left"), len(keys) - 1)
    return keys.take(pa.array(idx))


def range_bucket_mask(
    keys: pa.Array | pa.ChunkedArray, boundaries: pa.Array, bucket: int, n: int
) -> pa.Array:
    """True for the non-null keys of ascending bucket ``bucket`` (nulls: False)."""
    lower, upper, empty = _bounds(boundaries, bucket)
    mask = pc.is_valid(keys)
    if empty:
        return pc.and_(mask, pa.scalar(False))
    if lower is not None:
        mask = pc.and_kleene(mask, pc.greater_equal(keys, lower))
    if upper is not None:
        mask = pc.and_kleene(mask, pc.less(keys, upper))
    return pc.fill_null(mask, False)


def bucket_overlaps(
    min_key: Any, max_key: Any, has_nulls: bool, boundaries: pa.Array, bucket: int, n: int
) -> bool:
    """Whether non-null keys spanning ``[min_key, max_key]`` can fall into ``bucket``."""
    lower, upper, empty = _bounds(boundaries, bucket)
    if empty or not min_key.is_valid:
        return False
    if lower is not None and pc.less(max_key, lower).as_py():
        return False
    return not (upper is not None and pc.greater_equal(min_key, upper).as_py())


def _bounds(boundaries: pa.Array, bucket: int) -> tuple[Any, Any, bool]:
    """(lower, upper, empty) of a bucket; None means unbounded."""
    if bucket > len(boundaries):
        return None, None, True
    lower = boundaries[bucket - 1] if bucket > 0 else None
    upper = boundaries[bucket] if bucket < len(boundaries) else None
    return lower, upper, False
