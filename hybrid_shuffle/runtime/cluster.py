"""The cluster a session runs on: Ray, the shuffle service, the executor slots, Spark.

``Cluster()`` starts an embedded local Ray (explicit ``num_cpus``, the object store
size from config) unless Ray is already initialised in this process or ``address=``
names a cluster to join.  It creates the shuffle master and the partition tracker, a
private spill directory (0700), and ``slots`` executor actors through the slot pool.
``spark`` starts Spark on first use, as ``spark.backend`` says (RayDP, local mode), or
is the session passed as ``spark=`` (``attach``: never stopped by the engine);
``start_spark(wait=False)`` starts it in a background thread, so that Spark's seconds
of start-up overlap the caller's own work; ``Cluster(start_spark=True)`` does so as it
starts, so that Spark's start overlaps Ray's too (on RayDP, the driver's JVM launches
while Ray starts; RayDP's app master, a Ray actor, once Ray is up).

It costs about what ``ray.init`` does (``benchmarks/startup.py``): it waits for
nothing but Ray.  The executors' processes start while the caller goes on, and the
first job or probe waits for them (``SlotPool.wait_started``); the planning modules
(and pandas, DuckDB with them) are imported by the first job, not here; Spark starts
on first use, saying so on stderr.

``close()`` stops the Spark it started, releases every partition (the caches' too),
closes and kills the executors, removes the spill directory and shuts down Ray only if
it started it: an attached cluster keeps running.  A ``Cluster()`` that fails half-way
closes what it had started before it raises.

This is what the API runs jobs on (``api.job.Job`` is given one); ``hs.Session`` is the
user's facade over it, with the calls that build jobs (``job``, ``sql``).
"""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING, Any

from hybrid_shuffle._words import plural
from hybrid_shuffle.config import Config
from hybrid_shuffle.errors import SessionClosedError
from hybrid_shuffle.quiet import configure_engine_logging
from hybrid_shuffle.runtime.partition_tracker import PartitionTracker
from hybrid_shuffle.runtime.slot_pool import ExecutorSpec, SlotPool
from hybrid_shuffle.runtime.transport import RayTransport
from hybrid_shuffle.shuffle.api import ShuffleEnvironmentContext, ShuffleMasterContext
from hybrid_shuffle.shuffle.service import (
    ShuffleEnvironments,
    ShuffleMasters,
    load_shuffle_service,
)
from hybrid_shuffle.spark import SparkBridge
from hybrid_shuffle.spill_dirs import (
    check_spill_root,
    create_session_dir,
    new_session_id,
    remove_session_dir,
    sweep_stale_sessions,
)

if TYPE_CHECKING:
    from hybrid_shuffle.runtime.cache_catalog import CacheCatalog, CacheInfo

__all__ = ["Cluster"]

log = logging.getLogger("hybrid_shuffle.session")

_START_TIMEOUT = 120.0
#: the driver reads result partitions with at least this many buffers in flight
_READER_CREDITS = 8


