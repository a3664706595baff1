"""Region failover and node loss on a translated plan (issue 36): TPC-H Q18 (sort-merge
joins, a shuffled semi join and an aggregate) run by ``Session.sql`` gives Spark's exact
answer after an executor is killed mid-query, in all four modes and with both shuffle
services, and after a worker node is removed mid-query.

The failure is injected at a phase, never on a timer, with the hand-built tests' gate
(``tests/integration/phases``): the ``orders`` view the query reads passes through a
``mapInArrow`` that hands every batch on unchanged and, at the end of its input, writes
its process id to a marker and waits (bounded) until the test has done its damage.  The
engine runs that function in the task scanning ``orders``, the producer of the edge into
the semi join, so when the gate closes the task has written its rows (all 15,000 orders,
several 64 KiB buffers per subpartition) but not finished its partition.  (At the end
of the input, not at a later batch: the split is one batch, and a Python step hands on
what the function yielded only when the function asks for more.)  Every edge of the
plan is forced to the mode under test (``keep: true``, past the output-on-EOF rule), so
a pipelined run is one pipelined region.  Spark's answer comes from the same query over
the plain views.

One Ray cluster and one Spark serve the module: a head without CPUs (the driver's) and
three one-CPU worker nodes, two of them running the session's two slots; the node-loss
test, last, removes the node of the gated task and the executors come back on the
spare one.  Spark runs in local mode, in the driver: RayDP's executors are Ray actors
that would land on the worker nodes, and one removed with its node would take Spark
with it.  The data is TPC-H at scale factor 0.01 (``tpchgen-cli``), the query text
DuckDB's ``tpch_queries()``.

The module runs with ``adaptive.semi_join_filters`` off, so that the orders scan
writes every order before its gate; one test turns it on and kills the executor of the
orders scan while it reads the keys of the ``HAVING`` side computed first.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import ray
from ray.cluster_utils import Cluster

import hybrid_shuffle as hs

from ..integration.clusters import cluster_with_a_driver_head
from ..integration.conftest import assert_no_leaks, wait_until
from ..integration.phases import gate, kill_at
from .conftest import JVM_CONFIGS, own_ray
from .oracle import exact_value, rows, spark_table, tpch_queries

pytestmark = pytest.mark.spark

#: runs after the modules sharing conftest's session, which own_ray() closes
STARTS_ITS_OWN_RAY = True

MODES = ("pipelined", "blocking", "hybrid-selective", "hybrid-full")
SERVICES = ("executor-local", "external")
SCALE = 0.01
TABLES = ("customer", "orders", "lineitem")
NODE = {"num_cpus": 1, "object_store_memory": 100 * 2**20}
CONFIG: dict[str, Any] = {
    "parallelism": 2,
    "shuffle": {"buffer_size": "64 KiB", "memory_budget": "32 MiB", "wait_timeout": 60},
    "failover": {"max_attempts": 3, "backoff": "50 ms"},
    # the orders scan writes every order before its gate (several buffers a subpartition):
    # with the runtime filter the HAVING side's keys would cut them to the few that pass
    # (the last test kills an executor with it on)
    "adaptive": {"semi_join_filters": False},
    "spark": {
        "backend": "local",
        "executors": 1,
        "executor_cores": 2,
        "executor_memory": "1 GiB",
        "prewarm": False,
        # sort-merge joins: both sides of each join shuffled over an engine edge
        "configs": {
            **JVM_CONFIGS,
            "spark.sql.autoBroadcastJoinThreshold": -1,
            "spark.sql.shuffle.partitions": 2,
        },
    },
}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    own_ray()
    cluster = cluster_with_a_driver_head(100 * 2**20)
    for _ in range(3):  # two for the slots, one spare for the node-loss test
        cluster.add_node(**NODE)
    cluster.wait_for_nodes()
    yield cluster
    ray.shutdown()
    cluster.shutdown()


@pytest.fixture(scope="module")
def tpch_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    found = Path(sys.executable).with_name("tpchgen-cli")
    if not found.is_file():
        pytest.skip(f"tpchgen-cli is not installed next to {sys.executable}")
    out = tmp_path_factory.mktemp("tpch")
    cmd = [str(found), "parquet", "--scale-factor", f"{SCALE:g}", "--output-dir", str(out)]
    cmd += ["--tables", ",".join(TABLES), "--quiet"]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    return out


@pytest.fixture(scope="module")
def q18() -> str:
    """TPC-H's Q18 as DuckDB's ``tpch`` extension has it."""
    return tpch_queries()[18]


@pytest.fixture(scope="module")
def session(cluster: Cluster, tpch_dir: Path) -> Iterator[hs.Session]:
    with hs.Session(CONFIG, address=cluster.address, slots=2) as s:
        assert len({info["node_id"] for info in s.executor_info}) == 2
        for table in TABLES:
            s.spark.read.parquet(str(tpch_dir / f"{table}.parquet")).createOrReplaceTempView(table)
        yield s


@pytest.fixture(scope="module")
def want(session: hs.Session, q18: str) -> pa.Table:
    """Spark's own answer, over the plain views."""
    table = spark_table(session.spark.sql(q18))
    assert table is not None and table.num_rows > 0
    return table


