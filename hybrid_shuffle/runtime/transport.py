"""The driver's Ray calls, all of them: the only runtime module that imports ``ray``.

``TaskTransport`` is what the scheduler needs (submit a task to an executor,
wait for reports, cancel a job); ``RayTransport`` implements it over Ray actor
calls and adds what the session and the slot pool need (start or join Ray,
create and kill executor actors, put source tables).  The scheduler's tests
replace only ``TaskTransport``; everything else stays real.

Every call here is bounded by a timeout, and Ray's own errors are translated
into the library's at this boundary (``ExecutorLostError`` for a dead actor,
``WaitTimeoutError`` for a wait that ran out).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import socket
import threading
import types
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

import pyarrow as pa
import ray
from ray.exceptions import GetTimeoutError

from hybrid_shuffle.actor_process import ACTOR_GONE, NAMESPACE, start_pinned
from hybrid_shuffle.errors import ConfigError, ExecutorLostError, WaitTimeoutError, summary
from hybrid_shuffle.quiet import quiet_ray_init, ray_init_options
from hybrid_shuffle.runtime.slot_pool import ExecutorSpec

if TYPE_CHECKING:  # the task module imports every operator: not needed to start a session
    from hybrid_shuffle.runtime.task import TaskDeployment, TaskReport

__all__ = ["NAMESPACE", "ExecutorHandle", "RayTransport", "TaskRef", "TaskTransport"]


#: a Ray actor handle of ``actors.executor.Executor`` (Ray's handles are untyped)
ExecutorHandle = Any
#: the ObjectRef of a submitted task's ``TaskReport``
TaskRef = Any


class TaskTransport(Protocol):
    """What the scheduler sends and receives; see the module docstring."""

    def submit(self, executor: ExecutorHandle, deployment: TaskDeployment) -> TaskRef:
        """Start ``deployment`` on ``executor``; returns a handle to its report."""

    def wait(self, refs: Sequence[TaskRef], timeout: float) -> list[TaskRef]:
        """The refs whose report is ready now or within ``timeout`` seconds (maybe none)."""

    def report(self, ref: TaskRef, timeout: float, executor: int, task: str) -> TaskReport:
        """The report of a ready task; ``ExecutorLostError`` if its executor died."""

    def cancel_job(self, executors: Sequence[ExecutorHandle], job_id: str) -> None:
        """Ask every executor to stop the job's tasks (fire and forget)."""

    def cancel_attempts(self, executor: ExecutorHandle, keys: Sequence[str]) -> None:
        """Ask ``executor`` to stop these task attempts (``attempt_key``; fire and forget)."""

    def put(self, table: pa.Table) -> Any:
        """Put ``table`` in the object store, owned by the driver (a small result buffer
        that came inline, for a caller that needs refs: ``Stream.to_ray_data``)."""


#: Ray's settings for an embedded Ray the session starts.  Ray prestarts one Python
#: worker per CPU for the first driver, for the tasks it expects; the session's first
#: work is its executor actors, created at once, and Ray starts their processes before
#: the prestarted ones register, so those stay idle for the whole session: a process
#: each (half a CPU-second to start on this machine, and about 1% of a core while idle)
#: that nothing uses, on a 2-core laptop in the same seconds Spark's JVMs start.  Other
#: Python work (a Ray Data task, RayDP's master) starts a worker when it needs one.
#: ``./dev main`` warm: 15.9 s against 17.7 s with them (BENCHMARKS.md, issue 37 item 7).
EMBEDDED_RAY_SYSTEM_CONFIG: Mapping[str, Any] = {"prestart_worker_first_driver": False}

#: seconds to open a TCP connection to a cluster's address before giving up on it
_CONNECT_TIMEOUT = 10.0


def _check_reachable(address: str) -> None:
    """Fail within seconds if nothing listens at ``host:port`` (``ray.init`` itself
    retries an unreachable GCS for many minutes).  ``auto`` and ``ray://`` client
    addresses are left to Ray."""
    if address == "auto" or "://" in address:
        return
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(
            f"address: '{address}' is not host:port; pass the head node's GCS address, "
            "like 10.0.0.5:6379"
        )
    try:
        socket.create_connection((host, int(port)), timeout=_CONNECT_TIMEOUT).close()
    except OSError as e:
        raise ConfigError(
            f"address: cannot reach a Ray cluster at {address} ({e.strerror or e}); start "
            "it with 'ray start --head' there, or drop address= for an embedded Ray"
        ) from None


