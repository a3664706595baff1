"""One subtask of a vertex: read inputs, run the operator chain, write partitions.

``TaskDeployment`` is what the scheduler ships to an executor (plain, picklable
data); ``run_task`` is the loop the executor runs, against the shuffle
environment's writers and gates.  The chain is driven in the call order
``operators.base`` documents.  A source task reads its split (fetched through
the ``fetch`` the executor passes in: this module does not import Ray) and cuts
it into buffer-sized batches so that its consumers can start on the first batch
(pipelining needs granularity).  A Parquet split whose chain starts with a
``sql`` query is not read here at all when DuckDB can read it as pyarrow would
(``ParquetSplit.scan``): the query's own DuckDB reads it (``_duckdb_scan``).

``run_task`` does not raise for a failure or a cancellation: either is written
into the report (``TaskState``, ``TaskFailure``), which is what keeps Ray from
printing "Unhandled error" for tasks of a failed job (``runtime.failures``).
Only ``KeyboardInterrupt`` and ``SystemExit`` propagate, after being recorded.
"""

from __future__ import annotations

import contextlib
import enum
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import pyarrow as pa

from hybrid_shuffle.errors import (
    JobCancelledError,
    PartitionNotFoundError,
    ProducerFailedError,
    SchemaMismatchError,
)
from hybrid_shuffle.operators.base import Columns, Operator
from hybrid_shuffle.operators.columns import project
from hybrid_shuffle.operators.context import OperatorContext, OperatorMetrics
from hybrid_shuffle.operators.duck.database import DatabasePool, TaskDatabase
from hybrid_shuffle.operators.duck.operators import on_duckdb as duck_operator
from hybrid_shuffle.operators.sql import SqlQuery
from hybrid_shuffle.runtime.failures import TaskFailure, describe_failure
from hybrid_shuffle.runtime.process_cpu import LEDGER
from hybrid_shuffle.shuffle.api import (
    HandedOver,
    InputGate,
    InputGateDescriptor,
    PartitionId,
    ResultPartitionWriter,
    ShuffleDescriptor,
    ShuffleEnvironment,
)
from hybrid_shuffle.shuffle.metrics import ReadMetrics, WriteMetrics
from hybrid_shuffle.sources.duck_scan import DuckScan

__all__ = ["SourceSplit", "TaskDeployment", "TaskReport", "TaskState", "attempt_key", "run_task"]


def attempt_key(job_id: str, task: str, attempt: int) -> str:
    """The name of one attempt of one task (what ``Executor.cancel_attempts`` takes)."""
    return f"{job_id}/{task}#{attempt}"


class TaskState(enum.Enum):
    """A task attempt's life, as the scheduler sees it."""

    RUNNING = "running"  # deployed, not yet reported
    FINISHED = "finished"
    FAILED = "failed"  # raised: ``TaskReport.failure`` says what
    CANCELED = "canceled"  # stopped because its job was cancelled


@dataclass
class TaskDeployment:
    job_id: str
    vertex: str
    subtask: int
    #: the task's attempt, 0-based (raised each time its region restarts)
    attempt: int
    operators: list[Operator]
    gates: list[InputGateDescriptor]
    #: the registered output partitions (the master's descriptors: where each is kept)
    outputs: list[ShuffleDescriptor]
    #: per output, the operator its rows pass through before partitioning (or None)
    combiners: list[Operator | None] = field(default_factory=list)
    #: per output, the columns it carries (column pruning; None: all), kept before the
    #: combiner
    columns: list[Columns] = field(default_factory=list)
    #: source tasks: this subtask's split: tables, ObjectRefs of tables, or
    #: ``SourceSplit`` values the task reads itself
    source_refs: list[Any] | None = None
    buffer_size: int = 4 << 20
    wait_timeout: float = 300.0
    #: ``operators.memory``: bytes the task's stateful operators may hold, split evenly
    #: between them (``operators.context``)
    operator_memory: int = 512 << 20
    #: ``operators.threads``: the threads of the task's DuckDB
    threads: int = 1

    @property
    def name(self) -> str:
        return f"{self.vertex}[{self.subtask}]"


