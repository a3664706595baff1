"""Issue 23: TPC-H Q1, Q3 and Q6 on the engine, against DuckDB and Spark SQL, same Parquet.

**Data**: ``tpchgen-cli`` Parquet at ``--scale`` (default SF1: 6,001,215
``lineitem`` rows), made once into ``benchmarks/.data/tpch-sf<N>/`` and reused
(``benchmarks.tpch_data``).  Every system reads these same files in every timed run
(the operating system's page cache is warm for all of them after the warm-up).

**Systems**, one after the other on the same 2 cores, each a warm-up then the median
of ``--runs`` (``benchmarks.harness``):

* **the engine**: the queries of ``benchmarks.tpch_engine`` (``from_parquet``, its
  operators and ``Stream.sql``) at ``DEFAULT_PARALLELISM`` subtasks per vertex, in a
  session of its own Ray (``num_cpus=2``), ``collect()`` to the driver;
* **DuckDB** with 2 threads (``duckdb.connect(config={"threads": 2})``), the query
  text of the ``tpch`` extension's ``tpch_queries()`` over views of the Parquet files,
  fetched as an Arrow table.  It is also **the oracle**: its answer, computed once
  before anything is timed, is what every other run is checked against;
* **Spark SQL** through RayDP in the same session (one executor with both cores,
  started after the engine and DuckDB are done so it never competes with them), the
  same query text over temporary views of ``spark.read.parquet`` of the same files,
  collected as Arrow.  AQE is left on (Spark's default); ``spark.sql.shuffle.partitions``
  is the engine's parallelism.

**Checked**: every run of every system, warm-ups included, row for row against the
oracle: the same column names, rows in the same order (each query's ORDER BY; Q6 has
one row), decimals exactly, floats within 1e-9 relative.  Spark's mean of a decimal is
a decimal of 6 places where DuckDB's is a double, so Spark's values may also differ by
half a unit of the 6th place (5e-7).  A mismatch is the measurement's error, so a fast
wrong answer is no result.

**Printed**: per query the three medians, engine/DuckDB and engine/Spark, and their
geometric means against issue 23's targets (engine/DuckDB <= 3x, engine/Spark <= 0.4x).
"""

from __future__ import annotations

import contextlib
import math
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import hybrid_shuffle as hs
from benchmarks import tpch_data
from benchmarks.harness import Measurement, measure, target
from benchmarks.tpch_engine import QUERIES

__all__ = ["DEFAULT_PARALLELISM", "DEFAULT_SCALE", "PEERS", "compare", "run"]

DEFAULT_SCALE = 1.0
#: one subtask per core: each task's DuckDB has one thread (``operators.threads``); 4 and
#: 8 were measured slower at SF1 on 2 cores (more tasks, the same cores)
DEFAULT_PARALLELISM = 2
PEERS = ("duckdb", "spark")
DUCKDB_THREADS = 2
SLOTS = 10
SPARK = {"executors": 1, "executor_cores": 2, "executor_memory": "6 GiB", "prewarm": True}
ENGINE = "engine"
DUCKDB = f"duckdb ({DUCKDB_THREADS} threads)"
SPARK_SQL = "spark sql (raydp, 2 cores)"
#: issue 23's targets on the geometric means of the per-query ratios
DUCKDB_TARGET = 3.0
SPARK_TARGET = 0.4
REL = 1e-9
#: Spark's avg of a decimal(15, 2) is a decimal(19, 6): off by up to half a unit of it
SPARK_ABS = 5e-7


def session_config(parallelism: int, object_store: str) -> dict[str, Any]:
    return {
        "parallelism": parallelism,
        "ray": {"num_cpus": 2, "object_store_memory": object_store},
        "shuffle": {"buffer_size": "8 MiB", "memory_budget": "1 GiB"},
        "spark": dict(SPARK),
    }


