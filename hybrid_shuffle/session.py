"""The session: a Ray connection, the shuffle master and the executor slots.

``Session()`` starts an embedded local Ray (explicit ``num_cpus``, the object
store size from config) unless Ray is already initialised in this process or
``address=`` names a cluster to join.  It creates ``slots`` executor actors (one
slot each; slots are a logical count as in Flink, so 8 slots on 2 cores share
the cores) and the driver-side ``ShuffleMaster``.  ``session.spark`` starts
Spark on Ray through RayDP on first use (or is the session passed as
``spark=``).  ``close()`` stops the Spark it started, releases every partition,
kills the executors, removes the session's spill directory and shuts down Ray
only if the session started it: an attached cluster keeps running.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from hybrid_shuffle.actors.executor import MAX_CONCURRENCY, Executor
from hybrid_shuffle.config import Config, load_config
from hybrid_shuffle.errors import ConfigError, ExecutorLostError, WaitTimeoutError
from hybrid_shuffle.shuffle.service import load_shuffle_service
from hybrid_shuffle.spark import SparkBridge

if TYPE_CHECKING:
    from hybrid_shuffle.api.job import Job

__all__ = ["Session"]

NAMESPACE = "hybrid-shuffle"
_START_TIMEOUT = 120.0


class Session:
    def __init__(
        self,
        config: str | os.PathLike[str] | Mapping[str, Any] | Config | None = None,
        *,
        address: str | None = None,
        slots: int | None = None,
        spark: Any = None,
    ) -> None:
        self.config = load_config(config)
        self.session_id = f"s{uuid.uuid4().hex[:10]}"
        self._owns_ray = False
        self._closed = False
        self.bridge = SparkBridge(self.config.spark, f"hybrid-shuffle-{self.session_id}", spark)
        if not ray.is_initialized():
            self._start_ray(address)
        cluster_cpus = int(ray.cluster_resources().get("CPU", 1))
        self.slots = slots or self.config.slots or max(cluster_cpus, 1)
        service = self.config.shuffle.service
        factory = load_shuffle_service(service)  # fails here, with the key path, if unknown
        self.master = factory.create_shuffle_master(self.config.shuffle)
        share = max(
            self.config.shuffle.memory_budget // self.slots, self.config.shuffle.buffer_size
        )
        actor = ray.remote(Executor)
        nodes = _worker_nodes()
        self.executors = [
            actor.options(
                name=f"{self.session_id}-executor-{i}",
                namespace=NAMESPACE,
                num_cpus=0,
                max_concurrency=MAX_CONCURRENCY,
                # slots round-robin over the nodes, so partitions spread over the cluster
                scheduling_strategy=NodeAffinitySchedulingStrategy(
                    nodes[i % len(nodes)], soft=True
                ),
            ).remote(i, self.session_id, service, self.config.shuffle, share)
            for i in range(self.slots)
        ]
        try:
            self.executor_info = ray.get(
                [e.ready.remote() for e in self.executors], timeout=_START_TIMEOUT
            )
        except GetTimeoutError as e:
            self.close()
            raise WaitTimeoutError(
                f"the {self.slots} executor actors did not start within {_START_TIMEOUT:.0f} s; "
                "the Ray cluster is out of resources, so lower slots"
            ) from e
        except RayActorError as e:
            self.close()
            raise ExecutorLostError(f"an executor actor failed to start: {e}") from e

    def _start_ray(self, address: str | None) -> None:
        kwargs: dict[str, Any] = {
            "namespace": NAMESPACE,
            "include_dashboard": False,
            "logging_level": logging.WARNING,
            "configure_logging": True,
        }
        if address is None:
            ray_config = self.config.ray
            kwargs["num_cpus"] = ray_config.num_cpus or os.cpu_count() or 1
            if ray_config.object_store_memory is not None:
                kwargs["object_store_memory"] = ray_config.object_store_memory
        else:
            kwargs["address"] = address
        try:
            ray.init(**kwargs)
        except (ConnectionError, ValueError) as e:
            raise ConfigError(
                f"address: cannot start or join Ray at {address or 'local'} ({e}); start the "
                "cluster with 'ray start --head' or drop address= for an embedded Ray"
            ) from e
        self._owns_ray = True

    def job(self, name: str) -> Job:
        from hybrid_shuffle.api import Job

        if self._closed:
            raise ConfigError("this session is closed; open a new hs.Session()")
        return Job(self, name)

    @property
    def spark(self) -> Any:
        """The Spark session on Ray: the one passed in, or one started now through RayDP."""
        if self._closed:
            raise ConfigError("this session is closed; open a new hs.Session()")
        return self.bridge.session

    def partitions_occupying_local_resources(self) -> dict[int, set[str]]:
        """Per executor, the partitions it still holds (empty after every job)."""
        self.master.wait_for_releases(self.config.shuffle.wait_timeout)
        sets = ray.get(
            [e.partitions_occupying_local_resources.remote() for e in self.executors],
            timeout=self.config.shuffle.wait_timeout,
        )
        return {i: set(s) for i, s in enumerate(sets)}

    def owned_objects(self) -> dict[int, int]:
        """Per executor, how many object references it still holds (leak checks)."""
        self.master.wait_for_releases(self.config.shuffle.wait_timeout)
        counts = ray.get(
            [e.owned_objects.remote() for e in self.executors],
            timeout=self.config.shuffle.wait_timeout,
        )
        return dict(enumerate(counts))

    @property
    def spill_dir(self) -> str:
        return os.path.join(self.config.shuffle.spill_dir, self.session_id)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.bridge.stop()
            self.master.close()
            closing = [e.close.remote() for e in getattr(self, "executors", [])]
            if closing:
                ray.wait(closing, num_returns=len(closing), timeout=30)
        finally:
            for e in getattr(self, "executors", []):
                ray.kill(e)
            shutil.rmtree(self.spill_dir, ignore_errors=True)
            if self._owns_ray:
                ray.shutdown()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _worker_nodes() -> list[str]:
    """Alive nodes with CPUs (the head of a cluster started with 0 CPUs hosts no slot)."""
    alive = [n for n in ray.nodes() if n.get("Alive")]
    with_cpus = [n for n in alive if n.get("Resources", {}).get("CPU", 0) > 0] or alive
    return sorted(n["NodeID"] for n in with_cpus)