@dataclass
class TaskReport:
    name: str
    vertex: str
    subtask: int
    executor_index: int = -1
    #: which attempt of the task this reports (0-based; see ``JobResult.restarts``)
    attempt: int = 0
    #: a speculative attempt (``failover.speculation``): a second copy of a slow
    #: subtask, run beside the first; set by the scheduler
    speculative: bool = False
    state: TaskState = TaskState.RUNNING
    #: set when ``state`` is FAILED
    failure: TaskFailure | None = None
    started_at: float = 0.0
    finished_at: float = 0.0
    #: CPU time of the task's thread and of its streamed DuckDB queries' threads (the rest
    #: of started..finished is waiting or contention)
    cpu_seconds: float = 0.0
    #: the executor process's CPU time over the task, shared with the tasks that ran
    #: beside it (``runtime.process_cpu``): DuckDB's and pyarrow's threads included
    process_cpu_seconds: float = 0.0
    #: rows into the head of the chain (read from its inputs, or a source's split: the
    #: rows of its row groups)
    rows_in: int = 0
    #: the source's Parquet split was read by the head ``sql`` query's DuckDB
    #: (``read_parquet``: decoding, the query's filter and its operators one pipeline on
    #: the task's DuckDB), not decoded by pyarrow and pushed in
    source_in_duckdb: bool = False
    rows_out: int = 0
    #: what each stateful operator (``uses_memory``) did: memory given, spilled, peak held
    operators: list[OperatorMetrics] = field(default_factory=list)
    #: the schema of the chain's output, known even when no row came out
    schema: pa.Schema | None = None
    writes: list[WriteMetrics] = field(default_factory=list)
    reads: list[ReadMetrics] = field(default_factory=list)
    #: output partition id -> what it hands to consumers that start later, who then read
    #: it without polling (``ResultPartition.finished_buffers``); the scheduler takes
    #: these out of the report so that a finished job's reports hold no ObjectRefs
    ready_buffers: dict[PartitionId, HandedOver] = field(default_factory=dict)


class _Chain:
    """Pushes tables through the operators, fanning the last one out to every writer
    (through that output's combiner, if it has one)."""

    def __init__(
        self,
        vertex: str,
        operators: Sequence[Operator],
        writers: Sequence[ResultPartitionWriter],
        combiners: Sequence[Operator | None],
        columns: Sequence[Columns] = (),
    ):
        self.vertex = vertex
        self.operators = list(operators)
        self.writers = list(writers)
        self.combiners = list(combiners) or [None] * len(self.writers)
        self.columns = list(columns) or [None] * len(self.writers)
        self.rows_in = 0
        self.rows_out = 0
        self.schema: pa.Schema | None = None
        #: (operator level, input index) -> the schema of the first batch it received
        self._schemas: dict[tuple[int, int], pa.Schema] = {}

    def _check_schema(self, level: int, input_index: int, table: pa.Table) -> None:
        """Every batch an operator input receives has the schema of the first one."""
        first = self._schemas.setdefault((level, input_index), table.schema)
        other = table.schema
        if first is other or (first.names == other.names and first.types == other.types):
            return
        if level > 0:  # the batches came out of the operator before
            what = f"operator '{self.operators[level - 1].name}'"
        elif self.operators:
            what = f"the batches into operator '{self.operators[0].name}' (input {input_index})"
        else:
            what = f"the batches of '{self.vertex}'"
        raise SchemaMismatchError(_schema_difference(what, first, other))

    def push(self, level: int, tables: Iterable[pa.Table]) -> None:
        for table in tables:
            self._check_schema(level, 0, table)
            if level == len(self.operators):
                self.schema = self.schema or table.schema
                self.rows_out += table.num_rows
                outputs = zip(self.writers, self.combiners, self.columns, strict=True)
                for writer, combiner, keep in outputs:
                    kept = project(table.column_names, keep)
                    sent = table if kept is None else table.select(kept)
                    if combiner is None:
                        writer.emit(sent)
                    else:
                        for combined in combiner.process(sent, 0):
                            writer.emit(combined)
            else:
                self.push(level + 1, self.operators[level].process(table, 0))

    def process(self, table: pa.Table, input_index: int, operator_index: int = 0) -> None:
        """A batch of input ``input_index`` of operator ``operator_index``: the head's
        inputs, or a chained operator's second input (a broadcast join's build side)."""
        if operator_index == 0:
            self.rows_in += table.num_rows
        if not self.operators:
            self.push(0, [table])
        else:
            self._check_schema(operator_index, input_index, table)
            op = self.operators[operator_index]
            self.push(operator_index + 1, op.process(table, input_index))

    def end_input(self, input_index: int, operator_index: int = 0) -> None:
        if self.operators:
            op = self.operators[operator_index]
            self.push(operator_index + 1, op.end_input(input_index))

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


def _schema_difference(what: str, first: pa.Schema, other: pa.Schema) -> str:
    """One sentence naming the first column that differs, with both types."""
    same = "; every batch must have the same columns"
    for f in other:
        if f.name not in first.names:
            return f"{what}: column '{f.name}' ({f.type}) appears only in a later batch{same}"
        if first.field(f.name).type != f.type:
            return (
                f"{what}: column '{f.name}' is {first.field(f.name).type} in an earlier batch "
                f"but {f.type} in a later one; cast it to one type in every batch"
            )
    missing = [n for n in first.names if n not in other.names]
    if missing:
        return f"{what}: column '{missing[0]}' is missing from a later batch{same}"
    return f"{what}: a later batch orders its columns differently ({other.names}){same}"


