"""One report for every suite: the JSON a run writes, the table it prints, its chart,
and the before/after comparison of two runs (``python -m benchmarks compare``).

The JSON (``SCHEMA``)::

    {"schema": 1, "suite": ..., "label": ..., "scale": ..., "scale_unit": ...,
     "systems": [...], "oracle": ..., "runs": ..., "started": ..., "seconds": ...,
     "machine": {...}, "cases": [Measurement.to_json(), ...], "ratios": [...],
     "summary": {...}}

Each case is one system on one case of the suite (``workload`` names the case);
``checked`` says its answer matched the oracle.  ``ratios`` are the best engine
figure over each peer's, per case (< 1: the engine is faster).
"""

from __future__ import annotations

import json
import math
import platform
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.harness import Measurement, print_targets
from benchmarks.suite import Context, Outcome, Suite

__all__ = ["SCHEMA", "compare", "payload", "print_report", "ratios", "write"]

SCHEMA = 1
#: the most case lines the printed report shows
SHOWN = 80
_Key = tuple[str, int, str]


def _groups(results: list[Measurement]) -> dict[_Key, list[Measurement]]:
    groups: dict[_Key, list[Measurement]] = defaultdict(list)
    for m in results:
        groups[(m.workload, m.rows, m.distribution)].append(m)
    return groups


def _best_engine(group: list[Measurement]) -> Measurement | None:
    engines = [m for m in group if m.system.startswith("engine") and m.seconds and not m.error]
    return min(engines, key=lambda m: m.median, default=None)


def ratios(results: list[Measurement]) -> list[dict[str, Any]]:
    """Best engine / each peer, per case, size and distribution (< 1: engine faster)."""
    out = []
    for (workload, rows, dist), group in _groups(results).items():
        best = _best_engine(group)
        if best is None:
            continue
        for m in group:
            if m.system.startswith("engine") or not m.seconds or m.error:
                continue
            out.append({"workload": workload, "rows": rows, "distribution": dist,
                        "engine": best.system, "peer": m.system,
                        "engine_over_peer": best.median / m.median})  # fmt: skip
    return out


def payload(suite: Suite, ctx: Context, outcome: Outcome, started: float) -> dict[str, Any]:
    import ray

    return {
        "schema": SCHEMA,
        "suite": suite.name,
        "label": ctx.label,
        "scale": ctx.scale,
        "scale_unit": suite.scale_unit,
        "systems": list(ctx.systems),
        "oracle": suite.oracle,
        "runs": ctx.runs,
        "started": started,
        "seconds": time.time() - started,
        "machine": {"cpus": 2, "python": platform.python_version(), "ray": ray.__version__},
        "cases": [m.to_json() for m in outcome.cases],
        "ratios": ratios(outcome.cases),
        "summary": outcome.summary,
    }


def write(data: dict[str, Any], cases: list[Measurement], folder: Path) -> Path:
    """``<folder>/<label>.json`` and, where there are timed cases, ``<label>.png``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{data['label']}.json"
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    if any(m.seconds for m in cases):
        _chart(cases, path.with_suffix(".png"))
    return path


def print_report(suite: Suite, data: dict[str, Any], outcome: Outcome) -> None:
    """One line per case and system (median, peak, best engine / it, checked), at most
    ``SHOWN`` of them (the rest are in the JSON), then the suite's notes and targets."""
    print(f"\n# {suite.name} ({suite.issue}): {suite.scale_unit} {data['scale']:g}, "
          f"answers checked against {suite.oracle}")  # fmt: skip
    print(f"{'case':<34} {'system':<36} {'median s':>9} {'peak MiB':>8} {'eng/this':>8} checked")
    lines = []
    for (workload, rows, dist), group in _groups(outcome.cases).items():
        best = _best_engine(group)
        case = f"{workload} ({rows:,} {dist})" if rows else f"{workload} ({dist})"
        for m in group:
            if m.error or not m.seconds:
                lines.append(f"{case[:34]:<34} {m.system[:36]:<36} {m.error or 'no run'}"[:160])
                continue
            ratio = f"{best.median / m.median:7.2f}x" if best else "-"
            check = {True: "yes", False: "NO", None: "-"}[m.checked]
            head = f"{case[:34]:<34} {m.system[:36]:<36} {m.median:9.3f}"
            line = f"{head} {m.peak_bytes / 2**20:8.0f} {ratio:>8} {check:>7}  {m.note}"
            lines.append(line[:160].rstrip())
    print("\n".join(lines[:SHOWN]))
    if len(lines) > SHOWN:
        print(f"... {len(lines) - SHOWN} more lines in the JSON")
    for line in outcome.notes:
        print(line)
    if outcome.summary.get("targets"):
        print_targets(f"{suite.issue} targets", outcome.summary["targets"])


def _chart(results: list[Measurement], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = {k: [m for m in g if m.seconds] for k, g in _groups(results).items()}
    groups = {k: g for k, g in groups.items() if g}
    fig, axes = plt.subplots(len(groups), 1, figsize=(10, 2.6 * max(len(groups), 1)))
    axes_list = list(axes) if len(groups) > 1 else [axes]
    for ax, ((workload, rows, dist), done) in zip(axes_list, groups.items(), strict=True):
        colors = ["tab:blue" if m.system.startswith("engine") else "tab:gray" for m in done]
        ax.barh([m.system for m in done], [m.median for m in done], color=colors)
        ax.set_title(f"{workload}: {rows:,} rows, {dist} (median s, lower is better)", fontsize=9)
        ax.tick_params(labelsize=7)
        ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _medians(data: dict[str, Any]) -> dict[tuple[str, ...], float]:
    out = {}
    for c in data.get("cases", data.get("results", [])):  # "results": before issue 37
        median = c.get("median_seconds")
        if c.get("error") is None and median and not math.isnan(median):
            out[(c["workload"], c["system"], str(c["rows"]), c["distribution"])] = median
    return out


def compare(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The cases both runs have, B's median over A's (< 1: B is faster), and the geomean."""
    before, after = _medians(a), _medians(b)
    shared = [k for k in before if k in after]
    lines = [f"{'case':<40} {'system':<36} {'A s':>9} {'B s':>9} {'B/A':>7}"]
    logs = []
    for key in shared:
        ratio = after[key] / before[key]
        logs.append(math.log(ratio))
        case = f"{key[0]} ({key[2]} rows)" if key[2] != "0" else key[0]
        lines.append(f"{case[:40]:<40} {key[1][:36]:<36} {before[key]:9.3f} {after[key]:9.3f} "
                     f"{ratio:6.2f}x")  # fmt: skip
    if not logs:
        return [*lines, "no case in common"]
    geomean = math.exp(sum(logs) / len(logs))
    only = len(before) + len(after) - 2 * len(shared)
    lines.append(f"geomean B/A over {len(logs)} shared cases: {geomean:.3f}x"
                 + (f" ({only} cases in only one run)" if only else ""))  # fmt: skip
    return lines
