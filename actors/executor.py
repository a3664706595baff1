"""The executor actor: one slot that runs tasks and holds their result partitions.

It is Flink's TaskExecutor with one slot, rebuilt as a threaded Ray actor: a
thread per running task (slot sharing runs one subtask of each vertex of a
region in the slot at once) while other threads serve consumers' polls of the
partitions this actor owns (``max_concurrency``).  Because the actor
``ray.put``s its buffers, it owns them; they live as long as it does
(docs/architecture.md, "Who owns what").

``run_task`` returns a ``TaskReport`` whatever happens inside the task (a
failure is described in it), so a failed or cancelled job leaves no Ray error
objects behind.

Cancellation is per task attempt (a region restart cancels the old attempts of
its tasks) and per job (a job that failed for good); a cancel that arrives before
its task started is remembered, so the task starts cancelled.  ``watch`` is the
driver's death notification: the call stays open until the executor closes, so
its ObjectRef fails the moment Ray reports the actor dead (killed, its process
exited, its node lost), without any heartbeat or timeout.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import ray

from hybrid_shuffle.actor_process import ProcessProbes, freeze_imported_objects
from hybrid_shuffle.actors.idle_trim import IdleTrim
from hybrid_shuffle.errors import summary
from hybrid_shuffle.operators.duck.database import DatabasePool
from hybrid_shuffle.runtime.slot_pool import ExecutorSpec
from hybrid_shuffle.runtime.task import TaskDeployment, TaskReport, attempt_key, run_task
from hybrid_shuffle.shuffle.api import PartitionId, PollRequest, PollResponse
from hybrid_shuffle.shuffle.service import ShuffleEnvironments

__all__ = ["MAX_CONCURRENCY", "Executor"]

#: threads per executor: tasks, the driver's watch, and polls held open by consumers
#: (up to 1 s each)
MAX_CONCURRENCY = 64
#: cancel flags kept: a session runs its jobs one after another, older flags are dead
_REMEMBERED_JOBS = 64
#: cancelled attempts remembered, for a cancel that overtakes its task's start
_REMEMBERED_ATTEMPTS = 4096
#: what tasks import on first use (``_import_task_modules``)
_TASK_IMPORTS = (
    "pandas",
    "pyarrow.compute",
    "pyarrow.dataset",
    "pyarrow.parquet",
    "duckdb",
    "hybrid_shuffle.operators.sql",
)


def _import_task_modules(then: Callable[[], None]) -> None:
    """Import what tasks import on first use, in the background as the executor starts,
    then call ``then``.

    pyarrow imports pandas the first time it converts a NumPy array or a Python object
    (``pa.array``; the partitioner does on every batch), and that import alone is more
    than half a second. Each executor process paid it, with ``pyarrow.dataset``'s, in
    the first task it ran, so the session's first query waited about 1.5 s longer than
    its next runs. TPC-DS q32 at SF1, as a session's first query: 1.87-2.09 s, and
    0.36-0.48 s with these imports done at start (its next runs 0.20-0.22 s;
    ``BENCHMARKS.md``). A task that needs a module still being imported waits for that
    import, and never imports it twice."""
    for name in _TASK_IMPORTS:
        with contextlib.suppress(ImportError):  # an optional part not installed
            importlib.import_module(name)
    then()


class Executor(ProcessProbes):
    def __init__(self, spec: ExecutorSpec) -> None:
        self.index = spec.context.executor_index
        #: where tasks' operators spill (a directory per task attempt, removed as it ends)
        self.spill_dir = os.path.join(spec.context.spill_dir, f"executor-{self.index}")
        self.env = ShuffleEnvironments(spec.context, spec.service)
        #: the DuckDB databases of finished tasks, for the next ones (opening one costs
        #: more than a small task's run)
        self.databases = DatabasePool()
        #: job id -> its cancel flag, for the most recent jobs only (no per-job cleanup call)
        self._cancelled: OrderedDict[str, threading.Event] = OrderedDict()
        #: attempt key -> the cancel flag of that running attempt
        self._attempts: dict[str, threading.Event] = {}
        #: attempts cancelled before they started (a dict as an ordered set)
        self._cancelled_attempts: OrderedDict[str, None] = OrderedDict()
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._running = 0
        #: gives glibc's free pages back once no task has run for a moment
        self._idle_trim = IdleTrim()
        #: whether a task has started here (the imports' freeze comes before, or not at all)
        self._started = False
        freeze_imported_objects()  # Ray's and the engine's; the tasks' modules follow
        threading.Thread(
            target=_import_task_modules,
            args=(self._freeze_unless_started,),
            name="task-imports",
            daemon=True,
        ).start()

    def _freeze_unless_started(self) -> None:
        """Freeze what the task modules' imports made, unless a task already started
        (its objects would be frozen with them; the executor then keeps its first
        freeze only)."""
        with self._lock:
            if not self._started:
                freeze_imported_objects()

    def _cancel_event(self, job_id: str) -> threading.Event:
        with self._lock:
            event = self._cancelled.setdefault(job_id, threading.Event())
            self._cancelled.move_to_end(job_id)
            while len(self._cancelled) > _REMEMBERED_JOBS:
                self._cancelled.popitem(last=False)
            return event

    def run_task(self, deployment: TaskDeployment) -> TaskReport:
        job = self._cancel_event(deployment.job_id)
        key = attempt_key(deployment.job_id, deployment.name, deployment.attempt)
        cancelled = threading.Event()
        with self._lock:
            self._started = True
            self._running += 1
            self._attempts[key] = cancelled
            self._idle_trim.busy()
            if job.is_set() or key in self._cancelled_attempts:
                cancelled.set()
        try:
            return run_task(
                deployment,
                self.env,
                cancelled,
                self.index,
                _fetch,
                self.spill_dir,
                self.databases,
            )
        finally:
            with self._lock:
                self._running -= 1
                del self._attempts[key]
                if self._running == 0:
                    # glibc's malloc (NumPy's arrays) keeps its free pages for the next
                    # task, and gives them back once the executor idles (``actors.idle_trim``)
                    self._idle_trim.idle()
            # Arrow's allocator (mimalloc) keeps the pages a thread freed in that thread's
            # heap: only the thread that ran the task can hand them back to the OS.  Without
            # this an executor keeps the high-water mark of its largest task for the session.
            pa.default_memory_pool().release_unused()

    def poll_many(self, requests: list[PollRequest], wait_seconds: float) -> list[PollResponse]:
        """All the channels one consumer task reads from this executor, in one call."""
        return self.env.poll_many(requests, wait_seconds)

    def cancel_job(self, job_id: str) -> None:
        self._cancel_event(job_id).set()
        with self._lock:
            for key, event in self._attempts.items():
                if key.startswith(f"{job_id}/"):
                    event.set()

    def cancel_attempts(self, keys: list[str]) -> None:
        """Stop these task attempts (``attempt_key``), running or not yet started."""
        with self._lock:
            for key in keys:
                event = self._attempts.get(key)
                if event is not None:
                    event.set()
                self._cancelled_attempts[key] = None
            while len(self._cancelled_attempts) > _REMEMBERED_ATTEMPTS:
                self._cancelled_attempts.popitem(last=False)

    def watch(self) -> None:
        """Returns only when the executor closes: the driver's death notification."""
        self._closing.wait()

    def release_partitions(self, partition_ids: list[PartitionId]) -> None:
        self.env.release_partitions_locally(partition_ids)

    def python_loads(self, commands: list[bytes]) -> str | None:
        """Whether this executor's Python can load the pickled functions of a Spark plan
        (what its tasks will do): ``None``, or the first one's error, one line."""
        import pickle

        for command in commands:
            try:
                pickle.loads(command)
            except Exception as e:
                return f"{type(e).__name__}: {summary(e)}"
        return None

    def imported(self, names: list[str]) -> list[str]:
        """Which of the modules ``names`` this process has imported (a phase probe: the
        task imports done as the executor started)."""
        return [name for name in names if name in sys.modules]

    def running_tasks(self) -> int:
        """Tasks running here now (a phase probe: a cancelled job's tasks have ended)."""
        with self._lock:
            return self._running

    def partitions_occupying_local_resources(self) -> set[PartitionId]:
        self.databases.settle()  # finished tasks' databases handed back, directories gone
        return self.env.partitions_occupying_local_resources()

    def owned_objects(self) -> int:
        """ObjectRefs this process still holds, once finished tasks' databases were handed
        back (a cursor's registered input may be what holds one)."""
        self.databases.settle()
        return super().owned_objects()

    def memory(self) -> dict[str, int]:
        """This process's private resident bytes (resident minus pages shared with the
        object store) and the bytes Arrow's pool holds (leak checks), once finished
        tasks' databases were handed back and, with no task running, glibc's free pages
        too (what an idle executor gives back a moment later: ``actors.idle_trim``)."""
        self.databases.settle()
        self._idle_trim.now()
        with open(f"/proc/{os.getpid()}/statm") as f:
            fields = f.read().split()
        page = os.sysconf("SC_PAGE_SIZE")
        return {
            "private": (int(fields[1]) - int(fields[2])) * page,
            "arrow_pool": pa.total_allocated_bytes(),
        }

    def close(self) -> None:
        self._closing.set()
        self._idle_trim.close()
        self.env.close()
        self.databases.close()


def _fetch(ref: Any, timeout: float) -> pa.Table:
    table: pa.Table = ray.get(ref, timeout=timeout)
    return table
