"""The benchmark runner keeps working: ``python -m benchmarks list | run | compare``.

Each run is its own ``python -m benchmarks`` process with its own Ray.  By default:
``list``, a tiny ``shuffle`` run (the engine and pyarrow, the cheapest peer) whose JSON
must follow the one schema with every engine answer checked, and ``compare`` of two
such files.  With ``HS_TEST_FULL=1`` every suite that needs neither Spark nor a second
virtualenv also runs once at its tiny scale.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_KEYS = {"schema", "suite", "label", "scale", "scale_unit", "systems", "oracle", "runs",
               "started", "seconds", "machine", "cases", "ratios", "summary"}  # fmt: skip
CASE_KEYS = {"workload", "system", "rows", "distribution", "seconds", "median_seconds",
             "peak_bytes", "error", "note", "checked"}  # fmt: skip


def _bench(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAY_ADDRESS": "local"}
    cmd = [sys.executable, "-m", "benchmarks", *args]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=timeout, check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def _run(suite: str, out: Path, *args: str, timeout: float = 300) -> dict:  # type: ignore[type-arg]
    from benchmarks.suites import SUITES

    scale = f"{SUITES[suite].tiny_scale:g}"
    _bench("run", suite, "--scale", scale, "--runs", "1", "--label", "smoke", "--out", str(out),
           "--data", str(out / "data"), *args, timeout=timeout)  # fmt: skip
    payload: dict = json.loads((out / "smoke.json").read_text())  # type: ignore[type-arg]
    assert set(payload) >= SCHEMA_KEYS and payload["suite"] == suite
    assert all(set(c) >= CASE_KEYS for c in payload["cases"])
    return payload


def test_list_names_every_suite_with_its_oracle() -> None:
    from benchmarks.suites import SUITES

    listed = _bench("list").stdout
    assert all(f"{name} " in listed for name in SUITES)
    assert listed.count("oracle:") == len(SUITES) >= 20


def test_tiny_shuffle_run_writes_the_schema_with_checked_answers(tmp_path: Path) -> None:
    payload = _run("shuffle", tmp_path, "--systems", "engine,pyarrow")
    engine = [c for c in payload["cases"] if c["system"].startswith("engine")]
    assert len(engine) == 2 * 2 * 2  # two workloads x two distributions x two modes
    assert all(c["error"] is None and c["checked"] is True for c in engine), engine
    assert {c["system"] for c in payload["cases"]} - {c["system"] for c in engine} == {
        "pyarrow group_by (1 process)", "pyarrow partition (compute bound)"
    }  # fmt: skip
    assert payload["ratios"] and (tmp_path / "smoke.png").stat().st_size > 1000


def test_compare_prints_the_ratio_of_shared_cases_and_their_geomean(tmp_path: Path) -> None:
    case = {"workload": "w", "system": "engine", "rows": 10, "distribution": "d",
            "median_seconds": 2.0, "error": None}  # fmt: skip
    a = {"cases": [case, {**case, "system": "peer", "median_seconds": 1.0}]}
    b = {"cases": [{**case, "median_seconds": 1.0}, {**case, "workload": "only in B"}]}
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    out = _bench("compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")).stdout
    assert "0.50x" in out and "geomean B/A over 1 shared cases: 0.500x" in out


@pytest.mark.skipif(not os.environ.get("HS_TEST_FULL"), reason="HS_TEST_FULL=1 only")
@pytest.mark.parametrize(
    ("suite", "systems"),
    [("modes", "engine"), ("skew", "engine"), ("operators", "engine,duckdb,pyarrow"),
     ("batch-steps", "engine,duckdb"), ("tight-memory", "engine"), ("checksums", "engine"),
     ("tpch", "engine,duckdb"), ("batch", "engine"), ("cache", "engine"),
     ("failover", "engine")],
)  # fmt: skip
def test_tiny_run_of_every_suite_without_spark(tmp_path: Path, suite: str, systems: str) -> None:
    payload = _run(suite, tmp_path, "--systems", systems, timeout=600)
    assert payload["cases"] and not [c for c in payload["cases"] if c["checked"] is False]
