"""The session: what a user opens, builds jobs in and closes; a facade over its cluster.

``Session()`` loads the config and starts a ``runtime.cluster.Cluster``: Ray (an
embedded local one unless Ray is already initialised in this process or ``address=``
names a cluster to join), the shuffle master and partition tracker, a private spill
directory, ``slots`` executor actors, and Spark on first use (``spark.backend``, or
the session passed as ``spark=``).  ``start_spark=True`` starts Spark in a background
thread as the session opens, so that its start overlaps Ray's and the caller's own
work (``session.spark`` waits for it); ``start_spark(wait=False)`` does the same later.
The cluster module says what each costs and what ``close()`` stops.

Jobs are made here (``job``, and ``sql`` / ``from_dataframe`` for Spark's plans) and
given the cluster to run on: the API below never reaches back into this module.  Every
other attribute (``executors``, ``heal``, ``check_open``, ``spill_dir``, ``pool``,
``master``, ``tracker``, the leak probes, ...) is the cluster's, read through.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hybrid_shuffle.config import Config, check_slots, load_config
from hybrid_shuffle.errors import HybridShuffleError, PlanError, summary
from hybrid_shuffle.runtime.cluster import Cluster

if TYPE_CHECKING:
    from hybrid_shuffle.api.job import Job
    from hybrid_shuffle.api.stream import Stream
    from hybrid_shuffle.runtime.cache_catalog import CacheCatalog, CacheInfo
    from hybrid_shuffle.runtime.partition_tracker import PartitionTracker
    from hybrid_shuffle.runtime.slot_pool import SlotPool
    from hybrid_shuffle.runtime.transport import RayTransport
    from hybrid_shuffle.shuffle.service import ShuffleEnvironments, ShuffleMasters
    from hybrid_shuffle.spark import SparkBridge

__all__ = ["Session"]


class Session:
    def __init__(
        self,
        config: str | os.PathLike[str] | Mapping[str, Any] | Config | None = None,
        *,
        address: str | None = None,
        slots: int | None = None,
        spark: Any = None,
        start_spark: bool = False,
    ) -> None:
        loaded = load_config(config)
        check_slots(slots)
        #: Ray, the shuffle service, the executors and Spark: what jobs run on
        self.cluster = Cluster(
            loaded, address=address, slots=slots, spark=spark, start_spark=start_spark
        )

    # -- what users call -------------------------------------------------------------------

    def job(self, name: str) -> Job:
        from hybrid_shuffle.api.job import Job

        self.check_open()
        return Job(self.cluster, name, session=self)

    def sql(self, query: str, name: str | None = None, fallback: str = "spark") -> Stream:
        """Run a Spark SQL query in the engine: the session's Spark parses, analyses and
        optimizes it (against its temp views and catalog), and its physical plan runs
        here, each Spark exchange an edge named ``exchange_<id>`` after the id
        ``explain(mode="formatted")`` prints.  See ``from_dataframe``; a query Spark
        rejects is a ``PlanError`` carrying Spark's message."""
        from hybrid_shuffle.sparkplan.physical import spark_error

        self.check_open()
        if not isinstance(query, str) or not query.strip():
            raise PlanError(
                f"sql: the query must be a non-empty string of Spark SQL, got {query!r}"
            )
        spark = self.spark
        started = time.perf_counter()  # for JobResult.profile(): Spark's share
        try:
            df = spark.sql(query)
        except Exception as e:
            message = spark_error(e)
            if message is None:  # not a rejection Spark names: still one sentence
                raise PlanError(f"Spark cannot run the query: {summary(e)}") from e
            raise PlanError(f"Spark rejects the query: {message}") from None
        stream = self.from_dataframe(df, name, fallback)
        stream.job.spark_total_seconds = time.perf_counter() - started
        return stream

    def from_dataframe(self, df: Any, name: str | None = None, fallback: str = "spark") -> Stream:
        """Run a PySpark DataFrame's pipeline in the engine, as written: its physical plan
        (planned with adaptive execution off) is translated operator by operator
        (``hybrid_shuffle.sparkplan``) into an ordinary ``Stream``.

        Parquet scans are read by the executors; any other leaf comes in through
        ``from_spark``.  An operator the engine cannot run stays in Spark with its
        subtree (``fallback="spark"``, listed in ``explain_data()["spark_subtrees"]``),
        or raises ``UnsupportedPlanError`` (``fallback="error"``)."""
        from hybrid_shuffle.sparkplan.physical import physical_plan, spark_error
        from hybrid_shuffle.sparkplan.translate import FALLBACKS, Translator

        self.check_open()
        started = time.perf_counter()
        if fallback not in FALLBACKS:
            raise PlanError(
                f"fallback={fallback!r} is not a fallback; use 'spark' (run what the engine "
                "cannot in Spark) or 'error' (raise UnsupportedPlanError)"
            )
        if not hasattr(df, "_jdf"):
            raise PlanError(
                f"from_dataframe: expected a PySpark DataFrame, got {type(df).__name__}"
            )
        try:
            plan = physical_plan(df)
        except Exception as e:
            message = spark_error(e)
            if message is None:
                raise PlanError(f"Spark cannot plan the DataFrame: {summary(e)}") from e
            raise PlanError(f"Spark cannot plan the DataFrame: {message}") from None
        job = self.job(name or "sql")
        translator = Translator(job, plan, df.sparkSession, fallback)
        try:
            stream = translator.translate()
        except HybridShuffleError:
            raise
        except Exception as e:  # a failure of the translation itself, in one sentence
            raise PlanError(
                f"the Spark plan cannot be translated ({type(e).__name__}: {summary(e)})"
            ) from e
        job.spark_plan = translator.info
        job.spark_total_seconds = time.perf_counter() - started
        try:
            stream.spark_schema = df.schema
        except Exception:  # a type PySpark cannot parse (a calendar interval): none then
            stream.spark_schema = None
        return stream

    # -- the cluster's, read through ---------------------------------------------------------

    @property
    def config(self) -> Config:
        """The config jobs are planned and run with; set it to run the next jobs with
        another (the cluster already started keeps its slots and service)."""
        return self.cluster.config

    @config.setter
    def config(self, config: Config) -> None:
        self.cluster.config = config

    @property
    def session_id(self) -> str:
        return self.cluster.session_id

    @property
    def slots(self) -> int:
        return self.cluster.slots

    @property
    def transport(self) -> RayTransport:
        return self.cluster.transport

    @property
    def bridge(self) -> SparkBridge:
        return self.cluster.bridge

    @property
    def master(self) -> ShuffleMasters:
        return self.cluster.master

    @property
    def tracker(self) -> PartitionTracker:
        return self.cluster.tracker

    @property
    def pool(self) -> SlotPool:
        return self.cluster.pool

    @property
    def reader(self) -> ShuffleEnvironments:
        return self.cluster.reader

    @property
    def cache_catalog(self) -> CacheCatalog:
        """The session's caches (``Stream.cache``), made on first use."""
        return self.cluster.cache_catalog

    @property
    def spark(self) -> Any:
        """The session's Spark: the one passed in, or one started now by ``spark.backend``
        (or the background start's, waited for)."""
        if self.cluster.bridge.starting:
            _import_planning()
        return self.cluster.spark

    def start_spark(self, wait: bool = True) -> None:
        """Start the session's Spark now rather than on first use of ``session.spark``.

        ``wait=False`` starts it in a background thread and returns at once, so that
        what the caller does next (writing or listing its data, other Ray work) overlaps
        Spark's start-up (10 s and more for RayDP's three JVMs); the first use of
        ``session.spark`` waits for it and raises what the start raised.  Nothing is
        done for a Spark already started, starting, or passed as ``spark=``."""
        self.cluster.start_spark(wait)

    def caches(self) -> list[CacheInfo]:
        """Every cache of the session (``Stream.cache``): name, state, rows, bytes (and
        what of them spilled), partitions, holders, hits and fills.  A cache whose
        holder died since is reported ``lost`` (the next read fills it again)."""
        return self.cluster.caches()

    @property
    def executors(self) -> list[Any]:
        return self.cluster.executors

    @property
    def executor_info(self) -> list[dict[str, Any]]:
        """Per executor: the node it runs on and its process id."""
        return self.cluster.executor_info

    @property
    def spill_dir(self) -> str:
        """This session's private spill directory (removed on close)."""
        return self.cluster.spill_dir

    @property
    def closed(self) -> bool:
        return self.cluster.closed

    def check_open(self) -> None:
        """``SessionClosedError`` once the session is closed."""
        self.cluster.check_open()

    # -- leak probes -----------------------------------------------------------------------

    def partitions_occupying_local_resources(self) -> dict[int, set[str]]:
        """Per executor, the partitions it still holds (after every job: only the caches')."""
        return self.cluster.partitions_occupying_local_resources()

    def owned_objects(self) -> dict[int, int]:
        """Per executor, how many object references it still holds (leak checks)."""
        return self.cluster.owned_objects()

    def running_tasks(self) -> dict[int, int]:
        """Per executor, how many tasks run there now (0 once a job ended, cancelled
        tasks included)."""
        return self.cluster.running_tasks()

    def executor_memory(self) -> dict[int, dict[str, int]]:
        """Per executor, its resident bytes and Arrow pool bytes (leak checks)."""
        return self.cluster.executor_memory()

    def stored_partitions(self) -> dict[str, set[str]]:
        """Per partition store (``shuffle.service: external``), the partitions it still
        holds (after every job: only the caches'; no entry without stores)."""
        return self.cluster.stored_partitions()

    def stored_objects(self) -> dict[str, int]:
        """Per partition store, how many object references it still holds."""
        return self.cluster.stored_objects()

    # -- failover and closing --------------------------------------------------------------

    def heal(self) -> list[int]:
        """Replace every executor Ray reported dead (their partitions are lost with them);
        returns their indexes.  Jobs and the leak probes call it first, so one dead
        executor never breaks the session."""
        return self.cluster.heal()

    def close(self) -> None:
        """Stop what the session started; idempotent, and safe on a half-started session."""
        self.cluster.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _import_planning() -> None:
    """Import what the first ``from_dataframe`` or job imports (the plan translation, the
    job API and the planner, and DuckDB and pandas with them: most of a second): done
    while a background Spark start is still running, it costs no wall time."""
    import hybrid_shuffle.api.job
    import hybrid_shuffle.sparkplan.physical
    import hybrid_shuffle.sparkplan.translate  # noqa: F401