def run_task(
    deployment: TaskDeployment,
    env: ShuffleEnvironment,
    cancelled: threading.Event,
    executor_index: int,
    fetch: Callable[[Any, float], pa.Table],
    spill_dir: str | None = None,
    databases: DatabasePool | None = None,
) -> TaskReport:
    """Run one task to its end and report it (see the module docstring for what raises).

    ``spill_dir`` is where the task's DuckDB may spill (its ``temp_directory``, a
    directory of the task attempt's own made inside on connect and removed when the
    task ends, however it ends); ``None``: DuckDB does not spill.  ``databases``: the
    executor's idle DuckDB databases, one of which the task takes instead of opening
    one, and to which a task that finished hands it back (``DatabasePool``)."""
    report = TaskReport(
        deployment.name,
        deployment.vertex,
        deployment.subtask,
        executor_index,
        deployment.attempt,
        started_at=time.time(),
    )
    writers: Sequence[ResultPartitionWriter] = ()
    task_dir = None if spill_dir is None else os.path.join(spill_dir, "operators", uuid.uuid4().hex)
    on_duckdb(deployment)
    database = TaskDatabase(
        deployment.threads,
        deployment.operator_memory,
        None if task_dir is None else os.path.join(task_dir, "duckdb"),
        databases,
    )
    contexts = operator_contexts(deployment, database)
    report.operators = [c.metrics for c in contexts.values()]
    cpu = LEDGER.enter()
    try:
        writers = env.create_result_partition_writers(deployment.outputs, cancelled)
        gates = env.create_input_gates(deployment.gates)
        _run(deployment, env, gates, writers, cancelled, fetch, report, contexts)
    except BaseException as e:
        for writer in writers:
            writer.fail(f"producer task '{deployment.name}' failed: {type(e).__name__}: {e}")
        report.finished_at = time.time()
        if cancelled.is_set() and _caused_by_cancel(e):
            report.state = TaskState.CANCELED
        else:
            report.state = TaskState.FAILED
            report.failure = describe_failure(e)
        if not isinstance(e, Exception):  # KeyboardInterrupt, SystemExit: not ours to eat
            raise
    finally:
        for op in _all_operators(deployment):
            with contextlib.suppress(Exception):
                op.close()
        # a finished task's database goes back to the executor's pool after the task
        # reported, and its directory is removed then (``operators.duck.database``);
        # one that failed or spilled is closed, and its files removed, before it reports
        reuse = report.state is TaskState.FINISHED and not _spilled(report)
        database.close(reuse, None if task_dir is None else _remover(task_dir))
        report.process_cpu_seconds = LEDGER.leave(cpu)
    return report


def _spilled(report: TaskReport) -> bool:
    return any(m.spilled_bytes or m.spill_runs for m in report.operators)


def _remover(directory: str) -> Callable[[], None]:
    """Removes the task's ``directory`` (its DuckDB's temp directory inside), whatever
    is in it."""
    return lambda: shutil.rmtree(directory, ignore_errors=True)


def _all_operators(deployment: TaskDeployment) -> list[Operator]:
    return [*deployment.operators, *(c for c in deployment.combiners if c is not None)]


def on_duckdb(deployment: TaskDeployment) -> None:
    """Swap the chain's and combiners' operators for the DuckDB operators that run them
    (``operators.duck.operators.on_duckdb``); the deployment is the task's own copy."""
    deployment.operators = [duck_operator(op) for op in deployment.operators]
    deployment.combiners = [None if c is None else duck_operator(c) for c in deployment.combiners]


def operator_contexts(
    deployment: TaskDeployment, database: TaskDatabase | None = None
) -> dict[int, OperatorContext]:
    """``id(operator)`` -> its context, for the chain's and combiners' stateful operators:
    an even share of ``operator_memory`` each, and the task's DuckDB; and for the
    operators that ask for one (``needs_context``: a sink), one with no memory."""
    operators = _all_operators(deployment)
    stateful = [op for op in operators if op.uses_memory]
    share = deployment.operator_memory // max(len(stateful), 1)
    task = (deployment.subtask, deployment.attempt)
    contexts = {
        id(op): OperatorContext(share, *task, database, deployment.wait_timeout) for op in stateful
    }
    for op in operators:
        if op.needs_context and id(op) not in contexts:
            contexts[id(op)] = OperatorContext(0, *task, database, deployment.wait_timeout)
    return contexts


