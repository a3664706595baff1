"""Quiet by default: a plain ``hybrid-shuffle run`` prints its result and almost nothing
on stderr; ``--debug`` lets Ray's own start-up logging through again (issue 15, item 3).

Each run is a subprocess through the command line, as a user runs it, on a tiny Arrow
pipeline (no Spark: ``tests/spark/test_cli.py`` checks the Spark path), so each starts
and stops its own embedded Ray; this module starts no other.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: what "almost nothing" means on stderr for a plain run
FEW_LINES = 3

PIPELINE = """
import pyarrow as pa

import hybrid_shuffle as hs


def build(session: hs.Session) -> hs.Stream:
    table = pa.table({"k": [i % 3 for i in range(30)], "v": list(range(30))})
    job = session.job("tiny")
    return (
        job.from_arrow(table, name="numbers", parallelism=2)
        .key_by("k", edge="by_k")
        .aggregate({"v": ["sum"]}, name="sums")
    )
"""
CONFIG = """
job: tiny
parallelism: 2
slots: 2
ray: {num_cpus: 2, object_store_memory: 200 MiB}
shuffle: {memory_budget: 64 MiB, buffer_size: 1 MiB}
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    folder = tmp_path_factory.mktemp("quiet")
    (folder / "tiny.py").write_text(PIPELINE)
    (folder / "tiny.yaml").write_text(CONFIG)
    return str(folder / "tiny.py"), str(folder / "tiny.yaml")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(
        [sys.executable, "-m", "hybrid_shuffle.cli", *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_a_plain_run_prints_the_result_and_almost_nothing_on_stderr(
    files: tuple[str, str],
) -> None:
    pipeline, config = files
    out = cli("run", pipeline, "--config", config)
    assert "3 rows in" in out.stdout
    assert "v_sum" in out.stdout
    assert len(lines(out.stderr)) <= FEW_LINES, out.stderr
    for noise in ("Token authentication", "GcsClient", "DeprecationWarning", "INFO"):
        assert noise not in out.stderr


def test_debug_lets_ray_and_the_engine_log_again(files: tuple[str, str]) -> None:
    pipeline, config = files
    quiet = cli("run", pipeline, "--config", config)
    debug = cli("--debug", "run", pipeline, "--config", config)
    assert debug.stdout.count("v_sum") == quiet.stdout.count("v_sum") == 1
    assert len(lines(debug.stderr)) > len(lines(quiet.stderr))
    assert "DEBUG hybrid_shuffle" in debug.stderr  # the engine's own loggers, at DEBUG


def test_verbose_shows_the_engines_info_logging(files: tuple[str, str]) -> None:
    pipeline, config = files
    out = cli("-v", "run", pipeline, "--config", config)
    assert "INFO hybrid_shuffle.session: session" in out.stderr
    assert "DEBUG" not in out.stderr
    assert "GcsClient" not in out.stderr
