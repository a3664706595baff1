"""One subtask of a vertex: read inputs, run the operator chain, write partitions.

``TaskDeployment`` is what the scheduler ships to an executor (plain, picklable
data); ``run_task`` is the loop the executor runs.  The chain is driven in the
call order ``operators.base`` documents.  A source task reads its split of
ObjectRefs instead of input gates and cuts it into buffer-sized batches so that
its consumers can start on the first batch (pipelining needs granularity).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import ray

from hybrid_shuffle.operators.base import Operator
from hybrid_shuffle.shuffle.api import HandedOver, PartitionDescriptor
from hybrid_shuffle.shuffle.input_gate import GateSpec, InputGate, read_gates
from hybrid_shuffle.shuffle.metrics import ReadMetrics, WriteMetrics
from hybrid_shuffle.shuffle.writer import ResultPartitionWriter

__all__ = ["TaskDeployment", "TaskReport", "run_task"]


@dataclass
class TaskDeployment:
    job_id: str
    vertex: str
    subtask: int
    operators: list[Operator]
    gates: list[GateSpec]
    outputs: list[PartitionDescriptor]
    #: per output, the operator its rows pass through before partitioning (or None)
    combiners: list[Operator | None] = field(default_factory=list)
    #: source tasks: the ObjectRefs of this subtask's split
    source_refs: list[Any] | None = None
    buffer_size: int = 4 << 20
    wait_timeout: float = 300.0

    @property
    def name(self) -> str:
        return f"{self.vertex}[{self.subtask}]"


@dataclass
class TaskReport:
    name: str
    vertex: str
    subtask: int
    executor_index: int = -1
    started_at: float = 0.0
    finished_at: float = 0.0
    #: CPU time of the task's thread (the rest of started..finished is waiting or contention)
    cpu_seconds: float = 0.0
    rows_out: int = 0
    #: the schema of the chain's output, known even when no row came out
    schema: pa.Schema | None = None
    writes: list[WriteMetrics] = field(default_factory=list)
    reads: list[ReadMetrics] = field(default_factory=list)
    #: output partition id -> what it hands to consumers that start later, who then read
    #: it without polling (``ResultPartition.finished_buffers``); the scheduler takes
    #: these out of the report so that a finished job's reports hold no ObjectRefs
    ready_buffers: dict[str, HandedOver] = field(default_factory=dict)


class _Chain:
    """Pushes tables through the operators, fanning the last one out to every writer
    (through that output's combiner, if it has one)."""

    def __init__(
        self,
        operators: Sequence[Operator],
        writers: Sequence[ResultPartitionWriter],
        combiners: Sequence[Operator | None],
    ):
        self.operators = list(operators)
        self.writers = list(writers)
        self.combiners = list(combiners) or [None] * len(self.writers)
        self.rows_out = 0
        self.schema: pa.Schema | None = None

    def push(self, level: int, tables: Iterable[pa.Table]) -> None:
        for table in tables:
            if level == len(self.operators):
                self.schema = self.schema or table.schema
                self.rows_out += table.num_rows
                for writer, combiner in zip(self.writers, self.combiners, strict=True):
                    if combiner is None:
                        writer.emit(table)
                    else:
                        for combined in combiner.process(table, 0):
                            writer.emit(combined)
            else:
                self.push(level + 1, self.operators[level].process(table, 0))

    def process(self, table: pa.Table, input_index: int) -> None:
        if not self.operators:
            self.push(0, [table])
        else:
            self.push(1, self.operators[0].process(table, input_index))

    def end_input(self, input_index: int) -> None:
        if self.operators:
            self.push(1, self.operators[0].end_input(input_index))

    def finish(self) -> None:
        """Every head input ended: finish each operator, ending the next one's input."""
        for level, op in enumerate(self.operators):
            if level > 0:
                self.push(level + 1, op.end_input(0))
            self.push(level + 1, op.finish())
        for writer, combiner in zip(self.writers, self.combiners, strict=True):
            if combiner is not None:
                for table in (*combiner.end_input(0), *combiner.finish()):
                    writer.emit(table)


def run_task(
    deployment: TaskDeployment,
    gates: Sequence[InputGate],
    writers: Sequence[ResultPartitionWriter],
    cancelled: threading.Event,
    executor_index: int,
) -> TaskReport:
    report = TaskReport(
        deployment.name, deployment.vertex, deployment.subtask, executor_index, time.time()
    )
    cpu_started = time.thread_time()
    chain = _Chain(deployment.operators, writers, deployment.combiners)
    try:
        for op in [*deployment.operators, *(c for c in deployment.combiners if c is not None)]:
            op.open()
        if deployment.source_refs is not None:
            _read_source(deployment, chain)
            chain.end_input(0)
        else:
            _read_inputs(gates, cancelled, chain)
        chain.finish()
        for writer in writers:
            writer.finish()
    except BaseException as e:
        for writer in writers:
            writer.fail(f"producer task '{deployment.name}' failed: {type(e).__name__}: {e}")
        raise
    report.finished_at = time.time()
    report.cpu_seconds = time.thread_time() - cpu_started
    report.rows_out = chain.rows_out
    report.schema = chain.schema
    report.writes = [w.partition.metrics for w in writers]
    for writer in writers:
        ready = writer.partition.finished_buffers()
        if ready is not None:
            report.ready_buffers[writer.descriptor.partition_id] = ready
    report.reads = [g.metrics for g in gates]
    return report


def _read_inputs(gates: Sequence[InputGate], cancelled: threading.Event, chain: _Chain) -> None:
    """Feed the chain from the gates; the reader is closed on every exit, so a failed
    task stops its polls and lets go of the buffers it fetched."""
    with contextlib.closing(read_gates(gates, cancelled)) as inputs:
        for input_index, table in inputs:
            if table is None:
                chain.end_input(input_index)
            else:
                chain.process(table, input_index)


def _read_source(deployment: TaskDeployment, chain: _Chain) -> None:
    assert deployment.source_refs is not None
    for ref in deployment.source_refs:
        table = ref if isinstance(ref, pa.Table) else ray.get(ref, timeout=deployment.wait_timeout)
        if table.num_rows == 0:
            chain.process(table, 0)
            continue
        rows = max(1, table.num_rows * deployment.buffer_size // max(table.nbytes, 1))
        for offset in range(0, table.num_rows, rows):
            chain.process(table.slice(offset, rows), 0)
