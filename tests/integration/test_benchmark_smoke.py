"""The benchmark harness keeps working: a tiny run writes its JSON and chart.

Each test runs ``python -m benchmarks`` in its own process, with its own Ray (half a
minute to three minutes on two cores).  By default the harness, the failover, TPC-H and
kernel workloads run, and issue 27's ``python -m benchmarks.checksums``; the batch,
cache, skew and tight-memory workloads (issues 12, 13, 14 and 23: their figures are in
BENCHMARKS.md) only with ``HS_TEST_FULL=1``, to keep ``./dev test`` short.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

full_only = pytest.mark.skipif(
    not os.environ.get("HS_TEST_FULL"),
    reason="a workload checked with HS_TEST_FULL=1 (the full suite), not by default",
)


def test_tiny_benchmark_run_writes_results_and_ratios(tmp_path: Path) -> None:
    cmd = [
        sys.executable, "-m", "benchmarks", "--rows", "20000", "--runs", "1",
        "--workloads", "agg,repartition", "--distributions", "uniform",
        "--engine-modes", "hybrid-selective",
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


@full_only
def test_tiny_batch_run_checks_every_engine_result_and_reports_the_targets(
    tmp_path: Path,
) -> None:
    """The batch workload (issue 12) at 100,000 rows, no peers: every engine operator
    runs with ample and with 1/4 memory, matches pyarrow (a mismatch is an error) and
    reports its memory; the targets are printed."""
    cmd = [
        sys.executable, "-m", "benchmarks", "--workloads", "batch", "--runs", "1",
        "--batch-rows", "100000", "--batch-join-rows", "100000",
        "--batch-baseline-rows", "20000", "--batch-peers", "none",
        "--object-store", "300 MiB", "--name", "smoke-batch", "--out", str(tmp_path),
    ]  # fmt: skip
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    batch = json.loads((tmp_path / "smoke-batch.json").read_text())["batch"]
    engine = [r for r in batch["measurements"] if r["system"].startswith("engine")]
    assert len(engine) == 2 + 2 * 4 + 3  # sort, two joins x (hash, sort-merge) x 2, co_group
    assert all(r["error"] is None and r["checked_runs"] == 2 for r in engine), engine
    assert all(r["memory_bytes"] > 0 and r["peak_over_memory"] is not None for r in engine)
    assert batch["targets"] and "issue 12 targets" in out.stdout


@full_only
def test_tiny_cache_run_checks_every_engine_result_and_reports_the_targets(
    tmp_path: Path,
) -> None:
    """The cache workload (issue 13) at 100,000 rows, no peers: the five queries run
    uncached and from the cache, every run matches pyarrow and reads the cache where it
    should (a mismatch is an error), the fill is timed, the targets are printed."""
    cmd = [
        sys.executable, "-m", "benchmarks", "--workloads", "cache", "--runs", "1",
        "--cache-rows", "100000", "--cache-peers", "none",
        "--object-store", "300 MiB", "--name", "smoke-cache", "--out", str(tmp_path),
    ]  # fmt: skip
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    cache = json.loads((tmp_path / "smoke-cache.json").read_text())["cache"]
    engine = [r for r in cache["measurements"] if "checked_runs" in r]
    assert {r["system"] for r in engine} == {
        "engine uncached", "engine cached (from_cache)", "engine fill()"
    }  # fmt: skip
    assert len(engine) == 2 * 5 + 1  # five queries uncached and cached, and the fill
    assert all(r["error"] is None and r["checked_runs"] == 2 for r in engine), engine
    info = cache["engine_cache"]
    assert (info["fills"], info["hits"], info["partitioning"]) == (2, 10, "hash(k) into 8")
    assert cache["targets"] and "issue 13 targets" in out.stdout


@full_only
def test_tiny_skew_run_checks_every_result_and_reports_the_hottest_receiver(
    tmp_path: Path,
) -> None:
    """The skew workload (issue 14, FLIP-44) at 200,000 rows: the three variants run,
    every run matches pyarrow (a mismatch is an error), and the hottest receiver of the
    hash edge is reported against combine=False."""
    cmd = [
        sys.executable, "-m", "benchmarks", "--workloads", "skew", "--runs", "1",
        "--skew-rows", "200000", "--skew-flush-rows", "20000",
        "--object-store", "300 MiB", "--name", "smoke-skew", "--out", str(tmp_path),
    ]  # fmt: skip
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    skew = json.loads((tmp_path / "smoke-skew.json").read_text())["skew"]
    variants = skew["variants"]
    assert list(variants) == ["combine=False", "combiner", "local_key_by"]
    assert all(v["error"] is None and v["checked_runs"] == 2 for v in variants.values())
    assert variants["combine=False"]["edge_rows"] == 200_000
    local = variants["local_key_by"]
    assert local["hottest_receiver_rows"] < variants["combine=False"]["hottest_receiver_rows"]
    assert local["hottest_fewer_x"] > 1 and "issue 14 skew targets" in out.stdout


def test_tiny_tpch_run_checks_every_answer_against_duckdb(tmp_path: Path) -> None:
    """The tpch workload (issue 23) at scale factor 0.01, DuckDB as the only peer: the
    Parquet is generated into a private cache, Q1, Q3 and Q6 run on the engine, every
    answer matches DuckDB's (a mismatch is an error), and the ratios are printed."""
    cmd = [
        sys.executable, "-m", "benchmarks", "--workloads", "tpch", "--runs", "1",
        "--tpch-scale", "0.01", "--tpch-peers", "duckdb", "--tpch-data", str(tmp_path / "data"),
        "--object-store", "300 MiB", "--name", "smoke-tpch", "--out", str(tmp_path),
    ]  # fmt: skip
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    tpch = json.loads((tmp_path / "smoke-tpch.json").read_text())["tpch"]
    assert all(m["error"] is None for m in tpch["measurements"]), tpch["measurements"]
    assert len(tpch["measurements"]) == 2 * 3  # the engine and DuckDB, three queries each
    assert set(tpch["queries"]) == {"q1", "q3", "q6"}
    assert all(q["engine_over_duckdb"] > 0 for q in tpch["queries"].values())
    assert (tmp_path / "data" / "tpch-sf0.01" / "lineitem.parquet").is_file()
    assert "issue 23 TPC-H targets" in out.stdout


