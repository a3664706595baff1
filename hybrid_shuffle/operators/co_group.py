"""co_group: a user function over the rows of both inputs that share keys.

``CoGroup(on, fn, name)`` gathers its two co-partitioned inputs (0 = left, 1 =
right; batches arrive interleaved, in any order), sorts each by the key
columns, and at the end walks the two sorted streams together
(``key_groups.align``), calling ``fn(left, right)`` once per aligned chunk.

The sorters (``SortedSides``): each side is a DuckDB ``ORDER BY`` on the
task's database (``duck/sorter.py``), in pyarrow's order, which spills within
its ``memory_limit``.

A call gets *many* keys -- every row of each of them, from both sides -- so
``fn`` groups inside (``table.group_by``, pandas ``groupby``); a key is in
exactly one call.  Rows of each side come in key order (ascending, nulls
last); null keys form one group, as in pyarrow's ``group_by``.  A call may
have no left or no right rows (a key on one side only) but never neither.

``fn`` returns a ``pyarrow.Table``, a pandas ``DataFrame`` or ``None`` (nothing
to emit); what it raises propagates unchanged (the task reports it).  The
output schema is unknown before running (``output_schema`` is ``None``).

A side that sent this subtask no batch is passed as an empty table of its
columns: those of its first batch, else those the planner knew (remembered by
``output_schema``: the operator is pickled into its tasks after planning).
When neither is known and ``fn`` has to be called, ``SchemaMismatchError``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from hybrid_shuffle.errors import PlanError, SchemaMismatchError
from hybrid_shuffle.operators.base import Columns, Operator
from hybrid_shuffle.operators.columns import require_key_columns
from hybrid_shuffle.operators.context import HeldBytes, OperatorContext
from hybrid_shuffle.operators.duck.sorter import DuckSorter
from hybrid_shuffle.operators.key_groups import align
from hybrid_shuffle.operators.stateless import as_table

__all__ = ["CoGroup", "SortedSides", "check_key_types"]

_SIDES = ("left", "right")
#: the share of the memory the aligned pools hold together
ALIGN_SHARE = 4


def check_key_types(schemas: Sequence[pa.Schema | None], on: Sequence[str], what: str) -> None:
    """Both inputs have every key column, of a groupable type, and of one type on both
    sides (``PlanError`` naming the column and both types); ``what`` names the operator."""
    for side, schema in zip(_SIDES, schemas, strict=True):
        if schema is not None:
            require_key_columns(schema, on, f"{what} ({side} input)")
    left, right = schemas
    if left is None or right is None:
        return
    for key in on:
        lt, rt = left.field(key).type, right.field(key).type
        if lt != rt:
            raise PlanError(
                f"{what}: key column '{key}' is {lt} on the left but {rt} on the right; "
                "cast one side so both have the same type"
            )


class SortedSides:
    """The two key sorters of a two-input operator and their aligned output: a
    ``DuckSorter`` per side, made on its first batch (a side with no batch has no row)."""

    def __init__(self, on: Sequence[str], context: OperatorContext, operator: str) -> None:
        """``operator`` names the operator in errors (``join 'j'``)."""
        self.on = list(on)
        self.operator = operator
        self.context = context
        self.held = HeldBytes(context)
        self.sorters: list[DuckSorter | None] = [None, None]
        #: per input, the schema of its first batch
        self.schemas: list[pa.Schema | None] = [None, None]

    def add(self, table: pa.Table, input_index: int) -> None:
        """Sort ``table`` in with its input, whose first batch's schema is recorded and its
        key columns checked against the other input's."""
        if self.schemas[input_index] is None:
            self.schemas[input_index] = table.schema
            check_key_types(self.schemas, self.on, self.operator)
            self.sorters[input_index] = DuckSorter(
                self.on, table.schema, self.context, self.operator, self.held
            )
        sorter = self.sorters[input_index]
        assert sorter is not None
        sorter.add(table)

    def aligned(self, schemas: tuple[pa.Schema, pa.Schema]) -> Iterator[tuple[pa.Table, pa.Table]]:
        """The two sorted inputs as aligned chunks (``key_groups.align``)."""
        left, right = (iter(()) if s is None else s.sorted_batches() for s in self.sorters)
        pools = max(1, self.context.memory // ALIGN_SHARE)
        try:
            yield from align(left, right, self.on, schemas, pools, self.held)
        finally:
            self.close()

    def rows(self, input_index: int) -> int:
        sorter = self.sorters[input_index]
        return 0 if sorter is None else sorter.rows

    def close(self) -> None:
        """Let go of both sorters (each stops its query); idempotent."""
        for sorter in self.sorters:
            if sorter is not None:
                sorter.close()


class CoGroup(Operator):
    """``fn(left, right)`` over aligned key chunks of both inputs; see the module docstring."""

    operator_kind = "join"
    num_inputs = 2
    output_on_eof = True
    uses_memory = True

    def __init__(
        self, on: Sequence[str], fn: Callable[[pa.Table, pa.Table], Any], name: str
    ) -> None:
        if not on:
            raise PlanError(f"co_group '{name}': name at least one key column in on=")
        self.on = list(on)
        self.fn = fn
        self.name = name
        #: the input schemas the planner knew (``output_schema``); travels with the operator
        self.planned_schemas: tuple[pa.Schema | None, pa.Schema | None] = (None, None)

    def open(self, context: OperatorContext | None = None) -> None:
        self._sides = SortedSides(
            self.on,
            context or OperatorContext.unbounded(),
            f"co_group '{self.name}'",
        )

    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        self._sides.add(table, input_index)
        return ()

    def finish(self) -> Iterable[pa.Table]:
        return self._calls()

    def _calls(self) -> Iterator[pa.Table]:
        left, right = (self._schema(i) for i in range(2))
        if left is None or right is None:
            return
        for left_part, right_part in self._sides.aligned((left, right)):
            out = self.fn(left_part, right_part)
            if out is not None:
                yield as_table(
                    out, f"co_group '{self.name}'", "a pyarrow.Table, a pandas.DataFrame or None"
                )

    def _schema(self, index: int) -> pa.Schema | None:
        """Input ``index``'s schema; ``None`` only when no call needs it (the other side
        has no rows either), else ``SchemaMismatchError``."""
        schema = self._sides.schemas[index] or self.planned_schemas[index]
        if schema is not None or self._sides.rows(1 - index) == 0:
            return schema
        side = _SIDES[index]
        raise SchemaMismatchError(
            f"co_group '{self.name}': the {side} input sent this subtask no row and its "
            "columns were not known when the job was planned (an operator such as "
            f"map_batches makes them), so the function cannot be given an empty {side} "
            f"table; make the {side} input's columns known before running (map after the "
            "co_group, or start from a table that has them)"
        )

    def output_schema(self, input_schemas: Sequence[pa.Schema | None]) -> pa.Schema | None:
        check_key_types(input_schemas, self.on, f"co_group '{self.name}'")
        left, right = input_schemas
        self.planned_schemas = (left, right)
        return None

    def close(self) -> None:
        sides = getattr(self, "_sides", None)
        if sides is not None:
            sides.close()

    def input_columns(self, wanted: Columns) -> list[Columns]:
        return [None, None]
