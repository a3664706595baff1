"""The contract between an operator and the task that runs it.

A task runs a *chain* of operators inside one executor actor.  Data moves as
``pyarrow.Table`` values (one table is one batch; it may have several chunks).
The task calls, in this order and never concurrently:

1. ``open(context)`` once, inside the executor, before any data; ``context``
   (``operators.context``) carries the operator's memory budget and the task's
   DuckDB database when it declares ``uses_memory``;
2. ``process(table, input_index)`` for every batch of every input, inputs
   interleaved in whatever order their data arrives;
3. ``end_input(input_index)`` once per input when that input has no more data;
4. ``finish()`` once, after every input ended;
5. ``close()`` once when the task ends, however it ends.

Each of 2-4 returns an iterable of output tables which the task hands to the
next operator of the chain (or to the result partition writers).  An operator
that only emits at end of input (aggregate, sort, co_group, sort-merge join)
returns nothing from ``process`` and everything from ``finish`` -- the
FLIP-331 "output on EOF" property, declared by ``output_on_eof``, from which
the planner makes its inputs batch (``plan.output_on_eof``).

Operators are created on the driver and pickled into the task, so they must be
picklable before ``open()``; per-task state is created in ``open()``.
``output_schema`` lets the planner check column names and types before the job
runs; it returns ``None`` when the schema cannot be known without running
(``map_batches`` with a user function).

``input_columns`` is what column pruning asks: given the columns wanted of the
operator's output, which columns it needs of each input.  The answer may name
more than the input has (it is intersected with each batch's columns), never
fewer than the operator reads; ``None`` means every column, the only safe
answer for a function the engine cannot look into.

``partition_keys`` is what the planner asks to know whether a hash-partitioned
input stays hash-partitioned (``plan.partitioning``): it holds when every output
row stays in its subtask and keeps its input row's values in the key columns.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence

import pyarrow as pa

from hybrid_shuffle.operators.context import OperatorContext

__all__ = ["Columns", "Operator", "PlannedOperator"]

#: a set of column names, or ``None`` for every column (see ``Operator.input_columns``)
Columns = frozenset[str] | None


class Operator(ABC):
    """One step of a chain; see the module docstring for the call order."""

    #: how many inputs the operator reads (2 for a join)
    num_inputs: int = 1
    #: True if the operator emits only from ``finish()`` (FLIP-331 isOutputOnEOF)
    output_on_eof: bool = False
    #: a short human name used in explain output and error messages
    name: str = "operator"
    #: what ``edge_rules[i].match.into`` calls the operator when an edge feeds it (join,
    #: aggregate, sort, window, limit, union, udf), or ``None`` (a projection, a filter)
    operator_kind: str | None = None
    #: True if the operator keeps state bounded by ``operators.memory`` (sort, join,
    #: aggregate, co_group, a combiner): the task gives it a share of the budget
    uses_memory: bool = False
    #: True if the operator needs its task's context without a share of the memory (a
    #: sink: it names its files by the subtask and reports what it wrote)
    needs_context: bool = False

    def output_on_eof_of(self, input_index: int) -> bool:
        """FLIP-331's output-on-EOF for one input: nothing comes out before input
        ``input_index`` ended.  ``output_on_eof`` for every input unless the operator
        knows better: a hash join's probe side streams while its build side is read
        whole first (``SqlQuery``), so only the build side's edge becomes batch."""
        return self.output_on_eof

    def describe(self) -> str:
        """How ``explain()`` lists the operator in its vertex's chain: its name, unless it
        has more to say (a local aggregate names its keys and flush policy)."""
        return self.name

    def open(self, context: OperatorContext | None = None) -> None:
        """Create per-task state; called inside the executor before any data.  ``None``
        (outside a task: tests, the driver) means no budget."""

    @abstractmethod
    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        """Consume one batch of input ``input_index``; return what can be emitted now."""

    def end_input(self, input_index: int) -> Iterable[pa.Table]:
        """Input ``input_index`` has no more data."""
        return ()

    def finish(self) -> Iterable[pa.Table]:
        """Every input ended; emit what is left."""
        return ()

    def close(self) -> None:
        """The task ended, however it ended (after ``finish``, or after a failure or a
        cancellation mid-input): let go of what ``open`` started.  Idempotent."""

    def output_schema(self, input_schemas: Sequence[pa.Schema | None]) -> pa.Schema | None:
        """The output schema for these input schemas, or ``None`` if unknown.

        Raises ``hybrid_shuffle.errors.PlanError`` naming the column when an input
        lacks a column the operator needs or has the wrong type for it.
        """
        return None

    def input_columns(self, wanted: Columns) -> list[Columns]:
        """Per input, the columns needed to produce ``wanted`` of the output (see the module
        docstring); the default, every column, suits any operator."""
        return [None] * self.num_inputs

    def partition_keys(self, keys: tuple[str, ...]) -> tuple[str, ...] | None:
        """The names ``keys`` have in the output if each output row keeps the values its
        input rows had in them (so an input hash-partitioned on ``keys`` gives an output
        hash-partitioned on the result), else ``None``: the default, right for any
        operator whose function the engine cannot look into."""
        return None


class PlannedOperator(Operator):
    """A stateful operator as the planner sees it (aggregate, sort, the joins): it holds
    the parameters and answers every planning question, and runs nothing.  A task
    runs it as its DuckDB operator (``operators.duck.operators.on_duckdb``)."""

    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        raise TypeError(
            f"{type(self).__name__} '{self.name}' only plans: run it as "
            "operators.duck.operators.on_duckdb(op), as a task does"
        )
