"""Cache a prepared aggregation once and query it from several jobs (FLIP-205).

    .venv/bin/python examples/cache_across_jobs.py [--rows 2000000]

One job aggregates the orders per customer and caches the result; three more
jobs query it (the top customers, a regrouping by customer, the customers with
many orders) without computing it again.  ``explain()`` shows the cache read,
and that the regrouping needs no exchange: the cache is already hash-partitioned
by customer.  Every answer is checked against pyarrow in this process.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import hybrid_shuffle as hs


def orders(rows: int, seed: int = 7) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "customer": rng.integers(0, max(rows // 20, 1), rows),
            "amount": rng.gamma(2.0, 30.0, rows),
        }
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=lambda s: int(float(s)), default=2_000_000)
    args = parser.parse_args(argv)
    data = orders(args.rows)
    expected = data.group_by("customer").aggregate([("amount", "sum"), ("amount", "count")])

    with hs.Session({"parallelism": 4}) as session:
        prepare = session.job("prepare")
        per_customer = (
            prepare.from_arrow(data, name="orders")
            .key_by("customer")
            .aggregate({"amount": ["sum", "count"]}, name="per_customer")
            .cache("per-customer")
        )
        started = time.perf_counter()
        info = per_customer.fill()
        print(
            f"filled '{info.name}': {info.rows:,} rows, {info.bytes / 2**20:.1f} MiB, "
            f"{info.partitioning}, in {time.perf_counter() - started:.2f} s"
        )

        top = session.job("top").from_cache(per_customer).sort("amount_sum", descending=True)
        regroup = (
            session.job("regroup")
            .from_cache(per_customer)
            .key_by("customer")
            .aggregate({"amount_count": "max"}, name="busiest")
        )
        many = session.job("many").from_cache(per_customer).filter(pc.field("amount_count") > 30)
        print(regroup.explain())
        for name, stream in (("top", top), ("regroup", regroup), ("many", many)):
            result = stream.collect()
            print(
                f"job '{name}': {result.table.num_rows:,} rows in "
                f"{result.wall_seconds:.2f} s, cache {result.caches}"
            )
            if name == "top":
                best = pc.max(expected.column("amount_sum")).as_py()
                assert abs(result.table.column("amount_sum")[0].as_py() - best) < 1e-6 * best
            elif name == "regroup":
                assert result.table.num_rows == expected.num_rows
            else:
                want = expected.filter(pc.field("amount_count") > 30).num_rows
                assert result.table.num_rows == want
        for cache in session.caches():
            print(
                f"cache '{cache.name}': {cache.state}, {cache.hits} hits, "
                f"held by {', '.join(cache.holders)}"
            )
        per_customer.invalidate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
