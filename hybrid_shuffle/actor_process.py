"""What every actor of the library shares: how it is started, and its process probes.

Executors and partition stores are both started the same way: named in the
library's namespace, pinned to one node with hard affinity (the spread over
nodes holds whatever else the cluster runs), taking no CPU (slots are a
logical count), never restarted by Ray (a dead actor's partitions are gone; the
driver replaces it and recomputes).  Both answer the same probes: where they
run (``ready``, also the start-up check) and how many object references their
process holds (the leak checks).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Mapping
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

__all__ = ["NAMESPACE", "ProcessProbes", "start_pinned"]

#: the Ray namespace of the session's named actors
NAMESPACE = "hybrid-shuffle"


def start_pinned(
    actor_class: type,
    name: str,
    node_id: str,
    max_concurrency: int,
    *args: Any,
    runtime_env: Mapping[str, Any] | None = None,
) -> Any:
    """A named, threaded actor of ``actor_class`` on node ``node_id`` (see the module
    docstring), in ``runtime_env`` on top of the job's if given; returns its handle
    at once."""
    options: dict[str, Any] = {
        "name": name,
        "namespace": NAMESPACE,
        "num_cpus": 0,
        "max_concurrency": max_concurrency,
        "max_restarts": 0,
        "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False),
    }
    if runtime_env:
        options["runtime_env"] = dict(runtime_env)
    return ray.remote(actor_class).options(**options).remote(*args)


class ProcessProbes:
    """The probes every actor answers (a mixin of the actor classes)."""

    def ready(self) -> dict[str, Any]:
        """The node and process id: answering at all means the actor started."""
        return {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}

    def owned_objects(self) -> int:
        """ObjectRefs this process still holds a reference to (leak checks)."""
        gc.collect()  # refs in unreachable cycles are not held by anyone
        worker: Any = ray._private.worker.global_worker
        return len(worker.core_worker.get_all_reference_counts())
