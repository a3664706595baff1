"""The printed table, the ratios and the PNG chart of one benchmark run."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.harness import Measurement


def _best_engine(group: list[Measurement]) -> Measurement | None:
    engines = [m for m in group if m.system.startswith("engine") and m.seconds]
    return min(engines, key=lambda m: m.median, default=None)


def _groups(results: list[Measurement]) -> dict[tuple[str, int, str], list[Measurement]]:
    groups: dict[tuple[str, int, str], list[Measurement]] = defaultdict(list)
    for m in results:
        groups[(m.workload, m.rows, m.distribution)].append(m)
    return groups


def ratios(results: list[Measurement]) -> list[dict[str, Any]]:
    """Best engine mode / each peer, per workload, size and distribution (< 1: engine faster)."""
    out = []
    for (workload, rows, dist), group in _groups(results).items():
        best = _best_engine(group)
        if best is None:
            continue
        for m in group:
            if m.system.startswith("engine") or not m.seconds:
                continue
            out.append(
                {
                    "workload": workload,
                    "rows": rows,
                    "distribution": dist,
                    "engine": best.system,
                    "peer": m.system,
                    "engine_over_peer": best.median / m.median,
                }
            )
    return out


def print_table(results: list[Measurement]) -> None:
    for (workload, rows, dist), group in _groups(results).items():
        best = _best_engine(group)
        print(f"\n{workload}, {rows:,} rows, {dist}")
        print(f"  {'system':<42} {'median s':>9} {'peak MiB':>9} {'best engine / this':>19}")
        for m in group:
            if m.error:
                print(f"  {m.system:<42} {'-':>9} {'-':>9}   {m.error[:70]}")
                continue
            ratio = best.median / m.median if best else math.nan
            note = f"   {m.note}" if m.note and m.system.startswith("engine") else ""
            print(
                f"  {m.system:<42} {m.median:9.3f} {m.peak_bytes / 2**20:9.0f} {ratio:19.2f}x{note}"
            )


def write_chart(results: list[Measurement], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = _groups(results)
    fig, axes = plt.subplots(len(groups), 1, figsize=(10, 2.6 * max(len(groups), 1)))
    axes_list = list(axes) if len(groups) > 1 else [axes]
    for ax, ((workload, rows, dist), group) in zip(axes_list, groups.items(), strict=True):
        done = [m for m in group if m.seconds]
        ax.barh(
            [m.system for m in done],
            [m.median for m in done],
            color=["tab:blue" if m.system.startswith("engine") else "tab:gray" for m in done],
        )
        ax.set_title(
            f"{workload}: {rows:,} rows, {dist} (median seconds, lower is better)", fontsize=9
        )
        ax.tick_params(labelsize=7)
        ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
