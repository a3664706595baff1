"""Placement across the nodes of a real multi-node ``ray.cluster_utils.Cluster``
(issue 14, 3): executors spread by a rule that holds, and consumers run on the node
holding their input bytes.

A head without CPUs (it hosts the driver only, so no executor lands there) and two
worker nodes with small object stores.  Everything asserted follows from the rule
(executor ``i`` on worker node ``i mod n``, sorted by id) and the input sizes, so the
tests are deterministic; none waits on a timer.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
import ray
from ray.cluster_utils import Cluster

import hybrid_shuffle as hs

from .clusters import cluster_with_a_driver_head
from .conftest import assert_no_leaks, wait_until
from .data import orders

NODE = {"num_cpus": 1, "object_store_memory": 120 * 2**20}
ROWS = 150_000  # about 4 MiB on the edge: its buffers (1 MiB) live in the object store


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    cluster = cluster_with_a_driver_head(120 * 2**20)
    for _ in range(2):
        cluster.add_node(**NODE)
    cluster.wait_for_nodes()
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def workers(cluster: Cluster) -> list[str]:
    """The worker nodes' ids, sorted: the order the session's rule uses."""
    return sorted(node.node_id for node in cluster.worker_nodes)


def nodes_of(session: hs.Session) -> list[str]:
    """Executor index -> the node it reported running on."""
    return [info["node_id"] for info in session.executor_info]


def test_executors_spread_round_robin_over_the_worker_nodes_in_id_order(
    cluster: Cluster,
) -> None:
    nodes = workers(cluster)
    for slots in (4, 3):
        with hs.Session({"parallelism": 2}, address=cluster.address, slots=slots) as session:
            expected = [nodes[i % len(nodes)] for i in range(slots)]
            assert nodes_of(session) == expected
            assert session.pool.nodes == expected


@pytest.mark.parametrize("service", ["executor-local", "external"])
def test_consumers_of_a_blocking_edge_run_on_the_node_holding_its_bytes(
    cluster: Cluster, service: str
) -> None:
    config = {"parallelism": 2, "shuffle": {"service": service, "buffer_size": "1 MiB"}}
    with hs.Session(config, address=cluster.address, slots=4) as session:
        table = orders(ROWS)
        job = session.job(f"locality-{service}")
        result = (
            job.from_arrow(table, name="orders", parallelism=1)
            .key_by("customer", edge="by_customer", mode="blocking", partitions=2)
            .aggregate({"cents": "sum", "order_id": "count"}, name="totals", combine=False)
            .collect()
        )
        node = nodes_of(session)
        ran = {r.name: node[r.executor_index] for r in result.tasks}
        # executors 0 and 2 are on one node, 1 and 3 on the other; the producer ran on
        # executor 0, and the slots free longest (1, 2) would split the consumers
        assert ran["orders[0]"] == node[0]
        assert ran["totals[0]"] == ran["totals[1]"] == node[0], ran
        assert result.edges["by_customer"].bytes >= 2 * 2**20
        expected = (
            table.group_by("customer")
            .aggregate([("cents", "sum"), ("order_id", "count")])
            .sort_by("customer")
        )
        got = result.table.sort_by("customer")
        assert got.equals(expected.select(got.column_names).cast(got.schema))
        assert_no_leaks(session)


def test_executors_of_a_removed_node_come_back_on_the_nodes_with_the_fewest(
    cluster: Cluster,
) -> None:
    """Runs last: it removes a node of the module's cluster."""
    cluster.add_node(**NODE)
    cluster.wait_for_nodes()
    nodes = workers(cluster)
    with hs.Session({"parallelism": 2}, address=cluster.address, slots=4) as session:
        assert nodes_of(session) == [nodes[0], nodes[1], nodes[2], nodes[0]]
        victim = next(n for n in cluster.worker_nodes if n.node_id == nodes[0])
        cluster.remove_node(victim, allow_graceful=False)
        # heal once Ray declared the node dead (until then it counts as alive, and a
        # replacement there would die starting: covered by the unit tests, not pinned here)
        wait_until(
            lambda: not any(n["NodeID"] == nodes[0] and n["Alive"] for n in ray.nodes()),
            60,
            "Ray declares the removed node dead",
        )
        replaced: set[int] = set()

        def healed() -> bool:
            replaced.update(session.heal())
            return replaced == {0, 3}

        wait_until(healed, 60, "Ray reports both executors of the removed node dead")
        placed = nodes_of(session)  # waits (bounded) for the replacements to answer
        assert placed == session.pool.nodes
        assert Counter(placed) == {nodes[1]: 2, nodes[2]: 2}
