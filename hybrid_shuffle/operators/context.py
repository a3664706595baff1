"""What a task gives each operator it opens: a memory budget, a place to spill, metrics.

``operators.memory`` (YAML) is the memory one task may use for the state of
its sort, join, aggregate and co_group operators (and a map-side combiner);
a task whose chain holds several such operators splits it evenly between
them, as Flink splits a slot's managed memory by operator weights.  An
operator keeps its *held* bytes -- the Arrow data it keeps between calls plus
the working set of the step it is in -- within ``memory`` and spills the rest
as ``SpillRun`` files under the task's private directory.  It reports what it
holds with ``hold``; the largest value becomes the operator's
``peak_memory_bytes``, what it spilled its ``spilled_bytes``.

The held figure is the operator's own account of the Arrow buffers it
references, not the process's resident memory: a Ray executor runs several
tasks in one process and shares Arrow's pool between them, so a per-task
measure of the process would be no measure at all.

An operator on the DuckDB kernel (``operators.duck``) spills through DuckDB
instead: its queries run on the task's ``TaskDatabase`` (``database``), whose
``temp_directory`` is the task's, and it reports DuckDB's own peaks.

``OperatorContext.unbounded()`` (no budget, spills refused) is what an operator
opened without a task gets: unit tests, and the driver.
"""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Hashable
from dataclasses import dataclass

import pyarrow as pa

from hybrid_shuffle.operators.duck.database import TaskDatabase
from hybrid_shuffle.operators.spill_run import SpillRun
from hybrid_shuffle.spill_dirs import make_private_dirs

__all__ = ["UNBOUNDED", "HeldBytes", "OperatorContext", "OperatorMetrics"]

#: the budget of an operator opened outside a task (no limit)
UNBOUNDED = 1 << 62


@dataclass
class OperatorMetrics:
    """What one operator of one task did (summed per vertex into ``VertexMetrics``)."""

    #: the memory it was given for its state
    memory: int = 0
    #: bytes it wrote to spill runs
    spilled_bytes: int = 0
    #: the most bytes it held at once (its own account; see the module docstring)
    peak_memory_bytes: int = 0
    #: runs (files) it spilled
    spill_runs: int = 0
    #: a sink (``write_parquet``): the rows, files and bytes it wrote out of the engine
    rows_written: int = 0
    files_written: int = 0
    bytes_written: int = 0


class OperatorContext:
    """One operator's budget, spill directory and metrics in one task attempt.

    ``spill_dir`` is created (0700) on the first spill only; ``remove`` deletes it
    with everything in it, which the task does when the attempt ends.
    """

    def __init__(
        self,
        memory: int,
        spill_dir: str | None,
        subtask: int = 0,
        attempt: int = 0,
        database: TaskDatabase | None = None,
        wait_timeout: float = 300.0,
    ) -> None:
        self.memory = memory
        #: the task's DuckDB (one per task attempt, shared by its operators); an
        #: operator opened outside a task gets one of its own on first use
        self._database = database
        #: the longest a DuckDB operator waits for its query (``shuffle.wait_timeout``)
        self.wait_timeout = wait_timeout
        self.spill_dir = spill_dir
        #: the task's subtask and attempt (a sink names its files by them)
        self.subtask = subtask
        self.attempt = attempt
        self.metrics = OperatorMetrics(memory=memory if memory < UNBOUNDED else 0)
        self._names = itertools.count()
        self._created = False

    @classmethod
    def unbounded(cls) -> OperatorContext:
        """No budget and nowhere to spill (an operator opened outside a task)."""
        return cls(UNBOUNDED, None)

    @property
    def database(self) -> TaskDatabase:
        """The DuckDB database the operator's queries run on (see the module docstring)."""
        if self._database is None:
            self._database = TaskDatabase()
        return self._database

    def hold(self, held_bytes: int) -> None:
        """The operator now holds ``held_bytes`` (records the peak)."""
        if held_bytes > self.metrics.peak_memory_bytes:
            self.metrics.peak_memory_bytes = held_bytes

    def fits(self, held_bytes: int) -> bool:
        """``held_bytes`` is within the budget."""
        return held_bytes <= self.memory

    @property
    def can_spill(self) -> bool:
        return self.spill_dir is not None

    def new_run(self, schema: pa.Schema, what: str) -> SpillRun:
        """A new spill run (``what`` names it in the file name: ``sort``, ``bucket-3``)."""
        if self.spill_dir is None:
            raise RuntimeError("this operator was opened without a spill directory")
        if not self._created:
            make_private_dirs(self.spill_dir)
            self._created = True
        name = f"{next(self._names):05d}-{what}.arrow"
        self.metrics.spill_runs += 1
        return SpillRun(os.path.join(self.spill_dir, name), schema)

    def spilled(self, run: SpillRun) -> None:
        """``run`` is written: count its bytes as spilled."""
        self.metrics.spilled_bytes += run.bytes

    def remove(self) -> None:
        """Delete the spill directory and every run in it (idempotent)."""
        if self.spill_dir is not None and self._created:
            shutil.rmtree(self.spill_dir, ignore_errors=True)
            self._created = False


class HeldBytes:
    """The bytes the parts of one operator hold (its sorters, its pools), reported to the
    context as their sum so ``peak_memory_bytes`` is the operator's, not one part's."""

    def __init__(self, context: OperatorContext) -> None:
        self.context = context
        self._parts: dict[Hashable, int] = {}

    def set(self, part: Hashable, nbytes: int) -> None:
        """``part`` now holds ``nbytes``."""
        self._parts[part] = nbytes
        self.context.hold(sum(self._parts.values()))
