"""What every actor of the library shares: how it is started, and its process probes.

Executors and partition stores are both started the same way: named in the
library's namespace, pinned to one node with hard affinity (the spread over
nodes holds whatever else the cluster runs), taking no CPU (slots are a
logical count), never restarted by Ray (a dead actor's partitions are gone; the
driver replaces it and recomputes).  Both answer the same probes: where they
run (``ready``, also the start-up check) and how many object references their
process holds (the leak checks).  Both put what they imported out of the cycle
collector's way once started (``freeze_imported_objects``).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Mapping
from typing import Any

import ray
from ray.exceptions import ActorUnschedulableError, RayActorError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

__all__ = ["ACTOR_GONE", "NAMESPACE", "ProcessProbes", "freeze_imported_objects", "start_pinned"]

#: the Ray namespace of the session's named actors
NAMESPACE = "hybrid-shuffle"
#: what ``ray.get`` on a call to one of these actors raises when the actor is gone: it
#: died, or it can never be placed because the node it is pinned to was removed before
#: it started (``ActorUnschedulableError``, which is not a ``RayActorError``)
ACTOR_GONE = (RayActorError, ActorUnschedulableError)


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


def freeze_imported_objects() -> None:
    """Take every object the process tracks now out of the cycle collector's walks
    (``gc.freeze``): call it once the actor's modules are imported and before it runs
    any task, so that what is frozen is modules, classes and functions, which live as
    long as the process, and never a task's objects (frozen garbage is never freed).

    A full collection in an actor walks the ~100k objects Ray, Arrow and DuckDB create
    as they are imported: 130-300 ms on two cores, paid by every leak probe
    (``owned_objects``) and by an automatic full collection, should a task make enough
    Python objects for one (TPC-H's 22 queries at SF1 make none: the data is Arrow's
    and DuckDB's); after the freeze it walks only what came since, a few ms."""
    gc.freeze()


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
