"""Timing discipline: a warm-up, then the median of ``runs`` timed runs, with peak memory."""

from __future__ import annotations

import gc
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from benchmarks.memory import peak_memory


@dataclass
class Measurement:
    workload: str
    system: str
    rows: int
    distribution: str
    seconds: list[float] = field(default_factory=list)
    peak_bytes: int = 0
    error: str | None = None
    note: str = ""
    #: optional split of each timed run into named parts (same order as ``seconds``), for
    #: workloads whose claim is about where the time goes, not only how much there is
    parts: dict[str, list[float]] = field(default_factory=dict)
    #: True where the answer was compared with the suite's oracle and matched
    checked: bool | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.seconds) if self.seconds else float("nan")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "workload": self.workload,
            "system": self.system,
            "rows": self.rows,
            "distribution": self.distribution,
            "seconds": self.seconds,
            "median_seconds": self.median,
            "seconds_per_million_rows": self.median / self.rows * 1e6
            if self.seconds and self.rows
            else None,
            "peak_bytes": self.peak_bytes,
            "error": self.error,
            "note": self.note,
            "checked": self.checked,
        }
        if self.parts:  # only where a workload splits its runs: older results stay as they were
            out["parts"] = self.parts
            out["parts_median_seconds"] = {
                k: statistics.median(v) for k, v in self.parts.items() if v
            }
        return out


def measure(
    measurement: Measurement, fn: Callable[[], Any], runs: int, warmup: int = 1
) -> Measurement:
    """Run ``fn`` ``warmup`` times untimed, then ``runs`` times timed; errors are recorded."""
    try:
        for _ in range(warmup):
            fn()
        for _ in range(runs):
            gc.collect()
            with peak_memory() as peak:
                started = time.perf_counter()
                fn()
                measurement.seconds.append(time.perf_counter() - started)
            measurement.peak_bytes = max(measurement.peak_bytes, peak["peak_bytes"])
    except Exception as e:  # a failed system is a result to report, not a crash
        measurement.error = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300]}"
    status = measurement.error or f"median {measurement.median:.3f} s"
    print(
        f"[bench] {measurement.workload} | {measurement.rows:,} {measurement.distribution} | "
        f"{measurement.system}: {status}",
        file=sys.stderr,
        flush=True,
    )
    return measurement


class CpuBusy:
    """The share of the machine's CPU time spent busy (any process) between ``start``
    and ``stop``, from ``/proc/stat``; None where that file does not exist.  It says
    whether a workload left cores idle, which overlapping stages could have used."""

    def __init__(self) -> None:
        self._start: tuple[int, int] | None = None
        self.share: float | None = None

    @staticmethod
    def _sample() -> tuple[int, int] | None:
        try:
            with open("/proc/stat") as f:
                ticks = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
        return sum(ticks) - idle, sum(ticks)

    def start(self) -> None:
        self._start = self._sample()

    def stop(self) -> None:
        end = self._sample()
        if self._start is not None and end is not None and end[1] > self._start[1]:
            self.share = (end[0] - self._start[0]) / (end[1] - self._start[1])


def target(name: str, value: float | None, limit: float, unit: str = "x") -> dict[str, Any]:
    """A target's line in a summary: ``value`` against ``limit`` (at most), met or missed;
    ``unit`` is what the value counts: ``x`` for a ratio, else e.g. ``ms`` or ``%``."""
    status = "no figure" if value is None else "met" if value <= limit else "missed"
    return {"target": name, "value": value, "status": status, "unit": unit}


def print_targets(title: str, targets: list[dict[str, Any]]) -> None:
    """``target()`` lines under ``title``, one per target: status, name, value."""
    print(f"\n{title}")
    for t in targets:
        unit = t.get("unit", "x")
        suffix = "x" if unit == "x" else f" {unit}"
        value = "-" if t["value"] is None else f"{t['value']:.2f}{suffix}"
        print(f"  [{t['status']:>9}] {t['target']}: {value}")
