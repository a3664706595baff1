"""Integer keys as offsets from the smallest: a key's slot in a dense index or aggregate.

``dense_index`` (a join's build side by its key) and ``dense_aggregate`` (a group-by's
perfect hash) both map an integer key of any width and signedness to ``key - low``.
The difference is taken on the keys' 64-bit two's-complement bit patterns as uint64,
so it wraps exactly as the difference of the integers does: a span across zero and a
uint64 key past 2^63 come out right, and a probe key below ``low`` comes out past
every slot (the index's test for "outside the span") instead of negative.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["key_offsets", "keys_at"]

_WRAP = 1 << 64


def key_offsets(keys: pa.Array | pa.ChunkedArray, low: int) -> np.ndarray:
    """``key - low`` per key, as uint64 modulo 2^64 (``keys``: integers without nulls)."""
    values: np.ndarray = keys.to_numpy()
    signed = pa.types.is_signed_integer(keys.type)
    bits: np.ndarray = values.astype(np.int64 if signed else np.uint64).view(np.uint64)
    return bits - np.uint64(low % _WRAP)


def keys_at(offsets: np.ndarray, low: int, key_type: pa.DataType) -> pa.Array:
    """The keys ``low + offset`` as an array of ``key_type``: ``key_offsets``' inverse."""
    bits = offsets.astype(np.uint64) + np.uint64(low % _WRAP)
    if pa.types.is_signed_integer(key_type):
        return pa.array(bits.view(np.int64), pa.int64()).cast(key_type)
    return pa.array(bits, pa.uint64()).cast(key_type)
