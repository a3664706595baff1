"""The command line: one readable sentence and a non-zero exit on mistakes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "hybrid_shuffle.cli"]


def run(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, check=False
    )


def test_validate_accepts_the_shipped_configs() -> None:
    for name in ("quickstart.yaml", "main.yaml", "pipeline_revenue.yaml"):
        out = run("validate", f"configs/{name}")
        assert out.returncode == 0, out.stderr
        assert "valid" in out.stdout


def test_validate_rejects_a_bad_config_in_one_sentence(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("edges:\n  by_customer: {mode: fast}\n")
    out = run("validate", str(bad))
    assert out.returncode == 2
    assert out.stderr.strip() == (
        "hybrid-shuffle: edges.by_customer.mode: 'fast' is not a mode; use one of: pipelined, "
        "blocking, hybrid-selective, hybrid-full"
    )
    assert "Traceback" not in out.stderr


def test_missing_pipeline_file_is_named_without_a_traceback() -> None:
    out = run("run", "nope.py", "--config", "configs/main.yaml")
    assert out.returncode == 2
    assert out.stderr.strip() == (
        "hybrid-shuffle: pipeline file 'nope.py' does not exist; check the path"
    )


def test_explain_prints_every_edge_without_running() -> None:
    """The example declares its inputs: explain plans it on stand-ins, without Spark or
    Ray (tests/unit/test_pipeline_file.py checks neither started)."""
    config = "configs/pipeline_revenue.yaml"
    out = run("explain", "examples/pipeline_revenue.py", "--config", config)
    assert out.returncode == 0, out.stderr[-2000:]
    for edge in ("customers.right", "by_segment", "to_sort"):
        assert edge in out.stdout
    assert "mode blocking (yaml)" in out.stdout
    assert "needs 1 slot at once" in out.stdout


@pytest.mark.spark
def test_a_plain_run_with_spark_says_it_starts_spark_and_little_else_on_stderr() -> None:
    """Spark's log4j start-up lines, RayDP's and Ray's notices are off by default; what is
    left are the engine's two lines around Spark's start (a silent 20-second start looks
    like a hang) and the two C++ lines Ray's Java client prints before its logging
    starts."""
    config = "configs/pipeline_revenue.yaml"
    out = run("run", "examples/pipeline_revenue.py", "--config", config)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "o_totalprice_sum" in out.stdout
    stderr = [line for line in out.stderr.splitlines() if line.strip()]
    assert "starting Spark (RayDP, 2 cores)..." in stderr, out.stderr
    started = [line for line in stderr if line.startswith("Spark 3.5") and " started in " in line]
    assert len(started) == 1, out.stderr
    assert len(stderr) - 2 <= 3, out.stderr
    for noise in ("loopback address", "log4j", "Setting default log level", "DeprecationWarning"):
        assert noise not in out.stderr