class RayTransport:
    """``TaskTransport`` over Ray, plus the cluster calls of the session and slot pool."""

    # -- the cluster -----------------------------------------------------------------------

    @staticmethod
    def is_connected() -> bool:
        return bool(ray.is_initialized())

    @staticmethod
    def connect(
        address: str | None,
        num_cpus: int | None,
        object_store: int | None,
        log_level: str | None = None,
        runtime_env: Mapping[str, Any] | None = None,
    ) -> None:
        """Start an embedded Ray (``address`` None) or join the cluster at ``address``,
        as chatty as ``log_level`` asks (``hybrid_shuffle.quiet``), every process of the
        job in ``runtime_env`` (``ray.runtime_env``).

        With no ``address``, ``RAY_ADDRESS`` is read as Ray reads it (``ray job submit``
        sets it: the job joins its cluster), except ``local``; a Ray that another process
        started on this machine without that variable is never joined by chance."""
        if address is None and os.environ.get("RAY_ADDRESS", "local") != "local":
            address = os.environ["RAY_ADDRESS"]
        kwargs: dict[str, Any] = {
            "namespace": NAMESPACE,
            "include_dashboard": False,
            "configure_logging": True,
            **ray_init_options(log_level),
        }
        if runtime_env:
            quiet = kwargs.get("runtime_env", {})
            kwargs["runtime_env"] = {**quiet, **runtime_env}  # the user's hook wins
        if address is None:
            # "local": a Ray of our own even when another process on the machine runs one
            # (with no address, ray.init joins the newest Ray it finds running here, then
            # refuses num_cpus)
            kwargs["address"] = "local"
            kwargs["num_cpus"] = num_cpus or os.cpu_count() or 1
            if object_store is not None:
                kwargs["object_store_memory"] = object_store
            kwargs["_system_config"] = dict(EMBEDDED_RAY_SYSTEM_CONFIG)
        else:
            _check_reachable(address)
            kwargs["address"] = address
        try:
            with quiet_ray_init(log_level):
                ray.init(**kwargs)
        except (ConnectionError, ValueError, RuntimeError, TimeoutError) as e:
            if address is None:
                raise ConfigError(
                    f"address: cannot start an embedded Ray ({summary(e)}); set "
                    "ray.num_cpus and ray.object_store_memory to what this machine has, or "
                    "pass address= to join a running cluster"
                ) from e
            # a cluster that refuses this driver's token looks the same from here (Ray
            # prints "InvalidAuthToken" on stderr, then raises that it cannot connect)
            raise ConfigError(
                f"address: cannot join the Ray cluster at {address} ({summary(e)}); check "
                "that it runs ('ray start --head' there) and, if it uses token "
                "authentication, that this driver has its token (RAY_AUTH_MODE=token and "
                "RAY_AUTH_TOKEN, or ~/.ray/auth_token: docs/guide/cluster.md, section 6)"
            ) from e

    @staticmethod
    def shutdown() -> None:
        ray.shutdown()

    @staticmethod
    def cluster_cpus() -> int:
        resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
        return int(resources.get("CPU", 1))

    @staticmethod
    def worker_nodes() -> list[str]:
        """Alive nodes with CPUs, sorted (the head of a cluster started with 0 CPUs
        hosts no slot)."""
        alive = [n for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]
        with_cpus = [n for n in alive if n.get("Resources", {}).get("CPU", 0) > 0] or alive
        return sorted(str(n["NodeID"]) for n in with_cpus)

    # -- executors -------------------------------------------------------------------------

    @staticmethod
    def preload_executor_class() -> None:
        """Import the executor actor's module in a thread, now: it imports every operator
        (pandas and DuckDB with them, about half a second), and a session calls this
        before ``connect``, whose ``ray.init`` mostly waits for Ray's processes, so the
        module is ready when the pool creates the actors (Python's import lock makes the
        pool's own import wait for this one, never run it twice)."""
        threading.Thread(
            target=importlib.import_module,
            args=("hybrid_shuffle.actors.executor",),
            name="hybrid-shuffle-preload",
            daemon=True,
        ).start()

    @staticmethod
    def create_executor(spec: ExecutorSpec, name: str, node_id: str) -> ExecutorHandle:
        """An executor actor pinned to ``node_id`` (hard affinity: the spread holds).

        The actor's module is imported here, not with this one: it imports every
        operator (pandas and DuckDB with them), which a driver needs only once it
        plans a job."""
        from hybrid_shuffle.actors.executor import MAX_CONCURRENCY, Executor

        return start_pinned(
            Executor, name, node_id, MAX_CONCURRENCY, spec, runtime_env=spec.runtime_env
        )

    @staticmethod
    def call_all(
        executors: Sequence[ExecutorHandle], method: str, timeout: float, *args: Any
    ) -> list[Any]:
        """``method(*args)`` on every executor, in order; bounded by ``timeout``."""
        refs = [getattr(e, method).remote(*args) for e in executors]
        try:
            return list(ray.get(refs, timeout=timeout))
        except GetTimeoutError as e:
            raise WaitTimeoutError(
                f"executors did not answer '{method}' within {timeout:.0f} s; the cluster "
                "is overloaded, so raise shuffle.wait_timeout"
            ) from e
        except ACTOR_GONE as e:
            raise ExecutorLostError(
                f"an executor died while answering '{method}'; its partitions are lost"
            ) from e

    @staticmethod
    def answers(refs: Sequence[Any], timeout: float) -> list[Any]:
        """Each ref's value, waiting at most ``timeout`` for them all; None for an actor
        that died (killed, its node lost: the pool replaces it), ``ExecutorLostError``
        for one whose constructor raised, since its replacement would raise the same."""
        if refs:
            _, pending = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
            if pending:
                raise WaitTimeoutError(
                    f"{len(pending)} of {len(refs)} actors did not answer within {timeout:.0f} s"
                )
        values: list[Any] = []
        for index, ref in enumerate(refs):
            try:
                values.append(ray.get(ref, timeout=timeout))
            except ACTOR_GONE as e:
                if not getattr(e, "actor_init_failed", False):
                    values.append(None)
                    continue
                raise ExecutorLostError(
                    f"executor {index} failed to start: {_last_line(e)}; fix what its "
                    "constructor raised (the whole traceback is in the error's cause)"
                ) from e
        return values

    @staticmethod
    def ask_all(executors: Sequence[ExecutorHandle], method: str, timeout: float) -> None:
        """``method()`` on every executor, waiting at most ``timeout`` and ignoring the
        dead (closing: what is gone needs no closing)."""
        refs = [getattr(e, method).remote() for e in executors]
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=timeout)

    @staticmethod
    def kill(executor: ExecutorHandle) -> None:
        with contextlib.suppress(Exception):  # already gone
            ray.kill(executor, no_restart=True)

    @staticmethod
    def watch(executor: ExecutorHandle) -> Any:
        return executor.watch.remote()

    @staticmethod
    def request(executor: ExecutorHandle, method: str) -> Any:
        return getattr(executor, method).remote()

    @staticmethod
    def resolved(refs: Sequence[Any]) -> list[int]:
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0, fetch_local=False)
        done = set(ready)
        return [i for i, ref in enumerate(refs) if ref in done]

    # -- tasks (TaskTransport) -------------------------------------------------------------

    def submit(self, executor: ExecutorHandle, deployment: TaskDeployment) -> TaskRef:
        return executor.run_task.remote(deployment)

    def wait(self, refs: Sequence[TaskRef], timeout: float) -> list[TaskRef]:
        ready, _ = ray.wait(list(refs), num_returns=1, timeout=timeout)
        return list(ready)

    def report(self, ref: TaskRef, timeout: float, executor: int, task: str) -> TaskReport:
        try:
            report = cast("TaskReport", ray.get(ref, timeout=timeout))
        except ACTOR_GONE as e:
            raise ExecutorLostError(
                f"executor {executor} died while running task '{task}' "
                f"({summary(e)}); the partitions it held are lost with it"
            ) from e
        except GetTimeoutError as e:
            raise WaitTimeoutError(
                f"task '{task}' did not report within {timeout:.0f} s after it was ready"
            ) from e
        return report

    def cancel_job(self, executors: Sequence[ExecutorHandle], job_id: str) -> None:
        for executor in executors:
            executor.cancel_job.remote(job_id)

    def cancel_attempts(self, executor: ExecutorHandle, keys: Sequence[str]) -> None:
        executor.cancel_attempts.remote(list(keys))

    # -- data ------------------------------------------------------------------------------

    @staticmethod
    def put(table: pa.Table) -> Any:
        """Put a source table; the driver owns it (for the job's life)."""
        return ray.put(table)

    @staticmethod
    def is_object_ref(value: Any) -> bool:
        return isinstance(value, ray.ObjectRef)

    # -- user functions --------------------------------------------------------------------

    @staticmethod
    def ship_by_value(module: types.ModuleType) -> None:
        """Pickle ``module``'s functions by value (executors cannot import it)."""
        ray.cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]

    @staticmethod
    def why_unpicklable(obj: Any) -> str | None:
        """None if Ray can pickle ``obj``, else what in it cannot be (one phrase)."""
        try:
            ray.cloudpickle.dumps(obj)  # type: ignore[no-untyped-call]
        except Exception as e:
            error = summary(e)
        else:
            return None
        from ray.util import inspect_serializability

        try:
            _, failures = inspect_serializability(obj, print_file=io.StringIO())
        except Exception:  # the inspection itself failed: the error alone must do
            failures = set()
        names = sorted({f"'{'.'.join(f.path)}' ({type(f.obj).__name__})" for f in failures})
        held = f"it holds {', '.join(names[:3])}: " if names else ""
        return f"{held}{error}"


def _last_line(error: BaseException) -> str:
    """The last line of ``error``'s message: for an actor whose constructor raised, Ray's
    message ends with that exception (``ValueError: ...``) after its traceback."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__
