"""``ProgressBars``: one bar per vertex while a job runs (``collect(progress=True)``).

Each bar shows the vertex's subtasks done out of its total (``?`` until an
adaptive vertex's count is decided), the rows its successful attempts sent out,
the bytes their partitions took and what they spilled.  The figures come from
the scheduler through ``runtime.progress.ProgressCounts``; the bars are tqdm's
(``tqdm.auto``: text in a terminal or a log, a widget in Jupyter when
ipywidgets is installed).

Why a thread of its own draws them: the scheduler's calls only update counts
under a lock, which cannot block, while the drawing writes to a terminal, which
can (a full pipe, a suspended pager).  The drawing thread redraws a few times a
second and once more at the end; ``finished()`` and ``failed()`` wait for that
last drawing at most ``close_timeout`` seconds, then give up on the display.
tqdm is not safe against a write that raises (its global lock stays taken, and
every later bar in the process waits on it), so the bars write through
``_Guard``, which never raises; a write or drawing that fails turns the display
off.  Either way the job goes on: a broken terminal never fails or hangs a job.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any, TextIO

from hybrid_shuffle._words import plural
from hybrid_shuffle.plan.planner import Plan
from hybrid_shuffle.runtime.progress import ProgressCounts, VertexProgress
from hybrid_shuffle.runtime.task import TaskReport

__all__ = ["ProgressBars"]

log = logging.getLogger(__name__)

_BAR_FORMAT = "{desc}: {n_fmt}/{total_fmt} |{bar:20}| {elapsed}{postfix}"


class ProgressBars:
    """A ``JobProgress`` that draws one tqdm bar per vertex (see the module docstring).

    ``file`` is where text bars go (default: ``sys.stderr`` at the time of the
    run); ``interval`` the seconds between redraws."""

    def __init__(
        self, file: TextIO | None = None, interval: float = 0.2, close_timeout: float = 2.0
    ) -> None:
        self.file = file
        self.interval = interval
        self.close_timeout = close_timeout
        self.counts = ProgressCounts()
        #: set when the display gave up (a drawing raised, or hung past ``close_timeout``)
        self.disabled = False
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: a new run started: the drawing thread replaces the bars
        self._generation = 0
        self._bars: dict[str, Any] = {}
        self._out: _Guard | None = None

    # -- JobProgress: called by the scheduler and Job.run; they only update counts ------

    def started(self, plan: Plan) -> None:
        with self._lock:
            self.counts.started(plan)
            self._generation += 1
        if self._thread is None and not self.disabled:
            self._stop.clear()  # the same display may watch another run
            self._thread = threading.Thread(target=self._draw_loop, name="hs-progress", daemon=True)
            self._thread.start()
        self._wake.set()

    def parallelism_decided(self, vertex: str, subtasks: int) -> None:
        with self._lock:
            self.counts.parallelism_decided(vertex, subtasks)
        self._wake.set()

    def task_finished(self, report: TaskReport) -> None:
        with self._lock:
            self.counts.task_finished(report)
        self._wake.set()

    def task_restarted(self, vertex: str, subtask: int) -> None:
        with self._lock:
            self.counts.task_restarted(vertex, subtask)
        self._wake.set()

    def finished(self) -> None:
        with self._lock:
            self.counts.finished()
        self._close()

    def failed(self, error: BaseException) -> None:
        with self._lock:
            self.counts.failed(error)
        self._close()

    @property
    def open_bars(self) -> int:
        """Bars drawn and not closed yet (0 once the run ended and the display closed)."""
        return len(self._bars)

    # -- drawing ---------------------------------------------------------------------------

    def _close(self) -> None:
        """Stop the drawing thread after its last drawing; bounded by ``close_timeout``."""
        thread = self._thread
        self._stop.set()
        self._wake.set()
        if thread is None:
            return
        thread.join(self.close_timeout)
        if thread.is_alive():  # stuck writing to the terminal: leave it, a daemon
            self.disabled = True
            log.warning("progress display turned off: the terminal did not take its output")
        self._thread = None

    def _draw_loop(self) -> None:
        generation = 0
        try:
            while True:
                stopping = self._stop.is_set()
                with self._lock:
                    rows, current = self.counts.snapshot(), self._generation
                    state = self.counts.state
                if current != generation:  # a new run of the job: new bars
                    self._close_bars()
                    generation = current
                self._draw(rows, state)
                if self._out is not None and self._out.error is not None:
                    raise self._out.error
                if stopping:
                    self._close_bars()
                    return
                self._wake.wait(self.interval)
                self._wake.clear()
        except Exception as e:  # a broken display must not fail the job
            self.disabled = True
            try:
                self._close_bars()
            except Exception:
                self._bars = {}
            log.warning("progress display turned off: %s: %s", type(e).__name__, str(e))

    def _draw(self, rows: list[VertexProgress], state: str) -> None:
        width = max((len(v.name) for v in rows), default=0)
        for position, v in enumerate(rows):
            bar = self._bars.get(v.name)
            if bar is None:
                if self._out is None:
                    self._out = _Guard(self.file or sys.stderr)
                bar = self._bars[v.name] = _new_bar(f"{v.name:<{width}}", v, position, self._out)
            if bar.total != v.subtasks:
                bar.total = v.subtasks
            bar.n = v.done
            failed = state == "failed" and (v.subtasks is None or v.done < v.subtasks)
            bar.set_description_str(f"{v.name:<{width}}", refresh=False)
            bar.set_postfix_str(_figures(v) + (", failed" if failed else ""), refresh=False)
            bar.refresh()

    def _close_bars(self) -> None:
        bars, self._bars = self._bars, {}
        for bar in bars.values():
            bar.close()


class _Guard:
    """A text file whose ``write`` and ``flush`` never raise: the first error is kept
    (``error``) and later output dropped."""

    def __init__(self, file: TextIO) -> None:
        self.file = file
        self.error: Exception | None = None

    def write(self, text: str) -> int:
        if self.error is None:
            try:
                return self.file.write(text)
            except Exception as e:
                self.error = e
        return 0

    def flush(self) -> None:
        if self.error is None:
            try:
                self.file.flush()
            except Exception as e:
                self.error = e

    def isatty(self) -> bool:
        try:
            return self.file.isatty()
        except Exception:
            return False


def _new_bar(desc: str, v: VertexProgress, position: int, file: _Guard) -> Any:
    from tqdm.auto import tqdm

    return tqdm(
        total=v.subtasks,
        desc=desc,
        unit="task",
        position=position,
        leave=True,
        file=file,
        bar_format=_BAR_FORMAT,
        dynamic_ncols=True,
        mininterval=0,
    )


def _figures(v: VertexProgress) -> str:
    spilled = f", spilled {_size(v.spilled_bytes)}" if v.spilled_bytes else ""
    return f"{v.rows:,} {plural(v.rows, 'row')}, {_size(v.bytes)}{spilled}"


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    size = n / 1024
    for unit in ("KiB", "MiB"):
        if size < 1024:
            return f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"
