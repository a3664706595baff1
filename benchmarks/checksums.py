"""Issue 27: what checksums on spill files cost. A spilling 10M-row hash repartition,
blocking, with ``shuffle.checksums: true`` against ``false``, paired in one run.

The job: a seeded table of ``--scale`` million rows (``benchmarks.data.make_table``, uniform:
``k`` int64 over 100,000 keys, ``v`` float64; 16 bytes a row, 153 MiB at 10M), put once
as ``PARALLELISM`` separately owned blocks, read by ``from_arrow``, ``key_by("k",
mode="blocking")`` into ``PARALLELISM`` consumers and a ``map_batches`` that keeps one
row per batch (its row count and the sum of its keys), so nothing but those figures
comes back to the driver.  Each run is checked: the consumers saw every row once and
the keys sum to pyarrow's sum.

The exchange spills: ``shuffle.memory_budget`` is 32 MiB at 10M rows (a fifth of the
data, scaled with the rows) for the whole session, so each executor keeps a few buffers in
memory and writes the rest to its spill file, and each consumer reads them back from
disk (``JobResult.spilled_bytes`` is recorded per run, and must be most of the data).
That write and read is where checksums act: an xxh3-64 of each buffer as it is
appended, checked as it is read.

**Pairs**: one embedded Ray (2 CPUs), two sessions on it, identical but for
``shuffle.checksums``; after one warm-up run each, the two run the job alternately,
``--runs`` times, the side going first alternating too, so a drift of the machine
hits both sides.  Printed: the medians of each side, the ratio of the medians and the
median of the pairs' ratios (on / off; target <= 1.03), with the load average and the
file system the spill directory is on (a spill is written to the page cache first).
A run lasts well under a second on 2 cores, so the pairs' ratios scatter by several
percent either way; the direct cost is printed too: the time ``spill_file.checksum``
takes over a run's spilled bytes, twice (written and read), timed in this process.

Run it under the benchmark lock; results go to ``benchmarks/results/checksums/``:

    flock /tmp/hs-bench.lock .venv/bin/python -m benchmarks run checksums --runs 9
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from hybrid_shuffle.sizes import parse_size

__all__ = ["measure", "report"]

ROOT = Path(__file__).resolve().parent.parent
PARALLELISM = 4
SLOTS = 4
EDGE = "by_k"
TARGET = 1.03
#: the 1-minute load average a run waits for (at most ``--settle`` seconds) before starting
SETTLED = 1.0
NAMESPACE = "hybrid-shuffle"
SIDES = ("on", "off")


def _log(message: str) -> None:
    print(f"[checksums] {message}", file=sys.stderr, flush=True)


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def tally(batch: pa.Table) -> pa.Table:
    """One row per batch: its row count and the sum of its keys (a check, not a result)."""
    total = pc.sum(batch["k"]).as_py() or 0
    return pa.table({"rows": [batch.num_rows], "k_sum": [total]})


def session_config(checksums: bool, budget: str, buffer_size: str) -> dict[str, Any]:
    return {
        "parallelism": PARALLELISM,
        "shuffle": {
            "buffer_size": buffer_size,
            "memory_budget": budget,
            "checksums": checksums,
        },
    }


def run_job(session: Any, refs: list[Any], rows: int, k_sum: int) -> dict[str, Any]:
    """One timed run of the repartition; raises if a row is missing, doubled or changed."""
    job = session.job("checksums-repartition")
    stream = job.from_arrow(refs, name="blocks", parallelism=PARALLELISM)
    keyed = stream.key_by("k", edge=EDGE, mode="blocking", partitions=PARALLELISM)
    started = time.perf_counter()
    result = keyed.map_batches(tally, name="tally").collect()
    seconds = time.perf_counter() - started
    got_rows = pc.sum(result.table["rows"]).as_py()
    got_sum = pc.sum(result.table["k_sum"]).as_py()
    if (got_rows, got_sum) != (rows, k_sum):
        raise AssertionError(
            f"the consumers saw {got_rows:,} rows summing to {got_sum} "
            f"(want {rows:,} and {k_sum}); checksums "
            f"{'on' if session.config.shuffle.checksums else 'off'}"
        )
    if result.restarts:
        raise AssertionError(f"a run restarted {result.restarts} times: the timing is not one run")
    return {"seconds": seconds, "spilled_bytes": result.spilled_bytes}


def hashing_seconds(nbytes: int, buffer_size: int) -> float:
    """What the checksums alone cost a run, in this process: ``spill_file.checksum`` of
    ``nbytes`` in buffers of ``buffer_size`` bytes, twice (once written, once read back);
    the best of three."""
    from hybrid_shuffle.shuffle.spill_file import checksum

    buffer = pa.py_buffer(os.urandom(buffer_size))
    count = max(nbytes // buffer_size, 1)
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(2 * count):
            checksum(buffer)
        best = min(best, time.perf_counter() - started)
    return best


def file_system(path: str) -> str:
    try:
        out = subprocess.run(
            ["stat", "-f", "-c", "%T", path], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return out.stdout.strip()


def measure(
    rows: int, pairs: int, budget: str, buffer_size: str, object_store: int
) -> dict[str, Any]:
    import ray

    import hybrid_shuffle as hs
    from benchmarks.data import blocks, make_table

    ray.init(
        address="local",  # a Ray of our own, whatever else runs on this machine
        namespace=NAMESPACE,
        num_cpus=2,
        object_store_memory=object_store,
        include_dashboard=False,
        logging_level="ERROR",
    )
    try:
        table = make_table(rows, "uniform")
        k_sum = pc.sum(table["k"]).as_py()
        refs = [ray.put(b) for b in blocks(table, PARALLELISM)]
        data_bytes = table.nbytes
        del table
        sessions = {
            side: hs.Session(session_config(side == "on", budget, buffer_size), slots=SLOTS)
            for side in SIDES
        }
        try:
            spill_root = sessions["on"].spill_dir
            for side in SIDES:
                warm = run_job(sessions[side], refs, rows, k_sum)
                _log(f"warm-up, checksums {side}: {warm['seconds']:.2f} s")
            runs: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
            for i in range(pairs):
                order = SIDES if i % 2 == 0 else SIDES[::-1]
                for side in order:
                    runs[side].append(run_job(sessions[side], refs, rows, k_sum))
                on, off = runs["on"][-1]["seconds"], runs["off"][-1]["seconds"]
                _log(
                    f"pair {i + 1}/{pairs} ({order[0]} first): on {on:.2f} s, off {off:.2f} s, "
                    f"{on / off:.3f}x, load {_load()[0]}"
                )
            fs = file_system(spill_root)
        finally:
            for session in sessions.values():
                session.close()
    finally:
        ray.shutdown()
    seconds = {side: [r["seconds"] for r in runs[side]] for side in SIDES}
    spilled = {side: statistics.median(r["spilled_bytes"] for r in runs[side]) for side in SIDES}
    hashing = hashing_seconds(int(spilled["on"]), parse_size(buffer_size, "--buffer-size"))
    ratios = [a / b for a, b in zip(seconds["on"], seconds["off"], strict=True)]
    ratio_of_medians = statistics.median(seconds["on"]) / statistics.median(seconds["off"])
    median_ratio = statistics.median(ratios)
    return {
        "rows": rows,
        "data_bytes": data_bytes,
        "pairs": pairs,
        "memory_budget": budget,
        "buffer_size": buffer_size,
        "slots": SLOTS,
        "parallelism": PARALLELISM,
        "spill_file_system": fs,
        "runs": runs,
        "median_seconds": {side: statistics.median(seconds[side]) for side in SIDES},
        "min_max_seconds": {side: [min(seconds[side]), max(seconds[side])] for side in SIDES},
        "spilled_bytes_median": spilled,
        "hashing_seconds": hashing,
        "hashing_share_of_off_median": hashing / statistics.median(seconds["off"]),
        "pair_ratios": ratios,
        "ratio_of_medians": ratio_of_medians,
        "median_pair_ratio": median_ratio,
        "target": TARGET,
        "status": "met" if median_ratio <= TARGET else "missed",
    }


def report(summary: dict[str, Any]) -> list[str]:
    mib = 2**20
    med, span = summary["median_seconds"], summary["min_max_seconds"]
    spilled = summary["spilled_bytes_median"]
    lines = [
        f"Checksums on spill files (issue 27): a {summary['rows']:,}-row hash repartition "
        f"({summary['data_bytes'] / mib:.0f} MiB), blocking, {summary['parallelism']} x "
        f"{summary['parallelism']} tasks on {summary['slots']} slots, 2 Ray CPUs",
        f"shuffle.memory_budget {summary['memory_budget']}, buffer_size "
        f"{summary['buffer_size']}; spill directory on {summary['spill_file_system']}; load "
        f"average {summary['load_before']} before, {summary['load_after']} after",
        f"{summary['pairs']} pairs, alternating which side runs first; median (min-max)",
    ]
    for side in SIDES:
        lines.append(
            f"  shuffle.checksums: {'true ' if side == 'on' else 'false'}  "
            f"{med[side]:6.2f} s ({span[side][0]:.2f}-{span[side][1]:.2f}), "
            f"spilled {spilled[side] / mib:.0f} MiB a run"
        )
    lines.append(
        f"  on / off: {summary['ratio_of_medians']:.3f}x (ratio of medians), "
        f"{summary['median_pair_ratio']:.3f}x (median of the pairs' ratios); target <= "
        f"{summary['target']:.2f}x: {summary['status']}"
    )
    lines.append("  pairs' ratios: " + ", ".join(f"{r:.3f}" for r in summary["pair_ratios"]))
    lines.append(
        f"  the checksums alone (xxh3-64 of the spilled bytes, written and read back, in "
        f"one process): {summary['hashing_seconds'] * 1000:.1f} ms a run, "
        f"{summary['hashing_share_of_off_median']:.1%} of the median run without them"
    )
    return lines
