"""The same PySpark pipeline on a two-node Ray cluster gives the same rows."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import ray
from ray.cluster_utils import Cluster

import hybrid_shuffle as hs

from .conftest import CONFIG, own_ray
from .test_bridge import rows

pytestmark = pytest.mark.spark

#: runs after the modules sharing conftest's session, which own_ray() closes
STARTS_ITS_OWN_RAY = True

NODE = {"num_cpus": 2, "object_store_memory": 250 * 2**20}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    own_ray()
    cluster = Cluster(initialize_head=True, head_node_args=NODE)
    cluster.add_node(**NODE)
    cluster.wait_for_nodes()
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def test_main_job_on_two_nodes_matches_plain_pyspark(cluster: Cluster) -> None:
    from main_job import generate, spark_pipeline

    config = {k: v for k, v in CONFIG.items() if k != "ray"}
    # Spark started in the background as ./dev main starts it
    with hs.Session(config, address=cluster.address, slots=4, start_spark=True) as session:
        assert session.bridge.starting  # not waited for until first used
        nodes = {info["node_id"] for info in session.executor_info}
        assert len(nodes) == 2  # executors (and so partitions) on both nodes
        orders, customers = generate(session.spark, scale=0.02)
        assert not session.bridge.starting
        df = spark_pipeline(orders, customers)
        ours = session.from_dataframe(df, "tpch-revenue").to_spark()
        assert rows(ours) == rows(df)
    # the session only disconnected: the cluster it joined keeps running
    ray.init(address=cluster.address)
    assert len([n for n in ray.nodes() if n["Alive"]]) == 2
    assert not [
        a
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["name"].startswith(session.session_id)
    ]
