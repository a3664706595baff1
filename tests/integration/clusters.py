"""Multi-node Ray clusters for tests: ``ray.cluster_utils.Cluster`` set up one way."""

from __future__ import annotations

import ray
from ray.cluster_utils import Cluster


def cluster_with_a_driver_head(object_store_memory: int) -> Cluster:
    """A cluster whose head has no CPUs (it hosts the driver, so no slot lands there)
    and notices a removed node in about 2 s: Ray declares a node dead after missed
    health checks (15 s by default), this one checks every 0.5 s and gives up after 3.
    Any Ray of this process is shut down first.  Add the worker nodes, then
    ``wait_for_nodes()``."""
    if ray.is_initialized():
        ray.shutdown()
    return Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0,
            "object_store_memory": object_store_memory,
            "_system_config": {
                "health_check_period_ms": 500,
                "health_check_failure_threshold": 3,
                "health_check_initial_delay_ms": 0,
            },
        },
    )