class Cluster:
    """Ray, the shuffle service, the executor slots and Spark of one session; see the
    module docstring."""

    def __init__(
        self,
        config: Config,
        *,
        address: str | None = None,
        slots: int | None = None,
        spark: Any = None,
        start_spark: bool = False,
    ) -> None:
        self.config = config
        self.session_id = new_session_id()
        self._closed = False
        self._owns_ray = False
        self._spill_dir: str | None = None
        self._cache_catalog: CacheCatalog | None = None
        self.transport = RayTransport()
        configure_engine_logging(self.config.log_level)
        #: set once Ray is up (or the start failed): a background Spark start waits for it
        self._ray_up = threading.Event()
        self.bridge = SparkBridge(
            self.config.spark,
            self.session_id,
            spark,
            self.config.log_level,
            self.config.shuffle.wait_timeout,
        )
        try:
            if start_spark:
                self.bridge.start_in_background(self._ray_up)
            self._start(address, slots)
        except BaseException:
            self.close()
            raise
        log.info("session %s: %d %s", self.session_id, self.slots, plural(self.slots, "slot"))

    def _start(self, address: str | None, slots: int | None) -> None:
        shuffle = self.config.shuffle
        load_shuffle_service(shuffle.service)  # fails here, naming the key
        root = check_spill_root(shuffle.spill_dir)
        if not self.transport.is_connected():
            self.transport.preload_executor_class()  # while ray.init waits for Ray
            self.transport.connect(
                address,
                self.config.ray.num_cpus,
                self.config.ray.object_store_memory,
                self.config.log_level,
                self.config.ray.runtime_env,
            )
            self._owns_ray = True
        self._ray_up.set()
        # a Ray started before the session runs its job in its own environment: the
        # executors get ray.runtime_env themselves
        executor_env = None if self._owns_ray else self.config.ray.runtime_env
        sweep_stale_sessions(root, _owner_is_alive)
        self._spill_dir = create_session_dir(root, self.session_id, _owner())
        self.slots = slots or self.config.slots or max(self.transport.cluster_cpus(), 1)
        self.master = ShuffleMasters(
            ShuffleMasterContext(
                self.session_id,
                shuffle.wait_timeout,
                self._environment(-1, shuffle.memory_budget, shuffle.credits),
            ),
            shuffle.service,
        )
        self.tracker = PartitionTracker(self.master)
        share = shuffle.executor_budget(self.slots)
        self.pool = SlotPool(
            self.transport,
            self.session_id,
            self.slots,
            lambda i: ExecutorSpec(
                shuffle.service, self._environment(i, share, shuffle.credits), executor_env
            ),
            _START_TIMEOUT,
        )
        self.pool.start()
        self.reader = ShuffleEnvironments(
            self._environment(-1, shuffle.buffer_size, max(shuffle.credits, _READER_CREDITS)),
            shuffle.service,
        )

    def _environment(self, index: int, memory: int, credits: int) -> ShuffleEnvironmentContext:
        shuffle = self.config.shuffle
        return ShuffleEnvironmentContext(
            executor_index=index,
            session_id=self.session_id,
            buffer_size=shuffle.buffer_size,
            credits=credits,
            wait_timeout=shuffle.wait_timeout,
            memory_budget=memory,
            spill_dir=self.spill_dir,
            checksums=shuffle.checksums,
        )

    # -- what the API reads ----------------------------------------------------------------

    @property
    def cache_catalog(self) -> CacheCatalog:
        """The session's caches (``Stream.cache``); made on first use, since its module
        imports the planner, which a session that runs no job never needs."""
        if self._cache_catalog is None:
            from hybrid_shuffle.runtime.cache_catalog import CacheCatalog

            self._cache_catalog = CacheCatalog(self.session_id, self.tracker)
        return self._cache_catalog

    @property
    def spark(self) -> Any:
        """The session's Spark: the one passed in, or one started now by ``spark.backend``."""
        self.check_open()
        return self.bridge.session

    def start_spark(self, wait: bool = True) -> None:
        """Start Spark now rather than on first use of ``spark``; ``wait=False`` starts it
        in a background thread (``SparkBridge.start_in_background``)."""
        self.check_open()
        if wait:
            self.bridge.session  # noqa: B018 -- started (or waited for) by reading it
        else:
            self.bridge.start_in_background(self._ray_up)

    def caches(self) -> list[CacheInfo]:
        """Every cache of the session (``Stream.cache``): name, state, rows, bytes (and
        what of them spilled), partitions, holders, hits and fills.  A cache whose
        holder died since is reported ``lost`` (the next read fills it again)."""
        self.check_open()
        self.heal()
        return self.cache_catalog.caches()

    @property
    def executors(self) -> list[Any]:
        return self.pool.executors

    @property
    def executor_info(self) -> list[dict[str, Any]]:
        """Per executor: the node it runs on and its process id."""
        return self.pool.info

    @property
    def spill_dir(self) -> str:
        """This session's private spill directory (removed on close)."""
        if self._spill_dir is None:
            return os.path.join(self.config.shuffle.spill_dir, self.session_id)
        return self._spill_dir

    @property
    def closed(self) -> bool:
        return self._closed

    def check_open(self) -> None:
        if self._closed:
            raise SessionClosedError(
                f"session {self.session_id} is closed; open a new hs.Session() and build the "
                "job in it"
            )

    # -- leak probes -----------------------------------------------------------------------

    def partitions_occupying_local_resources(self) -> dict[int, set[str]]:
        """Per executor, the partitions it still holds (after every job: only the caches')."""
        sets = self._ask_executors("partitions_occupying_local_resources")
        return {i: set(s) for i, s in enumerate(sets)}

    def owned_objects(self) -> dict[int, int]:
        """Per executor, how many object references it still holds (leak checks)."""
        return dict(enumerate(self._ask_executors("owned_objects")))

    def running_tasks(self) -> dict[int, int]:
        """Per executor, how many tasks run there now (0 once a job ended, cancelled
        tasks included)."""
        return dict(enumerate(self._ask_executors("running_tasks")))

    def executor_memory(self) -> dict[int, dict[str, int]]:
        """Per executor, its resident bytes and Arrow pool bytes (leak checks)."""
        return dict(enumerate(self._ask_executors("memory")))

    def stored_partitions(self) -> dict[str, set[str]]:
        """Per partition store (``shuffle.service: external``), the partitions it still
        holds (after every job: only the caches'; no entry without stores)."""
        return dict(zip(*self._ask_stores("partitions_occupying_local_resources"), strict=True))

    def stored_objects(self) -> dict[str, int]:
        """Per partition store, how many object references it still holds."""
        return dict(zip(*self._ask_stores("owned_objects"), strict=True))

    def _ask_stores(self, method: str) -> tuple[list[str], list[Any]]:
        self.check_open()
        wait = self.config.shuffle.wait_timeout
        self.master.wait_for_releases(wait)
        stores = self.master.stores()
        answers = self.transport.call_all([actor for _, actor in stores], method, wait)
        return [name for name, _ in stores], answers

    def _ask_executors(self, method: str) -> list[Any]:
        self.check_open()
        self.heal()
        wait = self.config.shuffle.wait_timeout
        self.master.wait_for_releases(wait)
        return self.transport.call_all(self.executors, method, wait)

    # -- failover --------------------------------------------------------------------------

    def heal(self) -> list[int]:
        """Replace every executor Ray reported dead (their partitions are lost with them);
        returns their indexes.  Jobs and the leak probes call it first, so one dead
        executor never breaks the session."""
        self.check_open()
        replaced = self.pool.heal()
        for index in replaced:
            log.warning("session %s: executor %d had died; replaced", self.session_id, index)
            self.tracker.executor_lost(index)
        return replaced

    # -- closing ---------------------------------------------------------------------------

    def close(self) -> None:
        """Stop what the cluster started; idempotent, and safe on a half-started one."""
        if self._closed:
            return
        self._closed = True
        wait = self.config.shuffle.wait_timeout
        self._ray_up.set()  # a background Spark start still waiting for Ray gives up
        try:
            self.bridge.stop()
            if self._cache_catalog is not None:  # the master's close releases the partitions
                self._cache_catalog.close()
            if hasattr(self, "master"):
                self.master.close()
            if hasattr(self, "reader"):
                self.reader.close()
        finally:
            if hasattr(self, "pool"):
                self.pool.close(min(wait, 30.0))
            if self._spill_dir is not None:
                remove_session_dir(self._spill_dir)
            if self._owns_ray:
                self.transport.shutdown()
        log.info("session %s: closed", self.session_id)


def _owner() -> str:
    """Who owns a spill directory: this host and driver process."""
    return f"{os.uname().nodename}:{os.getpid()}"


def _owner_is_alive(owner: str) -> bool:
    """Whether the session that wrote ``owner`` may still run: another host's is assumed
    alive (its directory is not ours to judge); on this host, its driver process must
    exist."""
    host, _, pid = owner.rpartition(":")
    if host != os.uname().nodename or not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True
