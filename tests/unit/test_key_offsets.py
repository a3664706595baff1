"""``key_offsets`` and ``keys_at``: an integer key's offset from the smallest, and back,
at the ends of every integer type (the dense index and the dense aggregate share them)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from hybrid_shuffle.operators.key_offsets import key_offsets, keys_at

INTEGERS = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
UNSIGNED = [pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]


@pytest.mark.parametrize("kind", INTEGERS + UNSIGNED, ids=str)
def test_offsets_from_the_smallest_key_round_trip_at_the_ends_of_the_type(
    kind: pa.DataType,
) -> None:
    info = np.iinfo(kind.to_pandas_dtype())
    low, high = int(info.min), int(info.max)
    keys = pa.array([high, low, low + 1, high - 1], kind)
    offsets = key_offsets(keys, low)
    span = high - low  # up to 2^64 - 1: the uint64 offsets hold it
    assert offsets.dtype == np.uint64
    assert offsets.tolist() == [span, 0, 1, span - 1]
    assert keys_at(offsets, low, kind).equals(keys)


def test_a_key_below_the_smallest_wraps_past_every_slot() -> None:
    """What the dense index's probe relies on: ``offset < slots`` is false below ``low``."""
    offsets = key_offsets(pa.array([-5, 0, 9], pa.int64()), 0)
    assert offsets[0] >= np.uint64(1 << 63) and offsets[1:].tolist() == [0, 9]
