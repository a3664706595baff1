"""A join's build side indexed by its key, when the key is a dense run of integers.

A dimension table keyed by a surrogate key (``0..n``, or any run of integers with few
gaps) needs no hash table: the build row of a key is ``slots[key - low]``.  Probing
is then one NumPy gather per batch.  Measured on one thread (``BENCHMARKS.md``, issue
37's kernels): 12,500 build rows and 1.25M probe rows took 8 ms with this index, 20 ms
in pyarrow's join, 21-44 ms of CPU in DuckDB's own query and 55-78 ms through the
DuckDB join operator (staging, its query's thread, conforming).  ``duck/join.py`` uses
it for an inner or left join on one integer key whose build side ended small; every
other join stays on DuckDB.

``DenseIndex.of`` refuses (returns None) a key that is not an integer, has nulls or
duplicates (the index would not be a function of the key), or spans more than
``max_slots``, ``MAX_SPAN``, or ``DENSITY`` times its rows (and over ``MIN_SPAN``).
The slots cost memory, 8 bytes each, and past a few MiB every probe misses the caches:
1.25M unique build keys and 1.25M probe rows took 0.04-0.05 s over a span of 2.5M and
0.39-0.46 s over 10M, where DuckDB took 0.19-0.25 s either way (one thread).  A hash
exchange deals a dense key to ``p`` tasks, so each task's build keys span about ``p``
times their rows.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hybrid_shuffle.operators.key_offsets import key_offsets

__all__ = ["DENSITY", "MAX_SPAN", "MIN_SPAN", "DenseIndex"]

#: the most slots an index has per build row (the rest of the span is gaps), past
#: ``MIN_SPAN``
DENSITY = 16
#: a span always allowed (8 MiB of slots), whatever the rows
MIN_SPAN = 1 << 20
#: the largest span (32 MiB of slots): past it DuckDB's hash join is faster
MAX_SPAN = 1 << 22


class DenseIndex:
    """Build row per key, for keys ``low .. low + len(slots) - 1`` (-1: no build row)."""

    def __init__(self, low: int, slots: np.ndarray) -> None:
        self.low = low
        self.slots = slots

    @property
    def nbytes(self) -> int:
        return int(self.slots.nbytes)

    @classmethod
    def of(cls, keys: pa.Array | pa.ChunkedArray, max_slots: int) -> DenseIndex | None:
        """The index of build keys ``keys`` (row ``i`` has key ``keys[i]``), or None (see
        the module docstring)."""
        rows = len(keys)
        if not rows or not pa.types.is_integer(keys.type) or keys.null_count:
            return None
        bounds = pc.min_max(keys)
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        span = high - low + 1
        if span > max(DENSITY * rows, MIN_SPAN) or span > min(max_slots, MAX_SPAN):
            return None
        offsets = key_offsets(keys, low).astype(np.int64)
        slots = np.full(span, -1, dtype=np.int64)
        slots[offsets] = np.arange(rows, dtype=np.int64)
        if np.count_nonzero(slots >= 0) != rows:  # a key twice: not a function of the key
            return None
        return cls(low, slots)

    def positions(self, keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """Per probe key (of the build keys' type), its build row, or -1 (a null key, one
        outside the span or in a gap)."""
        if keys.null_count:
            valid = pc.is_valid(keys).to_numpy(zero_copy_only=False)
            keys = pc.fill_null(keys, self.low)
        else:
            valid = None
        offsets = key_offsets(keys, self.low)  # past the slots if below low: wrapped
        inside = offsets < np.uint64(len(self.slots))
        if valid is not None:
            inside &= valid
        rows = np.full(len(offsets), -1, dtype=np.int64)
        rows[inside] = self.slots[offsets[inside].astype(np.int64)]
        return rows
