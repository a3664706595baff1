"""A worker node removed mid-job: executors come back on the node that remains and
the result is still exact, in every mode and with both shuffle services.

A real multi-node ``ray.cluster_utils.Cluster``: a head without CPUs (it hosts the
driver only, so no slot lands there) and two worker nodes; the session spreads
its slots over both.  The node is removed at a phase (a producer's second batch
on it), never on a timer.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest
import ray
from ray.cluster_utils import Cluster

import hybrid_shuffle as hs

from .clusters import cluster_with_a_driver_head
from .conftest import assert_no_leaks, wait_until
from .data import orders

NODE = {"num_cpus": 1, "object_store_memory": 150 * 2**20}
ROWS = 30_000


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    cluster = cluster_with_a_driver_head(150 * 2**20)
    cluster.add_node(**NODE)
    cluster.wait_for_nodes()
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def marks_its_node(marker: Path, at_call: int) -> Callable[[pa.Table], pa.Table]:
    """The first task to reach its ``at_call``-th batch claims ``marker`` (exclusively),
    writes the id of the node it runs on there and waits (bounded) until that node is
    gone; every other task passes."""
    path = str(marker)
    calls = [0]

    def fn(table: pa.Table) -> pa.Table:
        calls[0] += 1
        if calls[0] != at_call:
            return table
        try:
            claim = os.open(path + ".claim", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return table
        os.close(claim)
        with open(path + ".tmp", "w") as f:
            f.write(ray.get_runtime_context().get_node_id())
        os.replace(path + ".tmp", path)
        time.sleep(30)  # the node goes away under this task
        return table

    return fn


MODES = ("pipelined", "blocking", "hybrid-selective", "hybrid-full")
SERVICES = ("executor-local", "external")
#: every mode, each service twice (a removed node costs about 25 s a case); the whole
#: matrix with HS_TEST_FULL=1
CASES = (
    [(m, s) for m in MODES for s in SERVICES]
    if os.environ.get("HS_TEST_FULL")
    else [(m, SERVICES[(i + 1) % 2]) for i, m in enumerate(MODES)]
)


@pytest.mark.parametrize(("mode", "service"), CASES)
def test_a_node_removed_mid_job_gives_the_exact_result_on_the_nodes_that_remain(
    cluster: Cluster, mode: str, service: str, tmp_path: Path
) -> None:
    spare = cluster.add_node(**NODE)  # the node this test removes
    cluster.wait_for_nodes()
    config = {
        "parallelism": 2,
        "shuffle": {"service": service, "buffer_size": "64 KiB", "wait_timeout": 30},
        "failover": {"backoff": "50 ms"},
    }
    with hs.Session(config, address=cluster.address, slots=2) as session:
        assert len({info["node_id"] for info in session.executor_info}) == 2
        marker = tmp_path / "node"
        job = session.job(f"node-loss-{mode}")
        stream = (
            job.from_arrow(orders(ROWS), name="orders", parallelism=2)
            .map_batches(marks_its_node(marker, at_call=2), name="produce")
            .key_by("customer", edge="by_customer", mode=mode, partitions=2)
            .aggregate({"cents": "sum", "order_id": "count"}, name="totals")
        )
        removed: list[str] = []

        def remove_the_marked_node() -> None:
            wait_until(marker.exists, 60, "a producer's second batch")
            node_id = marker.read_text()
            victim = next(n for n in cluster.worker_nodes if n.node_id == node_id)
            removed.append(node_id)
            cluster.remove_node(victim, allow_graceful=False)

        thread = threading.Thread(target=remove_the_marked_node, daemon=True)
        thread.start()
        result = stream.collect()
        thread.join(30)
        assert removed, "the node was not removed"
        expected = (
            orders(ROWS)
            .group_by("customer")
            .aggregate([("cents", "sum"), ("order_id", "count")])
            .sort_by("customer")
        )
        got = result.table.sort_by("customer")
        assert got.equals(expected.select(got.column_names).cast(got.schema))
        assert result.restarts >= 1
        alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        assert removed[0] not in alive
        assert {info["node_id"] for info in session.executor_info} <= alive
        assert len(session.executors) == 2
        assert_no_leaks(session)
    if spare.node_id not in removed:  # the marked task ran on the module's first node
        cluster.remove_node(spare)
        cluster.add_node(**NODE)
    cluster.wait_for_nodes()
