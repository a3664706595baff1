"""Python functions that iterate their partition: ``mapInPandas``, ``mapInArrow`` and an
iterator pandas UDF (Spark's ``MapInPandasExec``, ``PythonMapInArrowExec``, and
``ArrowEvalPythonExec`` with ``SCALAR_ITER``).

Such a function is called once per partition with an iterator of batches and
pulls them itself, while the engine's task pushes batches into its chain.
``IteratorBridge`` joins the two as Spark's writer thread does: the function
runs in a thread of its own, and each ``push`` hands it one batch and waits until
it asks for the next (or ends), returning what it yielded meanwhile.  So one
thread runs at a time, the function sees at most
``spark.sql.execution.arrow.maxRecordsPerBatch`` rows at once, and its output
leaves the step as it is made: not output-on-EOF.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from hybrid_shuffle.errors import JobCancelledError
from hybrid_shuffle.operators.base import Columns, Operator
from hybrid_shuffle.operators.context import OperatorContext
from hybrid_shuffle.operators.python.function import (
    EvalType,
    LoadedCall,
    PythonCall,
    user_failure,
)
from hybrid_shuffle.operators.python.scalar import appended, slices

__all__ = ["IteratorBridge", "PythonMapIter", "conform"]

_NEED = object()  # the function asks for its next input
_END = object()  # no more input
_ABORT = object()  # the task ends early: stop the function


@dataclass
class _Done:
    error: BaseException | None = None


class IteratorBridge:
    """``produce(inputs)`` (a function pulling ``inputs`` and yielding outputs) driven by
    pushes; see the module docstring."""

    #: seconds between checks that the function's thread is still alive while waiting
    POLL = 1.0

    def __init__(self, produce: Callable[[Iterator[Any]], Iterable[Any]], name: str) -> None:
        self._produce = produce
        self._in: queue.Queue[Any] = queue.Queue()
        self._out: queue.Queue[Any] = queue.Queue()
        self._done = False
        self._thread = threading.Thread(target=self._main, name=f"hs-python-{name}", daemon=True)
        self._thread.start()
        self._pending = self._until_asked()  # what it yields before its first input

    def _inputs(self) -> Iterator[Any]:
        while True:
            self._out.put(_NEED)
            item = self._in.get()
            if item is _END:
                return
            if item is _ABORT:
                raise JobCancelledError("the task ended before the Python function's input did")
            yield item

    def _main(self) -> None:
        try:
            for output in self._produce(self._inputs()):
                self._out.put(output)
        except BaseException as e:  # carried to the task's thread, raised there
            self._out.put(_Done(e))
        else:
            self._out.put(_Done())

    def _until_asked(self) -> list[Any]:
        """Outputs until the function asks for input or ends (its error raised here)."""
        outputs: list[Any] = []
        while not self._done:
            try:
                item = self._out.get(timeout=self.POLL)
            except queue.Empty:
                if not self._thread.is_alive():
                    raise RuntimeError(
                        "the Python function's thread ended without a word"
                    ) from None
                continue
            if item is _NEED:
                return outputs
            if isinstance(item, _Done):
                self._done = True
                if item.error is not None:
                    raise item.error
                return outputs
            outputs.append(item)
        return outputs

    def push(self, item: Any) -> list[Any]:
        """Hand the function ``item``; what it yielded until it asked for more."""
        outputs, self._pending = self._pending, []
        if self._done:  # it stopped reading: the rest of its input is not wanted
            return outputs
        self._in.put(item)
        return outputs + self._until_asked()

    def end(self) -> list[Any]:
        """No more input: what the function yields until it returns."""
        outputs, self._pending = self._pending, []
        while not self._done:
            self._in.put(_END)
            outputs += self._until_asked()
        self._thread.join(timeout=self.POLL)
        return outputs

    def abort(self) -> None:
        """Stop the function (the task failed or was cancelled); idempotent."""
        if not self._done and self._thread.is_alive():
            self._in.put(_ABORT)
            self._thread.join(timeout=self.POLL)
        self._done = True


def conform(batch: pa.RecordBatch, outputs: Sequence[tuple[str, pa.DataType]]) -> pa.Table:
    """A function's result batch (one struct column of its rows, as PySpark's worker
    sends it) as the step's declared output: the fields by name when all are there, else
    by position, each cast to its declared type (as Spark reads them into its schema)."""
    struct = batch.column(0)
    batch = pa.RecordBatch.from_arrays(struct.flatten(), schema=pa.schema(struct.type))
    names = batch.schema.names
    columns = []
    wanted = [n for n, _ in outputs]
    by_name = len(set(names)) == len(names) and all(n in names for n in wanted)
    if not by_name and batch.num_columns != len(outputs):
        raise ValueError(
            f"the function returned {batch.num_columns} columns ({', '.join(names)}) where its "
            f"declared schema has {len(outputs)}"
        )
    for index, (name, data_type) in enumerate(outputs):
        column = batch.column(names.index(name)) if by_name else batch.column(index)
        columns.append(column if column.type == data_type else column.cast(data_type))
    return pa.Table.from_arrays(columns, names=wanted)


class PythonMapIter(Operator):
    """One call of an iterating function per subtask, through an ``IteratorBridge``.

    ``mapInPandas``/``mapInArrow`` read every input column as one struct named
    ``struct`` (Spark's wrapping: a DataFrame or a RecordBatch in the function) and
    output their declared columns; an iterator pandas UDF reads its arguments and its
    results are appended to the ``keep`` columns of the rows they came from."""

    operator_kind = "udf"

    def __init__(
        self,
        call: PythonCall,
        name: str,
        inputs: Sequence[tuple[str, str]],
        outputs: Sequence[tuple[str, pa.DataType]],
        keep: Sequence[str] = (),
    ) -> None:
        self.call = call
        self.name = name
        #: (input column, the name the function sees): the struct's fields, or the arguments
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.keep = list(keep)
        self._bridge: IteratorBridge | None = None

    @property
    def _scalar(self) -> bool:
        return self.call.eval_type == EvalType.SCALAR_PANDAS_ITER

    def describe(self) -> str:
        return f"{self.name} (python {self.call.names}, one call per subtask)"

    def output_schema(self, input_schemas: Sequence[pa.Schema | None]) -> pa.Schema | None:
        return appended(input_schemas[0], self.keep, self.outputs)

    def input_columns(self, wanted: Columns) -> list[Columns]:
        return [frozenset(self.keep) | frozenset(c for c, _ in self.inputs)]

    def open(self, context: OperatorContext | None = None) -> None:
        loaded = self.call.load()
        self._waiting: deque[pa.Table] = deque()  # kept columns whose results are due
        self._bridge = IteratorBridge(lambda items: loaded.run(items), self.name)
        self._loaded: LoadedCall = loaded

    def _item(self, part: pa.Table) -> list[Any]:
        columns = [part.column(c) for c, _ in self.inputs]
        seen = [n for _, n in self.inputs]
        if self._scalar:
            named = pa.Table.from_arrays(columns, names=seen)
            return [self._loaded.pandas(c) for c in named.itercolumns()]
        struct = (
            pa.StructArray.from_arrays([c.combine_chunks() for c in columns], names=seen)
            if columns
            else pa.array([{}] * part.num_rows, pa.struct([]))
        )
        if self.call.eval_type == EvalType.MAP_ARROW_ITER:
            return [pa.RecordBatch.from_arrays(struct.flatten(), schema=pa.schema(struct.type))]
        return [self._loaded.pandas(pa.chunked_array([struct]))]

    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        assert self._bridge is not None, "open() first"
        out: list[pa.Table] = []
        self._kept = table.schema  # for an empty take
        for part in slices(table, self.call.batch_rows):
            if self._scalar:
                self._waiting.append(part.select(self.keep))
            item = self._item(part)
            with user_failure(self.call):  # what it returned does not fit its declared type
                out += self._tables(self._bridge.push(item))
        return out

    def finish(self) -> Iterable[pa.Table]:
        assert self._bridge is not None, "open() first"
        with user_failure(self.call):
            out = self._tables(self._bridge.end())
            left = sum(t.num_rows for t in self._waiting)
            if self._scalar and left:
                raise ValueError(f"it returned {left} rows fewer than it read")
        return out

    def _tables(self, batches: list[pa.RecordBatch]) -> list[pa.Table]:
        if not self._scalar:
            return [conform(b, self.outputs) for b in batches]
        out = []
        for batch in batches:
            rows = batch.num_rows
            kept = self._take(rows)
            for (name, _), column in zip(self.outputs, batch.columns, strict=True):
                kept = kept.append_column(name, column)
            out.append(kept)
        return out

    def _take(self, rows: int) -> pa.Table:
        """The next ``rows`` kept rows, in the order read (results come back in order)."""
        parts: list[pa.Table] = []
        while rows > 0:
            if not self._waiting:
                raise ValueError("it returned more rows than it read")
            head = self._waiting.popleft()
            if head.num_rows > rows:
                self._waiting.appendleft(head.slice(rows))
                head = head.slice(0, rows)
            parts.append(head)
            rows -= head.num_rows
        if not parts:
            return self._kept.empty_table().select(self.keep)
        return pa.concat_tables(parts)

    def close(self) -> None:
        if self._bridge is not None:
            self._bridge.abort()
            self._bridge = None
