"""Issue 27: what checksums on spill files cost.  A spilling hash repartition, blocking,
``shuffle.checksums: true`` against ``false`` in two sessions on one Ray, paired run by
run; every run checked (each row seen once, the keys' sum against pyarrow's); see
``benchmarks/checksums.py``."""

from __future__ import annotations

import os
import time

from benchmarks import checksums
from benchmarks.harness import Measurement, target
from benchmarks.suite import Context, Outcome, Suite


def run(ctx: Context) -> Outcome:
    rows = int(ctx.scale * 1e6)
    settle_until = time.monotonic() + (90.0 if ctx.scale >= 1 else 0.0)
    while os.getloadavg()[0] > checksums.SETTLED and time.monotonic() < settle_until:
        time.sleep(5)  # what ran before (another benchmark) is still in the load average
    budget = f"{max(32 * rows // 10_000_000, 1)} MiB"
    buffer = "4 MiB" if ctx.scale >= 1 else "128 KiB"
    object_store = 1536 << 20 if ctx.scale >= 1 else 300 << 20
    load_before = [round(x, 2) for x in os.getloadavg()]
    summary = checksums.measure(rows, ctx.runs, budget, buffer, object_store)
    summary["load_before"] = load_before
    summary["load_after"] = [round(x, 2) for x in os.getloadavg()]
    cases = [
        Measurement("spilling repartition", f"engine checksums {side}", rows, "uniform",
                    seconds=[r["seconds"] for r in summary["runs"][side]], checked=True,
                    note=f"spilled {summary['spilled_bytes_median'][side] / 2**20:.0f} MiB")
        for side in checksums.SIDES
    ]  # fmt: skip
    summary["targets"] = [
        target("checksums on / off (median of pairs)", summary["median_pair_ratio"],
               checksums.TARGET)
    ]  # fmt: skip
    return Outcome(cases, summary, checksums.report(summary))


SUITE = Suite(
    name="checksums",
    description="a spilling repartition with spill-file checksums on against off",
    issue="issue 27",
    scale_unit="million rows",
    default_scale=10,
    tiny_scale=0.2,
    systems=("engine",),
    oracle="pyarrow (rows seen once, sum of keys)",
    run=run,
    runs=7,
)