@contextlib.contextmanager
def sql_session(folder: Path) -> Iterator[hs.Session]:
    """A session of ``session_config(2, "3 GiB")`` with the eight TPC-H tables of
    ``folder`` as temporary views, its executors up and Spark warm (one trivial query
    run), warnings silenced: what the per-query profile scripts measure in."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with hs.Session(session_config(2, "3 GiB"), slots=SLOTS) as session:
            for table in tpch_data.ALL_TABLES:
                path = str(folder / f"{table}.parquet")
                session.spark.read.parquet(path).createOrReplaceTempView(table)
            session.sql("SELECT count(*) FROM nation").collect()
            yield session


# -- checking ----------------------------------------------------------------------------


def compare(got: pa.Table, want: pa.Table, rel: float = REL, abs_tol: float = 0.0) -> str | None:
    """None if ``got`` is ``want`` row for row (names, order, decimals exactly, other
    numbers within ``rel`` relative or ``abs_tol``), else what differs (one phrase).
    For query answers of a few rows: it compares Python values."""
    if got.column_names != want.column_names:
        return f"columns {got.column_names}, the oracle has {want.column_names}"
    if got.num_rows != want.num_rows:
        return f"{got.num_rows} rows, the oracle has {want.num_rows}"
    for name in want.column_names:
        pairs = zip(got.column(name).to_pylist(), want.column(name).to_pylist(), strict=True)
        for row, (a, b) in enumerate(pairs):
            if not _same(a, b, rel, abs_tol):
                return f"row {row} {name}: {a!r}, the oracle has {b!r}"
    return None


def _same(a: Any, b: Any, rel: float, abs_tol: float) -> bool:
    if isinstance(a, Decimal) and isinstance(b, Decimal):
        return a == b
    numbers = (int, float, Decimal)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool):
        x, y = float(a), float(b)
        return math.isclose(x, y, rel_tol=rel, abs_tol=abs_tol)
    return bool(a == b)


@dataclass
class _Checked:
    """A system's runner whose every answer is checked against the oracle."""

    run: Callable[[], pa.Table]
    want: pa.Table
    rel: float = REL
    abs_tol: float = 0.0
    runs: int = 0
    problem: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __call__(self) -> None:
        got = self.run()
        problem = compare(got, self.want, self.rel, self.abs_tol)
        if problem is not None and self.problem is None:
            self.problem = f"run {self.runs} differs from DuckDB: {problem}"
        self.runs += 1

    def finish(self, m: Measurement) -> Measurement:
        if self.problem is not None and m.error is None:
            m.error = self.problem
        return m


# -- the systems -------------------------------------------------------------------------


def duckdb_views(con: Any, paths: dict[str, str]) -> None:
    for table, path in paths.items():
        con.execute(f"CREATE OR REPLACE VIEW {table} AS SELECT * FROM read_parquet('{path}')")


def engine_runner(
    session: hs.Session,
    number: int,
    paths: dict[str, str],
    parallelism: int,
    vertices: list[dict[str, float]],
) -> Callable[[], pa.Table]:
    """The query on the engine; each run appends its vertices' ``cpu_seconds`` to
    ``vertices``: the task threads' CPU and their streamed DuckDB queries' threads."""

    def run() -> pa.Table:
        job = session.job(f"tpch-q{number}")
        result = QUERIES[number](job, paths, parallelism).collect()
        vertices.append({v.name: v.cpu_seconds for v in result.vertices.values()})
        return result.table

    return run


def spark_runner(spark: Any, text: str) -> Callable[[], pa.Table]:
    def run() -> pa.Table:
        return pa.Table.from_batches(spark.sql(text)._collect_as_arrow())

    return run


# -- the run -----------------------------------------------------------------------------