def test_tiny_kernel_run_checks_every_result_with_both_kernels(tmp_path: Path) -> None:
    """The kernels workload (issue 23) at 100,000 rows: each job runs with both kernels,
    every run matches pyarrow (a mismatch is an error), and the targets are printed."""
    cmd = [
        sys.executable, "-m", "benchmarks", "--workloads", "kernels", "--runs", "1",
        "--kernel-rows", "100000",
        "--object-store", "300 MiB", "--name", "smoke-kernels", "--out", str(tmp_path),
    ]  # fmt: skip
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    jobs = json.loads((tmp_path / "smoke-kernels.json").read_text())["kernels"]["jobs"]
    assert len(jobs) == 5  # two group-bys, a sort, two joins
    for row in jobs.values():
        for kernel in ("duckdb", "arrow"):
            assert row[kernel]["error"] is None and row[kernel]["checked_runs"] == 2, row
        assert row["duckdb_over_arrow"] > 0
    assert "issue 23 kernel targets" in out.stdout


@full_only
def test_tiny_tight_memory_run_checks_and_reports_the_peak(tmp_path: Path) -> None:
    """The tight-memory workload (issue 23) at 200,000 rows: the aggregate under 16 MiB
    matches pyarrow (a mismatch is an error) and reports its peak against its memory."""
    cmd = [
        sys.executable, "-m", "benchmarks", "--workloads", "tight-memory", "--runs", "1",
        "--tight-rows", "200000",
        "--object-store", "300 MiB", "--name", "smoke-tight", "--out", str(tmp_path),
    ]  # fmt: skip
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    tight = json.loads((tmp_path / "smoke-tight.json").read_text())["tight_memory"]
    assert tight["error"] is None and tight["checked_runs"] == 2
    assert tight["memory_bytes"] == 16 << 20 and tight["peak_over_memory"] is not None
    assert "issue 23 memory target" in out.stdout


def test_tiny_checksums_run_pairs_both_sides_and_reports_the_ratio(tmp_path: Path) -> None:
    """Issue 27's overhead benchmark at 200,000 rows, one pair: both sides spill, every
    run is checked (else the run fails), and the ratio is reported."""
    cmd = [
        sys.executable, "-m", "benchmarks.checksums", "--rows", "200000", "--pairs", "1",
        "--budget", "1 MiB", "--buffer-size", "128 KiB", "--object-store", str(300 << 20),
        "--settle", "0", "--name", "smoke-checksums", "--out", str(tmp_path),
    ]  # fmt: skip
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    payload = json.loads((tmp_path / "smoke-checksums.json").read_text())
    assert payload["rows"] == 200_000 and payload["pairs"] == 1
    assert all(payload["spilled_bytes_median"][side] > 0 for side in ("on", "off"))
    assert payload["median_pair_ratio"] > 0
    assert "on / off:" in out.stdout


@full_only
def test_tiny_spark_corpus_run_reports_every_case(tmp_path: Path) -> None:
    """Issue 33's corpus, five of its own queries: each case ends in a status and the
    report is written (the corpus itself is a benchmark, not part of ./dev test)."""
    cmd = [
        sys.executable, "-m", "benchmarks.spark_corpus", "--limit", "5", "--sources", "own",
        "--timeout", "120", "--out", str(tmp_path / "corpus"),
    ]  # fmt: skip
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    payload = json.loads((tmp_path / "corpus.json").read_text())
    assert payload["cases"] == 5 and payload["spark_answers"] == 5
    assert all(r["status"] in ("equal", "wrong", "differs", "error") for r in payload["records"])
    assert "# Spark corpus (issue 33)" in (tmp_path / "corpus.txt").read_text()
