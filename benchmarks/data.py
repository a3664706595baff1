"""Seeded benchmark data: int64 key ``k`` and float64 ``v``, uniform or Zipf keys."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

KEYS = 100_000


def make_table(rows: int, distribution: str, seed: int = 42) -> pa.Table:
    rng = np.random.default_rng(seed)
    if distribution == "uniform":
        k = rng.integers(0, KEYS, rows, dtype=np.int64)
    elif distribution == "zipf":
        k = np.minimum(rng.zipf(1.2, rows), KEYS).astype(np.int64) - 1
    else:
        raise ValueError(f"distribution must be uniform or zipf, got {distribution!r}")
    return pa.table({"k": k, "v": rng.random(rows)})


def blocks(table: pa.Table, count: int) -> list[pa.Table]:
    """``count`` contiguous, separately owned slices (the same blocks every system gets)."""
    rows = -(-table.num_rows // count)
    return [table.slice(i * rows, rows).combine_chunks() for i in range(count)]
