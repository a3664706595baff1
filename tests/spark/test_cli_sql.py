"""``hybrid-shuffle sql``: a Spark SQL query over Parquet views, run in the engine."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from .conftest import JVM_OPTIONS

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "hybrid_shuffle.cli"]

QUERY = """
SELECT k % 7 AS g, count(*) AS n, sum(v) AS s, max(name) AS m
FROM t WHERE v > 10 GROUP BY k % 7 ORDER BY s DESC
"""


#: Spark in local mode in the command's own process: what these tests check (the command
#: line, the views, the output) does not depend on the backend, and local mode starts in a
#: few seconds where RayDP takes about twenty (the bridge's tests cover RayDP); its JVM with
#: the tests' options (conftest.JVM_OPTIONS)
CONFIG = f"""
ray: {{num_cpus: 2, object_store_memory: 300 MiB}}
spark:
  backend: local
  executors: 1
  executor_cores: 1
  executor_memory: 1 GiB
  configs: {{spark.driver.extraJavaOptions: '{JVM_OPTIONS}'}}
"""


def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, check=False
    )


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("config") / "local.yaml"
    path.write_text(CONFIG)
    return str(path)


@pytest.fixture(scope="module")
def table_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    n = 2_000
    table = pa.table(
        {
            "k": pa.array(range(n), pa.int64()),
            "v": pa.array([(i * 37) % 101 for i in range(n)], pa.int64()),
            "name": pa.array([f"n{i % 13:02d}" for i in range(n)]),
        }
    )
    path = tmp_path_factory.mktemp("views") / "t.parquet"
    pq.write_table(table, path, row_group_size=500)
    return path


def printed_rows(stdout: str) -> list[list[str]]:
    """The rows of the printed table (header and the closing count line left out)."""
    table = stdout.split("\n\n")[0].strip().splitlines()
    return [line.split() for line in table[1:]]


def expected_rows(path: Path, query: str) -> list[list[str]]:
    """The query's rows by DuckDB on the same file (no second Spark in the test: the
    query is plain SQL on which both agree)."""
    import duckdb

    with duckdb.connect(config={"threads": 1}) as con:
        con.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet('{path}')")
        return [[str(v) for v in row] for row in con.execute(query).fetchall()]


def test_sql_file_prints_the_first_rows(table_path: Path, tmp_path: Path, config: str) -> None:
    query_file = tmp_path / "groups.sql"
    query_file.write_text(QUERY)
    out = run(
        "sql", str(query_file), "--view", f"t={table_path}", "--limit", "3", "--config", config
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[0].split() == ["g", "n", "s", "m"]
    assert printed_rows(out.stdout) == expected_rows(table_path, QUERY)[:3]
    assert "7 rows in" in out.stdout and "the first 3 shown" in out.stdout


def test_out_writes_every_row_as_parquet(table_path: Path, tmp_path: Path, config: str) -> None:
    target = tmp_path / "result"
    out = run("sql", QUERY, "--view", f"t={table_path}", "--out", str(target), "--config", config)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"7 rows written to {target}" in out.stdout
    written = pq.read_table(target)
    assert written.column_names == ["g", "n", "s", "m"]
    rows = sorted([str(v) for v in r.values()] for r in written.to_pylist())
    assert rows == sorted(expected_rows(table_path, QUERY))


def test_explain_names_the_spark_exchanges_and_runs_nothing(table_path: Path, config: str) -> None:
    out = run("sql", QUERY, "--view", f"t={table_path}", "--explain", "--config", config)
    assert out.returncode == 0, out.stderr[-3000:]
    # the group-by's and the ORDER BY's exchanges, named by their formatted ids
    assert set(re.findall(r"\bexchange_\d+\b", out.stdout)) == {
        f"exchange_{i}" for i in re.findall(r"Exchange \((\d+)\)", out.stdout)
    }
    assert len(set(re.findall(r"\bexchange_\d+\b", out.stdout))) == 2, out.stdout
    assert "hashpartitioning" in out.stdout and "rangepartitioning" in out.stdout
    assert "rows in" not in out.stdout


def test_analyze_prints_the_rows_then_where_the_time_went(table_path: Path, config: str) -> None:
    out = run("sql", QUERY, "--view", f"t={table_path}", "--analyze", "--config", config)
    assert out.returncode == 0, out.stderr[-3000:]
    assert printed_rows(out.stdout) == expected_rows(table_path, QUERY)
    profile = out.stdout[out.stdout.index("Profile of job sql: ") :]
    phases = {line.split()[0] for line in profile.splitlines() if line.startswith("  ")}
    assert {"spark", "translate", "plan", "deploy", "tasks", "hand-back", "total"} <= phases
    # the tree holds the group-by's and the ORDER BY's exchanges, and the scan under them
    assert len(set(re.findall(r"^[ │├└─]*(exchange_\d+) \(", profile, re.M))) == 2, profile
    assert re.search(r"^ *scan_\d+.*: 2 subtasks?, wall [\d.]+ s, CPU [\d.]+ s", profile, re.M)
    assert "rows 2,000 in -> " in profile  # the scan's stage read the whole table
    assert profile.rstrip().splitlines()[-1].startswith("Critical path: ")


def test_explain_and_analyze_together_exit_2_before_anything_starts() -> None:
    out = run("sql", "SELECT 1", "--explain", "--analyze")
    assert out.returncode == 2
    assert "argument --analyze: not allowed with argument --explain" in out.stderr


def test_unknown_table_exits_non_zero_with_spark_s_message(table_path: Path, config: str) -> None:
    out = run("sql", "SELECT * FROM nope", "--view", f"t={table_path}", "--config", config)
    assert out.returncode == 1
    message = [line for line in out.stderr.splitlines() if line.startswith("hybrid-shuffle:")]
    assert len(message) == 1, out.stderr[-3000:]
    assert "TABLE_OR_VIEW_NOT_FOUND" in message[0] and "`nope`" in message[0]
    assert "Traceback" not in out.stderr


def test_view_mistakes_are_one_sentence_before_anything_starts(tmp_path: Path) -> None:
    bad = run("sql", "SELECT 1", "--view", "orders")
    assert bad.returncode == 2
    assert "argument --view: expected NAME=PATH" in bad.stderr
    missing = tmp_path / "missing.parquet"
    out = run("sql", "SELECT 1", "--view", f"orders={missing}")
    assert out.returncode == 2
    assert out.stderr.strip() == (
        f"hybrid-shuffle: --view orders={missing}: '{missing}' does not exist; check the path"
    )
