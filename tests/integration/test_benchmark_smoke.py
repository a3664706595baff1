"""The benchmark harness keeps working: a tiny run writes its JSON and chart."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_tiny_benchmark_run_writes_results_and_ratios(tmp_path: Path) -> None:
    cmd = [
        sys.executable, "-m", "benchmarks", "--rows", "20000", "--runs", "1",
        "--workloads", "agg,repartition", "--distributions", "uniform",
        "--object-store", "200 MiB", "--name", "smoke", "--out", str(tmp_path),
    ]  # fmt: skip
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    payload = json.loads((tmp_path / "smoke.json").read_text())
    systems = {r["system"] for r in payload["results"] if not r["error"]}
    assert {
        "engine hybrid-selective",
        "ray data",
        "ray.put+ray.get (object store bound)",
    } <= systems
    assert payload["ratios"] and (tmp_path / "smoke.png").stat().st_size > 1000
