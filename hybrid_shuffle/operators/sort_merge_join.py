"""Sort-merge join of two co-partitioned inputs.

A task runs the DuckDB join ``duck/join.py`` instead, within the task's
``memory_limit``, spilling, and this operator only on the inputs it hands over.  Both
inputs are sorted by the key columns (``co_group.SortedSides``), then walked together in
aligned chunks (``key_groups.align``: every key's rows of both sides in one chunk, many
keys a chunk), and each chunk is joined by pyarrow's ``Table.join``.  A chunk holds
every row of its keys on both sides, so joining chunk by chunk gives what one join of
the whole inputs gives, for every ``how`` -- outer joins included, since a key on one
side only is a chunk whose other part is empty.  Inputs arrive interleaved in any order;
the output comes after both ended (``output_on_eof``), in no defined row order.

``how`` is one of ``join_types.JOIN_TYPES`` (inner, left, right, full, semi,
anti).  As with pyarrow: key columns appear once (coalesced), a right column
whose name the left has gets ``right_suffix``, and null keys never match --
nulls sort together into one chunk, where pyarrow's join leaves them unmatched
on both sides (outer joins keep them with the other side's columns null).

The output schema is pyarrow's join of the two empty inputs; every output
table has exactly that schema.  A side that sent this subtask no batch counts
as an empty table of its columns: those of its first batch, else those the
planner knew (remembered by ``output_schema``: the operator is pickled into
its tasks after planning).  When neither is known and the join has rows to
give that side's columns to (a left or full join with left rows, say),
``SchemaMismatchError``; an anti join needs no right column, so it emits the
left rows as they are.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa

from hybrid_shuffle.errors import PlanError, SchemaMismatchError
from hybrid_shuffle.operators.base import Columns, Operator
from hybrid_shuffle.operators.co_group import SortedSides, check_key_types
from hybrid_shuffle.operators.context import OperatorContext
from hybrid_shuffle.operators.join_types import check_how

__all__ = ["SortMergeJoin"]

_LEFT, _RIGHT = 0, 1
_SIDES = ("left", "right")
#: per ``how``: (a chunk needs left rows, needs right rows) to give any output row
_NEEDS = {
    "inner": (True, True),
    "semi": (True, True),
    "left": (True, False),
    "anti": (True, False),
    "right": (False, True),
    "full": (False, False),
}
#: per ``how``: the sides whose unmatched rows are output (with the other side's columns)
_KEEPS_UNMATCHED = {
    "inner": (),
    "semi": (),
    "left": (_LEFT,),
    "anti": (),
    "right": (_RIGHT,),
    "full": (_LEFT, _RIGHT),
}


class SortMergeJoin(Operator):
    """Joins its two inputs by sorting both; see the module docstring."""

    operator_kind = "join"
    num_inputs = 2
    output_on_eof = True
    uses_memory = True

    def __init__(
        self, on: Sequence[str], how: str, name: str, right_suffix: str = "_right"
    ) -> None:
        self.join_type = check_how(how, name)
        if not on:
            raise PlanError(f"join '{name}': name at least one key column in on=")
        self.on = list(on)
        self.how = how
        self.name = name
        self.right_suffix = right_suffix
        #: the input schemas the planner knew (``output_schema``); travels with the operator
        self.planned_schemas: tuple[pa.Schema | None, pa.Schema | None] = (None, None)

    def open(self, context: OperatorContext | None = None) -> None:
        self._sides = SortedSides(
            self.on, context or OperatorContext.unbounded(), f"join '{self.name}'"
        )

    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        self._sides.add(table, input_index)
        return ()

    def finish(self) -> Iterable[pa.Table]:
        return self._joined()

    def _joined(self) -> Iterator[pa.Table]:
        schemas = [self._sides.schemas[i] or self.planned_schemas[i] for i in (_LEFT, _RIGHT)]
        left, right = schemas
        if left is None or right is None:
            yield from self._unknown_side(schemas)
            return
        schema = self._join(left.empty_table(), right.empty_table()).schema
        needs_left, needs_right = _NEEDS[self.how]
        for left_part, right_part in self._sides.aligned((left, right)):
            if (needs_left and not left_part.num_rows) or (needs_right and not right_part.num_rows):
                continue
            joined = self._join(left_part, right_part)
            if joined.num_rows:
                yield _conform(joined, schema)

    def _unknown_side(self, schemas: list[pa.Schema | None]) -> Iterator[pa.Table]:
        """The output when a side's schema is unknown (it sent no batch, so no row): none,
        the left rows as they are (anti), or ``SchemaMismatchError`` when rows of the
        other side would need its columns."""
        try:
            for index in (_LEFT, _RIGHT):
                other = 1 - index
                if schemas[index] is not None or not self._sides.rows(other):
                    continue
                if self.how == "anti" and index == _RIGHT:
                    yield from self._sides.sorters[_LEFT].sorted_batches()
                    return
                if other in _KEEPS_UNMATCHED[self.how]:
                    side = _SIDES[index]
                    raise SchemaMismatchError(
                        f"join '{self.name}': the {side} input sent this subtask no row and "
                        "its columns were not known when the job was planned (an operator "
                        f"such as map_batches makes them), so the {_SIDES[other]} rows cannot "
                        f"be given the {side} side's columns; compute the {side} side's "
                        "columns before from_arrow, or join first and map after"
                    )
        finally:
            for sorter in self._sides.sorters:
                sorter.close()

    def _join(self, left: pa.Table, right: pa.Table) -> pa.Table:
        return left.join(
            right,
            keys=self.on,
            join_type=self.join_type,
            right_suffix=self.right_suffix,
            use_threads=False,
        )

    def output_schema(self, input_schemas: Sequence[pa.Schema | None]) -> pa.Schema | None:
        check_key_types(input_schemas, self.on, f"join '{self.name}'")
        left, right = input_schemas
        self.planned_schemas = (left, right)
        if left is None or right is None:
            return None
        return self._join(left.empty_table(), right.empty_table()).schema

    def partition_keys(self, keys: tuple[str, ...]) -> tuple[str, ...] | None:
        # a joined row has its key values (once, whichever side it came from)
        return keys if set(keys) <= set(self.on) else None

    def input_columns(self, wanted: Columns) -> list[Columns]:
        """As the hash join's: both sides keep the keys and every wanted name, and the name
        a wanted ``<name><right_suffix>`` came from (a column both sides have is kept or
        dropped on both, so the suffix pyarrow gives a collision is never lost); a semi or
        anti join reads only the keys of the right side."""
        keys = frozenset(self.on)
        if self.how in ("semi", "anti"):
            return [None if wanted is None else keys | wanted, keys]
        if wanted is None:
            return [None, None]
        suffix = self.right_suffix
        stripped = {c[: -len(suffix)] for c in wanted if suffix and c.endswith(suffix)}
        need = keys | wanted | stripped
        return [need, need]


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with exactly ``schema`` (the planned output): reordered and cast if a
    chunk's join came out different, the schema's metadata in any case."""
    if table.schema.equals(schema, check_metadata=True):
        return table
    if table.schema.names == schema.names and table.schema.types == schema.types:
        return table.cast(schema)
    return table.select(schema.names).cast(schema)
