"""Quickstart on Arrow data: revenue per customer, top customers first.

Generates an ``orders`` table (1M rows by default, with nulls and string keys),
cleans it, aggregates per customer across a hash exchange and sorts globally
across a range exchange, on an embedded local Ray.  Per-edge modes come from
``configs/quickstart.yaml``; run with ``--mode MODE`` to force one mode on every
edge and compare.  (``examples/main_job.py`` is the PySpark version.)

It is also a pipeline file (``hybrid_shuffle.pipeline_file``): ``SCHEMAS`` declares
the ``orders`` input, ``sources(job)`` makes it and ``build`` wires the job on it, so
the command line runs it, and explains it without Ray or data::

    python examples/arrow_quickstart.py [--rows N] [--mode MODE]
    hybrid-shuffle run examples/arrow_quickstart.py --config configs/quickstart.yaml
    hybrid-shuffle explain examples/arrow_quickstart.py --config configs/quickstart.yaml
    hybrid-shuffle validate --pipeline examples/arrow_quickstart.py configs/quickstart.yaml
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
#: the job's name when the config names none (configs/quickstart.yaml says ``job: revenue``)
JOB = "revenue"
#: the input's columns: what ``make_orders`` generates
SCHEMAS = {
    "orders": pa.schema(
        [
            ("order_id", pa.int64()),
            ("customer", pa.string()),
            ("amount", pa.float64()),
            ("status", pa.string()),
        ]
    )
}


def make_orders(rows: int, customers: int = 50_000, seed: int = 7) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, customers, rows)
    customer = pc.binary_join_element_wise("cust-", pa.array(ids).cast(pa.string()), "")
    amount = rng.gamma(2.0, 30.0, rows).round(2)
    amount_mask = rng.random(rows) < 0.01  # 1% unknown amounts
    customer_mask = rng.random(rows) < 0.001  # 0.1% orders without a customer
    table = pa.table(
        {
            "order_id": pa.array(np.arange(rows, dtype=np.int64)),
            "customer": pc.if_else(pa.array(customer_mask), pa.scalar(None, pa.string()), customer),
            "amount": pa.array(amount, mask=amount_mask),
            "status": pa.array(np.where(rng.random(rows) < 0.05, "cancelled", "done")),
        }
    )
    return table.cast(SCHEMAS["orders"])


def orders_source(job: hs.Job, rows: int = 1_000_000) -> hs.Stream:
    """``rows`` generated orders, in 4 source subtasks (configs/quickstart.yaml's
    ``parallelism``, which explain's stand-in gets)."""
    return job.from_arrow(make_orders(rows), name="orders", parallelism=4)


def sources(job: hs.Job) -> dict[str, hs.Stream]:
    """The real input (only ``hybrid-shuffle run`` calls it): 1M generated orders."""
    return {"orders": orders_source(job)}


def clean(batch: pa.Table) -> pa.Table:
    """Drop cancelled orders (a vectorized filter inside a map_batches)."""
    return batch.filter(pc.equal(batch["status"], "done")).drop_columns(["status"])


def build(session: hs.Session, orders: hs.Stream, mode: str | None = None) -> hs.Stream:
    """Revenue per customer, top first; ``mode`` forces one mode on both edges."""
    totals = (
        orders.map_batches(clean, name="clean")
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
    config = hs.load_config(args.config)
    if args.mode:  # code sets the mode; drop the YAML's edge modes so it applies
        config = config.with_overrides(edges={})
    try:
        with hs.Session(config) as session:
            job = session.job(config.job or JOB)  # the config's edges are for its job
            top = build(session, orders_source(job, args.rows), args.mode)
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
