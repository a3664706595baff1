"""What a running job tells an observer, and the counting behind a progress display.

The scheduler is the one place that learns, as it happens, that a task ended:
through the task's report (rows out, the bytes its partitions took, what they
and its operators spilled).  ``JobProgress`` is the small interface it calls;
``ProgressCounts`` turns those calls into one figure set per vertex, which a
display (``hybrid_shuffle.progress.ProgressBars``) reads.

The contract of the calls, in order, for one run of a job:

- ``started(plan)`` once, before any task deploys (again if ``Job.run`` runs the
  job anew, after a lost cache was filled: the counts start over);
- ``parallelism_decided(vertex, subtasks)`` when an adaptive vertex
  (``partitions: auto``) gets its subtask count; until then its total is unknown;
- ``task_finished(report)`` for each successful attempt of a task;
- ``task_restarted(vertex, subtask)`` when failover runs a task again, finished or
  not: what a finished attempt counted is taken back, so that a bar counts the
  successful attempts of the run that produces the result, never one task twice;
- ``finished()`` or ``failed(error)`` once, at the end (``Job.run`` calls them).

An observer must not hold on to a report (its figures are copied) and must never
fail or block the job: ``guarded`` wraps one so that its first exception turns
it off, with a warning, instead of failing the run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from hybrid_shuffle.plan.planner import Plan
from hybrid_shuffle.runtime.task import TaskReport

__all__ = [
    "JobProgress",
    "NoProgress",
    "ProgressCounts",
    "VertexProgress",
    "guarded",
]

log = logging.getLogger(__name__)


@runtime_checkable
class JobProgress(Protocol):
    """Told what a job's tasks do while it runs; see the module docstring for the order."""

    def started(self, plan: Plan) -> None: ...

    def parallelism_decided(self, vertex: str, subtasks: int) -> None: ...

    def task_finished(self, report: TaskReport) -> None: ...

    def task_restarted(self, vertex: str, subtask: int) -> None: ...

    def finished(self) -> None: ...

    def failed(self, error: BaseException) -> None: ...


class NoProgress:
    """The observer of a run nobody watches."""

    def started(self, plan: Plan) -> None:
        pass

    def parallelism_decided(self, vertex: str, subtasks: int) -> None:
        pass

    def task_finished(self, report: TaskReport) -> None:
        pass

    def task_restarted(self, vertex: str, subtask: int) -> None:
        pass

    def finished(self) -> None:
        pass

    def failed(self, error: BaseException) -> None:
        pass


@dataclass(frozen=True)
class VertexProgress:
    """One vertex's figures at one moment: its successful subtasks and what they did."""

    name: str
    #: the subtask count, or None while an adaptive vertex's is not decided
    subtasks: int | None
    done: int = 0
    rows: int = 0
    #: bytes its subtasks' result partitions took (what it sent downstream, or to the
    #: driver for the sink)
    bytes: int = 0
    #: bytes spilled to disk, by its partitions and by its operators
    spilled_bytes: int = 0


@dataclass(frozen=True)
class _Figures:
    rows: int
    bytes: int
    spilled_bytes: int

    @staticmethod
    def of(report: TaskReport) -> _Figures:
        return _Figures(
            report.rows_out,
            sum(w.bytes for w in report.writes),
            sum(w.spilled_bytes for w in report.writes)
            + sum(o.spilled_bytes for o in report.operators),
        )


class ProgressCounts:
    """A ``JobProgress`` that counts, per vertex, the subtasks whose latest attempt
    succeeded and what those attempts did.  Plain state, no I/O: a display reads
    ``snapshot()``; the caller serialises calls (the scheduler makes them from one
    thread, ``ProgressBars`` holds a lock around them)."""

    def __init__(self) -> None:
        self._totals: dict[str, int | None] = {}
        #: (vertex, subtask) -> the figures of its successful attempt
        self._done: dict[tuple[str, int], _Figures] = {}
        #: ``running``, ``finished`` or ``failed``; ``idle`` before ``started``
        self.state = "idle"
        self.error: BaseException | None = None

    def started(self, plan: Plan) -> None:
        graph = plan.graph
        self._totals = {
            graph.vertices[v].name: (
                None if graph.vertices[v].awaits_parallelism else graph.vertices[v].parallelism
            )
            for v in graph.topological_order()
        }
        self._done = {}
        self.state, self.error = "running", None

    def parallelism_decided(self, vertex: str, subtasks: int) -> None:
        self._totals[vertex] = subtasks

    def task_finished(self, report: TaskReport) -> None:
        self._totals.setdefault(report.vertex, None)
        self._done[(report.vertex, report.subtask)] = _Figures.of(report)

    def task_restarted(self, vertex: str, subtask: int) -> None:
        self._done.pop((vertex, subtask), None)

    def finished(self) -> None:
        self.state = "finished"

    def failed(self, error: BaseException) -> None:
        self.state, self.error = "failed", error

    def snapshot(self) -> list[VertexProgress]:
        """Every vertex of the plan, producers first, with its figures now."""
        sums: dict[str, list[int]] = {name: [0, 0, 0, 0] for name in self._totals}
        for (vertex, _), f in self._done.items():
            s = sums[vertex]
            s[0] += 1
            s[1] += f.rows
            s[2] += f.bytes
            s[3] += f.spilled_bytes
        return [VertexProgress(name, self._totals[name], *sums[name]) for name in self._totals]


class _Guarded:
    """Forwards to an observer until it raises once; then drops every call."""

    def __init__(self, inner: JobProgress) -> None:
        self.inner: JobProgress | None = inner

    def _call(self, method: str, *args: object) -> None:
        inner = self.inner
        if inner is None:
            return
        try:
            getattr(inner, method)(*args)
        except Exception as e:  # a broken display must not fail the job
            self.inner = None
            log.warning(
                "progress display turned off: %s raised %s: %s", method, type(e).__name__, str(e)
            )

    def started(self, plan: Plan) -> None:
        self._call("started", plan)

    def parallelism_decided(self, vertex: str, subtasks: int) -> None:
        self._call("parallelism_decided", vertex, subtasks)

    def task_finished(self, report: TaskReport) -> None:
        self._call("task_finished", report)

    def task_restarted(self, vertex: str, subtask: int) -> None:
        self._call("task_restarted", vertex, subtask)

    def finished(self) -> None:
        self._call("finished")

    def failed(self, error: BaseException) -> None:
        self._call("failed", error)


def guarded(progress: JobProgress) -> JobProgress:
    """``progress``, made safe to call from the scheduler (see the module docstring)."""
    return progress if type(progress) in (NoProgress, _Guarded) else _Guarded(progress)
