"""Workload 3 (issue 14): a 3-stage job (map, hash into an aggregate, range into a
sort) in all four exchange modes and under ``shuffle.default_mode: auto``, on 8 slots
(ample) and 2 (scarce); the target: auto within 1.1x of the best mode picked by hand.
Every run is checked against pyarrow's sorted sums."""

from __future__ import annotations

import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import hybrid_shuffle as hs
from benchmarks import systems
from benchmarks.data import blocks, make_table
from benchmarks.harness import CpuBusy, Measurement, measure, target
from benchmarks.suite import Context, Outcome, Suite, mark_checked, object_store
from benchmarks.suites.shuffle import checked

MODES = ("pipelined", "blocking", "hybrid-selective", "hybrid-full", "auto")
CASE = "3-stage modes"


def run(ctx: Context) -> Outcome:
    rows = int(ctx.scale * 1e6)
    table = make_table(rows, "uniform")
    data = blocks(table, 8)
    sums = table.group_by("k").aggregate([("v", "sum")])
    want = np.sort(pc.multiply(sums["v_sum"], 2.0).to_numpy())

    def check(result: pa.Table) -> None:
        got = result["v_sum"].to_numpy()
        ordered = bool(np.all(got[1:] >= got[:-1]))
        if not ordered or len(got) != len(want) or not np.allclose(got, want):
            raise AssertionError("the 3-stage job's result differs from pyarrow's sorted sums")

    config = systems.session_config(object_store=object_store(ctx.scale))
    config["shuffle"] = {**config["shuffle"], "default_mode": "auto"}
    out: list[Measurement] = []
    targets = []
    for slots in (8, 2):
        measured: dict[str, Measurement] = {}
        with hs.Session(config, slots=slots) as session:
            for mode in MODES:
                m = Measurement(CASE, f"engine {mode} ({slots} slots)", rows, "uniform")
                out.append(m)
                if mode == "pipelined" and slots < 8:
                    m.error = "does not fit: the pipelined region needs 8 slots"
                    continue
                runner = systems.engine_three_stage(session, None if mode == "auto" else mode, 8)
                busy = CpuBusy()  # over the warm-up and the timed runs
                busy.start()
                job = checked(runner, check)
                measure(m, lambda j=job: j(data), ctx.runs)
                busy.stop()
                m.note = f"CPUs busy {busy.share:.0%}" if busy.share is not None else ""
                measured[mode] = m
        timed = [m for mode, m in measured.items() if mode != "auto" and m.seconds]
        if timed and measured["auto"].seconds:
            best = min(timed, key=lambda m: m.median)
            ratio = measured["auto"].median / best.median
            targets.append(target(f"{slots} slots: auto / best hand-picked", ratio, 1.1))
            print(f"[bench] {slots} slots: auto / {best.system}: {ratio:.2f}x", file=sys.stderr)
    mark_checked(out, lambda m: True)
    return Outcome(out, {"rows": rows, "targets": targets})


SUITE = Suite(
    name="modes",
    description="a 3-stage job in every exchange mode and auto, ample and scarce slots",
    issue="issue 14",
    scale_unit="million rows",
    default_scale=10,
    tiny_scale=0.02,
    systems=("engine",),
    oracle="pyarrow (sorted sums)",
    run=run,
)
