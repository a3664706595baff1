"""Issue 36, point 3: a hash join and an aggregate over TPC-H ``lineitem`` and ``orders``
whose exchanges carry several times ``shuffle.memory_budget``, every edge blocking
against every edge hybrid-selective, on 2 and 8 slots, paired round by round, with
no-spill sessions as the control; see ``benchmarks/hybrid_spill.py``."""

from __future__ import annotations

from types import SimpleNamespace

from benchmarks import hybrid_spill, tpch_data
from benchmarks.harness import Measurement, target
from benchmarks.suite import Context, Outcome, Suite


def run(ctx: Context) -> Outcome:
    args = SimpleNamespace(
        scale=ctx.scale, data=str(ctx.data), slots=[2, 8], parallelism=2, pairs=ctx.runs,
        budget="64 MiB", reference_budget="2 GiB", buffer_size="4 MiB",
        object_store=3072 if ctx.scale >= 1 else 300,
    )  # fmt: skip
    summary = hybrid_spill.measure(args)
    rows = summary["rows"]["lineitem"]
    cases = [
        Measurement(f"join + aggregate, {slots} slots", f"engine {variant}", rows,
                    f"TPC-H SF{ctx.scale:g}", seconds=[r["seconds"] for r in rs], checked=True)
        for slots, variants in summary["runs"].items()
        for variant, rs in variants.items()
    ]  # fmt: skip
    notes = hybrid_spill.report(summary)
    summary["targets"] = [
        target(f"{slots} slots: hybrid-selective / blocking (median of rounds)",
               b["hybrid-selective"]["median_pair_ratio"], hybrid_spill.TARGET)
        for slots, b in summary["by_slots"].items()
    ]  # fmt: skip
    return Outcome(cases, summary, notes)


SUITE = Suite(
    name="hybrid-spill",
    description="blocking vs hybrid-selective where blocking spills (join + aggregate)",
    issue="issue 36",
    scale_unit="TPC-H scale factor",
    default_scale=1,
    tiny_scale=0.01,
    systems=("engine",),
    oracle="DuckDB (keys and sums exactly, means to 1e-9)",
    run=run,
    runs=5,
    data=lambda scale, root: tpch_data.ensure(scale, root, ("lineitem", "orders")).parent,
)