def _caused_by_cancel(error: BaseException) -> bool:
    """A task of a cancelled job that failed because of the cancellation (not on its own)."""
    return isinstance(error, (JobCancelledError, PartitionNotFoundError, ProducerFailedError))


def _run(
    deployment: TaskDeployment,
    env: ShuffleEnvironment,
    gates: Sequence[InputGate],
    writers: Sequence[ResultPartitionWriter],
    cancelled: threading.Event,
    fetch: Callable[[Any, float], pa.Table],
    report: TaskReport,
    contexts: dict[int, OperatorContext],
) -> None:
    cpu_started = time.thread_time()
    chain = _Chain(
        deployment.vertex,
        deployment.operators,
        writers,
        deployment.combiners,
        deployment.columns,
    )
    for op in _all_operators(deployment):
        op.open(contexts.get(id(op)))
    if deployment.source_refs is not None:
        # a source's chain may hold a broadcast join: its build side is read whole first
        # (it is the small side, and a source depends on no other task, so nothing waits)
        _read_inputs(env, gates, cancelled, chain)
        scan = _duckdb_scan(deployment)
        if scan is None:
            _read_source(deployment, chain, fetch)
        else:
            head = deployment.operators[0]
            assert isinstance(head, SqlQuery)
            head.read_input_from(scan)
            chain.rows_in += scan.rows
            report.source_in_duckdb = True
        chain.end_input(0)
    else:
        _read_inputs(env, gates, cancelled, chain)
    chain.finish()
    for writer in writers:
        writer.finish()
    report.state = TaskState.FINISHED
    report.finished_at = time.time()
    # the task's thread, and the threads its streamed DuckDB queries ran on
    queries = sum(m.query_cpu_seconds for m in report.operators)
    report.cpu_seconds = time.thread_time() - cpu_started + queries
    report.rows_in = chain.rows_in
    report.rows_out = chain.rows_out
    report.schema = chain.schema
    report.writes = [w.metrics for w in writers]
    for writer in writers:
        ready = writer.finished_buffers()
        if ready is not None:
            report.ready_buffers[writer.descriptor.partition_id] = ready
    report.reads = [g.metrics for g in gates]


def _read_inputs(
    env: ShuffleEnvironment,
    gates: Sequence[InputGate],
    cancelled: threading.Event,
    chain: _Chain,
) -> None:
    """Feed the chain from the gates; the reader is closed on every exit, so a failed
    task stops its polls and lets go of the buffers it fetched."""
    if not gates:
        return
    with contextlib.closing(env.read(gates, cancelled)) as inputs:  # type: ignore[type-var]
        for gate, table in inputs:
            if table is None:
                chain.end_input(gate.input_index, gate.operator_index)
            else:
                chain.process(table, gate.input_index, gate.operator_index)


@runtime_checkable
class SourceSplit(Protocol):
    """A split the task reads itself (``from_parquet``'s ``ParquetSplit``) instead of
    fetching it from the object store: plain, picklable data naming where the rows are."""

    def read(self) -> Iterable[pa.Table]:
        """The split's rows as tables, at least one (zero rows: the schema)."""
        ...


def _split_tables(
    ref: Any, deployment: TaskDeployment, fetch: Callable[[Any, float], pa.Table]
) -> Iterable[pa.Table]:
    """One element of a source split: a table, an ObjectRef of one, or a ``SourceSplit``."""
    if isinstance(ref, pa.Table):
        return [ref]
    if isinstance(ref, SourceSplit):
        return ref.read()
    return [fetch(ref, deployment.wait_timeout)]


def _duckdb_scan(deployment: TaskDeployment) -> DuckScan | None:
    """What the head ``sql`` query's DuckDB reads in place of the source's split: the
    split's ``scan`` when the split is one Parquet split DuckDB reads as pyarrow would
    (the driver said so) and the chain starts with a query bound on its schema; else
    ``None`` (pyarrow reads the split and pushes it, as for any other source)."""
    refs = deployment.source_refs or []
    head = deployment.operators[0] if deployment.operators else None
    if len(refs) != 1 or not isinstance(head, SqlQuery) or not head.reads_relations:
        return None
    scan = getattr(refs[0], "scan", None)
    return scan if isinstance(scan, DuckScan) else None


def _read_source(
    deployment: TaskDeployment, chain: _Chain, fetch: Callable[[Any, float], pa.Table]
) -> None:
    assert deployment.source_refs is not None
    for ref in deployment.source_refs:
        for table in _split_tables(ref, deployment, fetch):
            if table.num_rows == 0:
                chain.process(table, 0)
                continue
            rows = max(1, table.num_rows * deployment.buffer_size // max(table.nbytes, 1))
            for offset in range(0, table.num_rows, rows):
                chain.process(table.slice(offset, rows), 0)
