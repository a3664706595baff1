"""Generated data shared by the integration tests (seeded, with nulls and string keys)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def orders(rows: int, customers: int = 20_000, seed: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, customers, rows)
    customer = pc.binary_join_element_wise("c", pa.array(ids).cast(pa.string()), "")
    no_customer = pa.array(rng.random(rows) < 0.002)
    return pa.table(
        {
            "order_id": np.arange(rows, dtype=np.int64),
            "customer": pc.if_else(no_customer, pa.scalar(None, pa.string()), customer),
            "cents": pa.array(rng.integers(1, 100_000, rows), mask=rng.random(rows) < 0.01),
            "amount": pa.array(rng.gamma(2.0, 30.0, rows), mask=rng.random(rows) < 0.01),
        }
    )


def customers(count: int = 20_000, seed: int = 2) -> pa.Table:
    rng = np.random.default_rng(seed)
    segment = np.array(["retail", "wholesale", "online", "partner"])[rng.integers(0, 4, count)]
    keep = rng.random(count) < 0.9  # some orders have no customer record
    ids = np.arange(count)[keep]
    return pa.table(
        {
            "customer": pc.binary_join_element_wise("c", pa.array(ids).cast(pa.string()), ""),
            "segment": pa.array(segment[keep]),
        }
    )
