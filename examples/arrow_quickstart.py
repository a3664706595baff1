"""Quickstart on Arrow data: revenue per customer, top customers first.

Generates an ``orders`` table (1M rows by default, with nulls and string keys),
cleans it, aggregates per customer across a hash exchange and sorts globally
across a range exchange, on an embedded local Ray.  Per-edge modes come from
``configs/quickstart.yaml``; run with ``--mode MODE`` to force one mode on every
edge and compare.  (The PySpark version of this job arrives with the Spark
bridge.)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import hybrid_shuffle as hs

ROOT = Path(__file__).resolve().parent.parent


def make_orders(rows: int, customers: int = 50_000, seed: int = 7) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, customers, rows)
    customer = pc.binary_join_element_wise("cust-", pa.array(ids).cast(pa.string()), "")
    amount = rng.gamma(2.0, 30.0, rows).round(2)
    amount_mask = rng.random(rows) < 0.01  # 1% unknown amounts
    customer_mask = rng.random(rows) < 0.001  # 0.1% orders without a customer
    return pa.table(
        {
            "order_id": pa.array(np.arange(rows, dtype=np.int64)),
            "customer": pc.if_else(pa.array(customer_mask), pa.scalar(None, pa.string()), customer),
            "amount": pa.array(amount, mask=amount_mask),
            "status": pa.array(np.where(rng.random(rows) < 0.05, "cancelled", "done")),
        }
    )


def clean(batch: pa.Table) -> pa.Table:
    """Drop cancelled orders (a vectorized filter inside a map_batches)."""
    return batch.filter(pc.equal(batch["status"], "done")).drop_columns(["status"])


def build(session: hs.Session, orders: pa.Table, mode: str | None) -> hs.Stream:
    job = session.job("revenue")
    source = job.from_arrow(orders, name="orders", parallelism=4)
    totals = (
        source.map_batches(clean, name="clean")
        .key_by("customer", edge="by_customer", mode=mode)
        .aggregate({"amount": ["sum", "count"]}, name="totals")
    )
    return totals.sort("amount_sum", descending=True, edge="to_sort", mode=mode)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--config", default=str(ROOT / "configs" / "quickstart.yaml"))
    parser.add_argument(
        "--mode",
        choices=["pipelined", "blocking", "hybrid-selective", "hybrid-full"],
        help="force this mode on every edge",
    )
    args = parser.parse_args(argv)
    orders = make_orders(args.rows)
    config = hs.load_config(args.config)
    if args.mode:  # code sets the mode; drop the YAML's edge modes so it applies
        config = config.with_overrides(edges={})
    try:
        with hs.Session(config) as session:
            top = build(session, orders, args.mode)
            print(top.explain())
            started = time.perf_counter()
            result = top.collect()
            elapsed = time.perf_counter() - started
    except hs.HybridShuffleError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(result.table.slice(0, 10).to_pandas().to_string(index=False))
    print(f"\n{result.table.num_rows} customers from {args.rows} orders in {elapsed:.2f} s")
    print(result.edge_summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
