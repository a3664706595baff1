"""``PlanningSession``: build and plan a job without Ray or Spark; nothing ever runs.

Why: ``hybrid-shuffle explain`` and ``validate --pipeline`` (and ``run``'s check before
it starts anything) need a job's plan -- its edges, modes, partitions, regions, and
the config's ``edges:`` / ``vertices:`` names checked against them -- and a plan
needs only the config and a slot count.  Opening an ``hs.Session`` for it started
Ray (and the pipeline file Spark) and took half a minute.

Contract: a ``PlanningSession`` stands in for ``hs.Session`` wherever a job is built
and planned: ``job(name)``; the sources a plan can know without their data
(``from_schema``, the stand-in for a declared input; ``from_arrow`` of tables in hand;
``from_parquet``, which reads only footers); every ``Stream`` operator and exchange;
``explain()``, ``explain_data()`` and ``Job.plan()``.  Whatever would run a job or
start something -- ``collect`` and every other way to run one, ``session.spark``,
``from_spark``, ``from_ray_data``, ``from_dataframe``, ``sql``, ``cache`` -- raises
``PlanningOnlyError``: one sentence saying that this session only plans and where
such a call belongs (a pipeline file's ``sources(job)``, which only ``run`` calls).

Nothing is mocked: no Ray is started, so a table given to ``from_arrow`` is kept as
it is instead of being put in an object store (nothing reads it), and the check
that a user function can be pickled (``map_batches``, ``filter``) imports Ray's
cloudpickle, which does not start Ray.  ``slots`` is what an embedded session on
this machine would have: config ``slots``, else ``ray.num_cpus``, else this
machine's CPUs.  Also useful in a user's own tests of a build function::

    session = PlanningSession("configs/job.yaml")
    job = session.job("revenue")
    print(build(session, job.from_schema(ORDERS, name="orders")).explain())
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NoReturn, cast

import pyarrow as pa

from hybrid_shuffle.api.job import Job
from hybrid_shuffle.config import Config, check_slots, load_config
from hybrid_shuffle.errors import PlanError
from hybrid_shuffle.spill_dirs import new_session_id

if TYPE_CHECKING:
    from hybrid_shuffle.api.stream import Stream
    from hybrid_shuffle.result import JobResult
    from hybrid_shuffle.runtime.cluster import Cluster
    from hybrid_shuffle.runtime.progress import JobProgress

__all__ = ["PlanningJob", "PlanningOnlyError", "PlanningSession", "PlanningTransport"]

#: why a call is refused and where it belongs: a call that needs data or a cluster
_STARTS = (
    "a planning session (explain, validate, run's check before start-up) starts no Ray or "
    "Spark; make real inputs in the pipeline file's sources(job), which only run calls"
)
#: ... and a call that runs the job
_RUNS = (
    "a planning session (explain, validate, run's check before start-up) runs nothing; "
    "return the stream from build() and let 'hybrid-shuffle run' run it"
)


class PlanningOnlyError(PlanError):
    """A call that would run a job or start Ray or Spark, made in a ``PlanningSession``
    (``hybrid-shuffle explain``, ``validate``, ``run``'s check before start-up); the
    message names the call."""

    def __init__(self, what: str, why: str = "") -> None:
        super().__init__(f"{what}: {why}" if why else what)
        #: the refused call, as the message names it ("session.spark")
        self.what = what


def _refuse(what: str, why: str = _STARTS) -> NoReturn:
    raise PlanningOnlyError(what, why)


class PlanningTransport:
    """The part of ``RayTransport`` that building a job calls, without a cluster."""

    @staticmethod
    def put(table: pa.Table) -> pa.Table:
        """The table itself, as the split's "reference": nothing runs, so nothing reads it."""
        return table

    @staticmethod
    def is_object_ref(value: Any) -> bool:
        """A Ray ObjectRef (only if Ray is imported: one cannot exist otherwise)."""
        ray = sys.modules.get("ray")
        return ray is not None and isinstance(value, ray.ObjectRef)

    @staticmethod
    def ship_by_value(module: types.ModuleType) -> None:
        """As a run would: so that ``why_unpicklable`` checks what a run would send."""
        from hybrid_shuffle.runtime.transport import RayTransport

        RayTransport.ship_by_value(module)

    @staticmethod
    def why_unpicklable(obj: Any) -> str | None:
        """None if a run could send ``obj`` to the executors, else why not (one phrase)."""
        from hybrid_shuffle.runtime.transport import RayTransport

        return RayTransport.why_unpicklable(obj)


class PlanningJob(Job):
    """A ``Job`` of a ``PlanningSession``: built and planned as any job; never run."""

    def run(
        self,
        stream: Stream,
        timeout: float | None = None,
        *,
        collect: bool = True,
        blocks: bool = False,
        progress: bool | JobProgress = False,
    ) -> JobResult:
        _refuse(f"running job '{self.name}' (collect, to_arrow, write_parquet, ...)", _RUNS)

    def from_spark(self, df: Any, name: str = "spark", parallelism: int | None = None) -> Stream:
        _refuse(f"from_spark '{name}'")

    def from_ray_data(
        self, ds: Any, name: str = "ray_data", parallelism: int | None = None
    ) -> Stream:
        _refuse(f"from_ray_data '{name}'")


class PlanningSession:
    """Stands in for ``hs.Session`` while a job is built and planned; see the module
    docstring for what it supports and what it refuses."""

    def __init__(
        self,
        config: str | os.PathLike[str] | Mapping[str, Any] | Config | None = None,
        *,
        slots: int | None = None,
    ) -> None:
        self.config = load_config(config)
        check_slots(slots)
        self.session_id = new_session_id()
        self.slots: int = (
            slots or self.config.slots or self.config.ray.num_cpus or os.cpu_count() or 1
        )
        self.transport = PlanningTransport()
        self._closed = False

    def job(self, name: str) -> Job:
        """A job to build and plan (a ``PlanningJob``: running it is refused)."""
        self.check_open()
        # it stands in for the cluster too: the API reads only config, slots, session_id,
        # transport and check_open of it, and is refused the rest
        return PlanningJob(cast("Cluster", self), name, session=self)

    @property
    def closed(self) -> bool:
        return self._closed

    def check_open(self) -> None:
        """Nothing to check: there is nothing to close (kept for ``Job``'s calls)."""

    def close(self) -> None:
        """Nothing was started; only marks the session closed."""
        self._closed = True

    def __enter__(self) -> PlanningSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- refused: what would start Spark or Ray, or run ------------------------------------

    @property
    def spark(self) -> Any:
        _refuse("session.spark")

    @property
    def bridge(self) -> Any:
        _refuse("Spark (session.bridge)")

    def sql(self, query: str, name: str | None = None, fallback: str = "spark") -> Stream:
        _refuse("session.sql")

    def from_dataframe(self, df: Any, name: str | None = None, fallback: str = "spark") -> Stream:
        _refuse("session.from_dataframe")

    @property
    def cache_catalog(self) -> Any:
        _refuse("cache()")

    def caches(self) -> list[Any]:
        _refuse("session.caches()")

    def heal(self) -> list[int]:
        _refuse("running a job", _RUNS)

    def __getattr__(self, name: str) -> Any:
        """Any other ``Session`` attribute (executors, leak probes, ...): refused alike."""
        if name.startswith("_"):  # copy, pickle and friends probe these: a plain miss
            raise AttributeError(name)
        _refuse(f"session.{name}")
