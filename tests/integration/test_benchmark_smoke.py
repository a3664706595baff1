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


def test_tiny_failover_run_recovers_and_reports_what_ran_again(tmp_path: Path) -> None:
    """The failover workload at 200,000 rows, one mode and service, without the worktree
    baseline: a killed run restarts, matches pyarrow (else the run fails) and is reported."""
    cmd = [
        sys.executable, "-m", "benchmarks", "--rows", "200000", "--runs", "1",
        "--workloads", "failover", "--failover-modes", "blocking",
        "--failover-services", "executor-local", "--failover-baseline", "none",
        "--object-store", "200 MiB", "--name", "smoke-failover", "--out", str(tmp_path),
    ]  # fmt: skip
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    payload = json.loads((tmp_path / "smoke-failover.json").read_text())
    (row,) = payload["failover"]["matrix"]
    assert (row["service"], row["mode"]) == ("executor-local", "blocking")
    (killed,) = row["runs"]
    assert killed["restarts"] >= 1 and killed["restarted_tasks"]
    assert killed["recomputed_bytes"] > 0 and killed["recomputed_source_rows"] > 0
    assert payload["failover"]["overhead"] is None
    assert "failover (issue 11)" in out.stdout