# -- the gate and the plan ----------------------------------------------------------------


@contextmanager
def orders_through_a_gate(
    session: hs.Session, tpch_dir: Path, marker: Path, release: Path
) -> Iterator[None]:
    """The view ``orders`` read through a ``mapInArrow`` that, at the end of its task's
    input, stops at the gate (``phases.gate``); the plain view again after the block."""
    stop = gate(marker, release, at_call=1)
    empty = pa.table({})

    def through(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from batches
        stop(empty)  # every row went out; the task has not finished its partition

    spark = session.spark
    plain = spark.read.parquet(str(tpch_dir / "orders.parquet"))
    plain.mapInArrow(through, plain.schema).createOrReplaceTempView("orders")
    try:
        yield
    finally:
        plain.createOrReplaceTempView("orders")


@contextmanager
def every_edge(session: hs.Session, stream: hs.Stream, mode: str, service: str) -> Iterator[None]:
    """The session planning every edge of ``stream`` in ``mode`` (kept past the
    output-on-EOF rule) on ``service``, for the block."""
    names = [e["name"] for e in stream.explain_data()["edges"]]
    before = session.config
    session.config = before.with_overrides(
        shuffle={
            "service": service,
            "default_mode": mode,
            "batch_mode": "blocking" if mode == "pipelined" else mode,
        },
        edges={name: {"mode": mode, "keep": True} for name in names},
    )
    try:
        yield
    finally:
        session.config = before


def gated_vertex(result: hs.JobResult) -> str:
    """The vertex that ran the gate: the scan of ``orders`` and its ``mapInArrow``."""
    (vertex,) = {t.vertex for t in result.tasks if "python_" in t.vertex}
    return vertex


def assert_buffers_went_out_before_the_gate(
    result: hs.JobResult, edges: list[dict[str, Any]]
) -> None:
    """The gated task's partition (of its attempt that finished: the same rows) has more
    buffers than subpartitions.  Its writer adds a buffer whenever a subpartition's rows
    reach ``buffer_size`` and, when the task finishes, the rest (less than one buffer
    each), so buffers went out before the end of its input, where the gate stops it."""
    vertex = gated_vertex(result)
    (edge,) = [e for e in edges if e["source"] == vertex]
    writes = [w for t in result.tasks if t.vertex == vertex for w in t.writes]
    assert writes and all(w.edge == edge["name"] for w in writes)
    assert sum(w.buffers for w in writes) > len(writes) * edge["partitions"]


def assert_sparks_answer(got: pa.Table, want: pa.Table) -> None:
    """Spark's columns and rows, value for value, in the ORDER BY's order."""
    assert got.column_names == want.column_names
    assert rows(got, exact_value) == rows(want, exact_value)


# -- an executor killed -------------------------------------------------------------------


@pytest.mark.parametrize("service", SERVICES)
@pytest.mark.parametrize("mode", MODES)
def test_an_executor_killed_after_the_joins_producer_wrote_its_buffers_gives_sparks_answer(
    session: hs.Session,
    tpch_dir: Path,
    q18: str,
    want: pa.Table,
    mode: str,
    service: str,
    tmp_path: Path,
) -> None:
    marker, release = tmp_path / "first-buffers", tmp_path / "release"
    with orders_through_a_gate(session, tpch_dir, marker, release):
        stream = session.sql(q18, name=f"q18-{mode}-{service}", fallback="error")
        with every_edge(session, stream, mode, service):
            explained = stream.explain_data()
            assert explained["spark_subtrees"] == []
            assert {(e["mode"], e["service"]) for e in explained["edges"]} == {(mode, service)}
            killer = kill_at(session, marker, release)
            result = stream.collect(timeout=180)
            killer.join(5)
    assert marker.exists()  # the gate closed
    assert_sparks_answer(result.table, want)
    assert result.restarts >= 1
    # the killed attempt of the gated task ran again, and had written buffers
    assert max(t.attempt for t in result.tasks if t.vertex == gated_vertex(result)) >= 1
    assert_buffers_went_out_before_the_gate(result, explained["edges"])
    assert len(session.executors) == session.slots
    assert_no_leaks(session)


def test_an_executor_killed_while_the_semi_joins_keys_cut_the_orders_gives_sparks_answer(
    session: hs.Session, tpch_dir: Path, q18: str, want: pa.Table, tmp_path: Path
) -> None:
    """With the runtime filter on, the orders scan reads the keys of the stage computed
    first (``build_<id>_keys``) and keeps the few orders that pass; its executor is
    killed at the gate, in one pipelined region, and the query still gives Spark's
    answer."""
    mode, service = "pipelined", "executor-local"
    marker, release = tmp_path / "first-buffers", tmp_path / "release"
    before = session.config
    session.config = before.with_overrides(adaptive={"semi_join_filters": True})
    try:
        with orders_through_a_gate(session, tpch_dir, marker, release):
            stream = session.sql(q18, name="q18-keys-cut", fallback="error")
            with every_edge(session, stream, mode, service):
                explained = stream.explain_data()
                killer = kill_at(session, marker, release)
                result = stream.collect(timeout=180)
                killer.join(5)
    finally:
        session.config = before
    keys = [e for e in explained["edges"] if e["name"].endswith("_keys")]
    assert keys and all(e["name"].startswith("build_") for e in keys)
    assert marker.exists()
    gated = gated_vertex(result)
    assert gated in {e["target"] for e in keys}
    assert_sparks_answer(result.table, want)
    assert result.restarts >= 1
    assert max(t.attempt for t in result.tasks if t.vertex == gated) >= 1
    assert len(session.executors) == session.slots
    assert_no_leaks(session)


# -- a node removed -----------------------------------------------------------------------


def test_a_node_removed_after_the_joins_producer_wrote_its_buffers_gives_sparks_answer(
    session: hs.Session,
    cluster: Cluster,
    tpch_dir: Path,
    q18: str,
    want: pa.Table,
    tmp_path: Path,
) -> None:
    """The node of the gated task is removed, its executor and its partition store with
    it; the executors come back on the spare node, and nothing of the dead store is
    left on disk (hybrid-full persists every buffer to a spill file: the master removes
    the dead store's files, which this machine's disk still holds)."""
    mode, service = "hybrid-full", "external"
    marker, release = tmp_path / "first-buffers", tmp_path / "release"
    removed: list[str] = []

    def remove_the_gated_node() -> None:
        try:
            wait_until(marker.exists, 60, "the end of the orders scan's input")
            pid = int(marker.read_text())
            node_id = next(i["node_id"] for i in session.executor_info if i["pid"] == pid)
            victim = next(n for n in cluster.worker_nodes if n.node_id == node_id)
            removed.append(node_id)
            cluster.remove_node(victim, allow_graceful=False)
        finally:
            release.touch()

    with orders_through_a_gate(session, tpch_dir, marker, release):
        stream = session.sql(q18, name="q18-node-loss", fallback="error")
        with every_edge(session, stream, mode, service):
            explained = stream.explain_data()
            thread = threading.Thread(target=remove_the_gated_node, daemon=True)
            thread.start()
            result = stream.collect(timeout=180)
            thread.join(30)
    assert removed, "the node was not removed"
    assert_sparks_answer(result.table, want)
    assert result.restarts >= 1
    assert max(t.attempt for t in result.tasks if t.vertex == gated_vertex(result)) >= 1
    assert_buffers_went_out_before_the_gate(result, explained["edges"])
    alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert removed[0] not in alive
    assert {info["node_id"] for info in session.executor_info} <= alive
    assert len(session.executors) == session.slots
    assert_no_leaks(session)