def run(
    scale: float = DEFAULT_SCALE,
    runs: int = 3,
    parallelism: int = DEFAULT_PARALLELISM,
    object_store: str = "3 GiB",
    peers: tuple[str, ...] | list[str] = PEERS,
    data: Path = tpch_data.CACHE,
) -> tuple[list[Measurement], dict[str, Any]]:
    """Every measurement in one Ray of its own (no other session may be open): the
    measurements and the summary (``payload["tpch"]``).  DuckDB, the oracle, always
    runs; ``peers`` says whether it is also timed and whether Spark runs.  ``data`` is
    the folder of the Parquet caches (``tpch-sf<N>/`` in it)."""
    started = time.time()
    folder = tpch_data.ensure(scale, data)
    paths = tpch_data.table_paths(scale, data)
    lineitem_rows = pq.ParquetFile(paths["lineitem"]).metadata.num_rows
    dist = f"TPC-H SF{scale:g}"
    con = tpch_data.duckdb_connection(DUCKDB_THREADS)
    duckdb_views(con, paths)
    texts = {n: tpch_data.query(con, n) for n in QUERIES}
    oracle = {n: con.execute(texts[n]).to_arrow_table() for n in QUERIES}
    out: list[Measurement] = []
    vertex_cpu: dict[int, dict[str, float]] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hs.ConfigWarning)
        config = session_config(parallelism, object_store)
        with hs.Session(config, slots=SLOTS) as session:
            for n in QUERIES:
                cpu: list[dict[str, float]] = []
                runner = engine_runner(session, n, paths, parallelism, cpu)
                checked = _Checked(runner, oracle[n])
                m = Measurement(f"tpch q{n}", ENGINE, lineitem_rows, dist,
                                note=f"parallelism {parallelism}")  # fmt: skip
                out.append(checked.finish(measure(m, checked, runs)))
                if not cpu:
                    continue
                vertex_cpu[n] = {k: statistics.median(r[k] for r in cpu[-runs:]) for k in cpu[-1]}
                print(f"[bench] tpch q{n} engine CPU s per vertex: "
                      + ", ".join(f"{k} {v:.2f}" for k, v in vertex_cpu[n].items()),
                      file=sys.stderr, flush=True)  # fmt: skip
            if "duckdb" in peers:
                for n in QUERIES:
                    checked = _Checked(
                        lambda t=texts[n]: con.execute(t).to_arrow_table(), oracle[n]
                    )
                    m = Measurement(f"tpch q{n}", DUCKDB, lineitem_rows, dist)
                    out.append(checked.finish(measure(m, checked, runs)))
            if "spark" in peers:
                out += _spark(session, paths, texts, oracle, lineitem_rows, dist, runs, parallelism)
    con.close()
    summary = _summary(out, scale, str(folder), parallelism, time.time() - started)
    for n, cpu_seconds in vertex_cpu.items():
        summary["queries"][f"q{n}"]["engine_cpu_seconds"] = cpu_seconds
    return out, summary


def _spark(
    session: hs.Session,
    paths: dict[str, str],
    texts: dict[int, str],
    oracle: dict[int, pa.Table],
    rows: int,
    dist: str,
    runs: int,
    parallelism: int,
) -> list[Measurement]:
    try:
        spark = session.spark
    except Exception as e:  # a missing peer is a result to report, not a crash
        m = Measurement("tpch q1", SPARK_SQL, rows, dist, error=f"spark did not start: {e}")
        print(f"[bench] spark peer skipped: {e}", file=sys.stderr)
        return [m]
    spark.conf.set("spark.sql.shuffle.partitions", str(parallelism))
    for table, path in paths.items():
        spark.read.parquet(path).createOrReplaceTempView(table)
    out = []
    for n in QUERIES:
        checked = _Checked(spark_runner(spark, texts[n]), oracle[n], abs_tol=SPARK_ABS)
        m = Measurement(f"tpch q{n}", SPARK_SQL, rows, dist, note="AQE on (default)")
        out.append(checked.finish(measure(m, checked, runs)))
    return out


# -- the summary -------------------------------------------------------------------------


def _summary(
    results: list[Measurement], scale: float, folder: str, parallelism: int, seconds: float
) -> dict[str, Any]:
    def median(n: int, system: str) -> float | None:
        for m in results:
            if m.workload == f"tpch q{n}" and m.system == system and m.seconds and not m.error:
                return m.median
        return None

    queries = {}
    for n in QUERIES:
        e, d, s = median(n, ENGINE), median(n, DUCKDB), median(n, SPARK_SQL)
        queries[f"q{n}"] = {
            "engine_seconds": e,
            "duckdb_seconds": d,
            "spark_seconds": s,
            "engine_over_duckdb": e / d if e and d else None,
            "engine_over_spark": e / s if e and s else None,
        }
    geo_duckdb = _geomean([q["engine_over_duckdb"] for q in queries.values()])
    geo_spark = _geomean([q["engine_over_spark"] for q in queries.values()])
    targets = [
        target(f"engine/DuckDB geomean <= {DUCKDB_TARGET:g}x", geo_duckdb, DUCKDB_TARGET),
        target(f"engine/Spark geomean <= {SPARK_TARGET:g}x", geo_spark, SPARK_TARGET),
    ]
    return {
        "scale": scale,
        "data": folder,
        "parallelism": parallelism,
        "duckdb_threads": DUCKDB_THREADS,
        "spark": SPARK,
        "seconds": seconds,
        "queries": queries,
        "geomean_engine_over_duckdb": geo_duckdb,
        "geomean_engine_over_spark": geo_spark,
        "targets": targets,
        "measurements": [m.to_json() for m in results],
    }


def _geomean(values: list[float | None]) -> float | None:
    if not values or any(v is None for v in values):
        return None
    return math.exp(statistics.fmean(math.log(v) for v in values if v is not None))
