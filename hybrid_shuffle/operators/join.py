"""Hash and sort-merge join as the planner sees them: the parameters and the planning
answers of a join of two co-partitioned inputs (input 0 the left, input 1 the right).

A task runs either as the DuckDB join (``duck/join.py``, swapped in by
``duck.operators.on_duckdb``): both give pyarrow's ``Table.join`` of the two inputs for
every ``how`` of ``join_types.JOIN_TYPES``, in pyarrow's columns (key columns once, a
right column whose name the left has gets ``right_suffix``; null keys never match).
They differ in what they promise the planner:

- ``HashJoin`` builds on the right input and probes with the left as it arrives: an
  inner, left, semi or anti join answers probe batches once the build side ended,
  so only its right input is read whole (a broadcast join's left input is not
  exchanged at all: ``Stream._broadcast_build``).
- ``SortMergeJoin`` (Spark's and Flink's sort-merge join) emits only once both inputs
  ended (``output_on_eof``), so the planner makes both of its inputs batch.

A side that sent a subtask no batch counts as an empty table of its columns: those
the planner knew (``planned_schemas``, remembered by ``output_schema``: the operator
is pickled into its tasks after planning).  When nobody knows them and rows of the
other side would need them, the join raises ``SchemaMismatchError``.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from hybrid_shuffle.errors import PlanError
from hybrid_shuffle.operators.base import Columns, PlannedOperator
from hybrid_shuffle.operators.co_group import check_key_types
from hybrid_shuffle.operators.join_types import check_how, pyarrow_output

__all__ = ["HashJoin", "Join", "SortMergeJoin"]


class Join(PlannedOperator):
    """Join on ``on``; ``how`` is one of ``join_types.JOIN_TYPES`` (see the module
    docstring)."""

    operator_kind = "join"
    num_inputs = 2
    uses_memory = True

    def __init__(
        self, on: Sequence[str], how: str, name: str, right_suffix: str = "_right"
    ) -> None:
        self.join_type = check_how(how, name)
        self.on = list(on)
        self.how = how
        self.name = name
        self.right_suffix = right_suffix
        #: the input schemas the planner knew (``output_schema``); travels with the operator
        self.planned_schemas: tuple[pa.Schema | None, pa.Schema | None] = (None, None)

    def partition_keys(self, keys: tuple[str, ...]) -> tuple[str, ...] | None:
        # a joined row has its key values (once, whichever side it came from)
        return keys if set(keys) <= set(self.on) else None

    def input_columns(self, wanted: Columns) -> list[Columns]:
        """Both sides keep the keys and every wanted name, and the name a wanted
        ``<name><right_suffix>`` came from: a column both sides have is then kept or
        dropped on both, so the suffix pyarrow gives a collision is never lost.  A semi
        or anti join reads only the keys of its right side."""
        keys = frozenset(self.on)
        if wanted is None:
            return [None, keys if self.how in ("semi", "anti") else None]
        suffix = self.right_suffix
        stripped = {c[: -len(suffix)] for c in wanted if suffix and c.endswith(suffix)}
        need = keys | wanted | stripped
        return [need, keys if self.how in ("semi", "anti") else need]

    def output_schema(self, input_schemas: Sequence[pa.Schema | None]) -> pa.Schema | None:
        check_key_types(input_schemas, self.on, f"join '{self.name}'")
        left, right = input_schemas
        self.planned_schemas = (left, right)
        if left is None or right is None:
            return None
        return pyarrow_output(left, right, self.on, self.how, self.right_suffix)


class HashJoin(Join):
    """The hash join: the right input builds, the left probes (see the module docstring)."""


class SortMergeJoin(Join):
    """The sort-merge join: output only once both inputs ended (see the module
    docstring)."""

    output_on_eof = True

    def __init__(
        self, on: Sequence[str], how: str, name: str, right_suffix: str = "_right"
    ) -> None:
        super().__init__(on, how, name, right_suffix)
        if not on:
            raise PlanError(f"join '{name}': name at least one key column in on=")

    def input_columns(self, wanted: Columns) -> list[Columns]:
        """As the hash join's, but a semi or anti join keeps every left column asked for
        (and the keys) when any is named."""
        keys = frozenset(self.on)
        if self.how in ("semi", "anti"):
            return [None if wanted is None else keys | wanted, keys]
        return super().input_columns(wanted)
