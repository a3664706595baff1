"""Hash join of two co-partitioned inputs: input 1 builds, input 0 probes.

Inputs arrive interleaved, in whatever order their producers deliver: probe
batches that come before the build side has ended are kept, then joined once
it has; probe batches that come after it ended are joined at once.  Reading
both sides as they arrive (rather than the build side first) is what keeps a
diamond-shaped job from deadlocking on pipelined credits.  Joins use pyarrow's
``Table.join``; key columns appear once (from the left side), null keys never
match, and the output row order is not defined.

A single integer-like key of small range is joined through ``DenseBuild``
(``dense_join.py``): the build side is indexed once, by the key's value, and
every probe batch is joined as it comes.  Otherwise ``Table.join`` does it,
which builds its hash table from the right table on every call, so a call
costs the build side's rows plus the probe rows.  Probe batches are then
joined in groups of at least ``PROBE_PER_BUILD`` times the build
side's rows (or ``MAX_PROBE_BYTES``, whichever comes first): rebuilding then
costs at most a fraction of the probing, where joining each 4 MiB batch on its
own rebuilt a 375,000-row table some 40 times per subtask in the main job.

A left join needs the right side's columns even where no right row came: a
join subtask whose right input sent no batch at all (an empty right side, or
no right key hashed to this subtask) still gives every left row the right
columns, all null.  The right schema comes from the first right batch, else
from the one the planner passed to ``output_schema`` (remembered for this: the
operator is pickled into its tasks after planning), else from a zero-row right
batch if the shuffle delivers one.  When none of these knows it (the right
side's schema cannot be known before running and no right batch arrived), a
left join with left rows raises ``SchemaMismatchError`` rather than emit them
without the right columns: that result would differ from pyarrow's in its
columns, or make the subtasks' outputs differ from each other.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence

import pyarrow as pa

from hybrid_shuffle.errors import PlanError, SchemaMismatchError
from hybrid_shuffle.operators.base import Columns, Operator
from hybrid_shuffle.operators.columns import require_key_columns
from hybrid_shuffle.operators.context import OperatorContext
from hybrid_shuffle.operators.dense_join import DenseBuild

__all__ = ["HashJoin"]

_JOIN_TYPES = {"inner": "inner", "left": "left outer"}
_LEFT, _RIGHT = 0, 1
#: probe rows joined per call, as a multiple of the build side's rows (see the docstring)
PROBE_PER_BUILD = 4
#: ... but never more probe bytes held than this before a call
MAX_PROBE_BYTES = 64 << 20
#: ... nor fewer rows than this (a tiny build side is no reason for tiny calls)
MIN_PROBE_ROWS = 1 << 16


class BuildSide(enum.Enum):
    """Where the build (right) input is; its schema is a separate question."""

    OPEN = "open"  # may still send batches: probe batches wait
    ENDED = "ended"  # sent everything: probe batches are joined as they come


class HashJoin(Operator):
    num_inputs = 2

    def __init__(
        self, on: Sequence[str], how: str, name: str, right_suffix: str = "_right"
    ) -> None:
        if how not in _JOIN_TYPES:
            raise PlanError(f"join '{name}': how='{how}' is not supported; use inner or left")
        self.on = list(on)
        self.how = how
        self.name = name
        self.right_suffix = right_suffix
        #: the input schemas the planner knew (``output_schema``); travels with the operator
        self.planned_schemas: tuple[pa.Schema | None, pa.Schema | None] = (None, None)

    def open(self, context: OperatorContext | None = None) -> None:
        self._build_side = BuildSide.OPEN
        self._build: list[pa.Table] = []
        #: probe batches not joined yet (all of them while the build side is open)
        self._waiting: list[pa.Table] = []
        self._waiting_rows = 0
        self._waiting_bytes = 0
        self._probe_ended = False
        #: the build table once the build side ended; None if its schema is unknown
        self._right: pa.Table | None = None
        #: the build table indexed by key, when the key qualifies (``dense_join``)
        self._dense: DenseBuild | None = None
        self._dense_for: pa.Schema | None = None
        #: per input, the schema of its first batch
        self._schemas: list[pa.Schema | None] = [None, None]

    def _check(self, schemas: Sequence[pa.Schema | None]) -> None:
        for side, schema in zip(("left", "right"), schemas, strict=True):
            if schema is None:
                continue
            require_key_columns(schema, self.on, f"join '{self.name}' ({side} input)")
        left, right = schemas
        if left is None or right is None:
            return
        for key in self.on:
            lt, rt = left.field(key).type, right.field(key).type
            if lt != rt:
                raise PlanError(
                    f"join '{self.name}': key column '{key}' is {lt} on the left but {rt} on "
                    "the right; cast one side so both have the same type"
                )

    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        if self._schemas[input_index] is None:
            self._schemas[input_index] = table.schema
            self._check(self._schemas)
        if input_index == _RIGHT:
            if table.num_rows:
                self._build.append(table)
            return ()
        self._waiting.append(table)
        self._waiting_rows += table.num_rows
        self._waiting_bytes += table.nbytes
        return self._probe_waiting(force=False)

    def _probe_waiting(self, force: bool) -> list[pa.Table]:
        """Join the waiting probe batches in one call once the build side ended and they
        are enough (see the module docstring), or when ``force``d at the end."""
        if self._build_side is BuildSide.OPEN or not self._waiting:
            return []
        build_rows = 0 if self._right is None else self._right.num_rows
        enough = max(PROBE_PER_BUILD * build_rows, MIN_PROBE_ROWS)
        if self._index_for(self._waiting[0].schema) is not None:
            enough = 0  # indexed once: no rebuilds to spread over many rows
        if not force and self._waiting_rows < enough and self._waiting_bytes < MAX_PROBE_BYTES:
            return []
        waiting = self._waiting
        self._waiting, self._waiting_rows, self._waiting_bytes = [], 0, 0
        table = waiting[0] if len(waiting) == 1 else pa.concat_tables(waiting)
        return self._probe(table)

    def end_input(self, input_index: int) -> Iterable[pa.Table]:
        if input_index == _LEFT:
            self._probe_ended = True
            return self._probe_waiting(force=True)
        if self._build_side is BuildSide.ENDED:
            return ()
        schema = self._schemas[_RIGHT] or self.planned_schemas[_RIGHT]
        if self._build:
            self._right = pa.concat_tables(self._build).combine_chunks()
        elif schema is not None:
            self._right = schema.empty_table()
        self._build = []
        self._build_side = BuildSide.ENDED
        return self._probe_waiting(force=self._probe_ended)

    def _probe(self, table: pa.Table) -> list[pa.Table]:
        if self._right is not None:
            dense = self._index_for(table.schema)
            if dense is not None:
                return [dense.probe(table, self.on[0])]
            return [self._pyarrow_join(table, self._right)]
        # no right schema anywhere (see the module docstring): nothing can match
        if self.how == "inner" or table.num_rows == 0:
            return []
        raise SchemaMismatchError(
            f"join '{self.name}': the right input sent this subtask no row and its columns "
            "were not known when the job was planned (an operator such as map_batches makes "
            "them), so the left rows cannot be given the right side's columns; compute the "
            "right side's columns before from_arrow, or join first and map after"
        )

    def _index_for(self, left: pa.Schema) -> DenseBuild | None:
        """The build side indexed by key for probe batches of schema ``left``, if the key
        qualifies (``dense_join``); made once, when the build side has ended."""
        right = self._right
        if right is None or len(self.on) != 1 or right.num_rows == 0:
            return None
        if self._dense_for != left:
            self._dense_for = left
            empty = self._pyarrow_join(left.empty_table(), right.schema.empty_table())
            self._dense = DenseBuild.create(
                right, self.on[0], self.how, empty.schema, left, self.right_suffix
            )
        return self._dense

    def _pyarrow_join(self, left: pa.Table, right: pa.Table) -> pa.Table:
        return left.join(
            right,
            keys=self.on,
            join_type=_JOIN_TYPES[self.how],
            right_suffix=self.right_suffix,
            use_threads=False,
        )

    def finish(self) -> Iterable[pa.Table]:
        # every input ended, so both did here too (end_input is idempotent)
        return [*self.end_input(_RIGHT), *self.end_input(_LEFT)]

    def input_columns(self, wanted: Columns) -> list[Columns]:
        """Both sides keep the keys and every wanted name, and the name a wanted
        ``<name><right_suffix>`` came from: a column both sides have is then kept or
        dropped on both, so the suffix pyarrow gives a collision is never lost."""
        if wanted is None:
            return [None, None]
        suffix = self.right_suffix
        stripped = {c[: -len(suffix)] for c in wanted if suffix and c.endswith(suffix)}
        need = frozenset(self.on) | wanted | stripped
        return [need, need]

    def output_schema(self, input_schemas: Sequence[pa.Schema | None]) -> pa.Schema | None:
        self._check(input_schemas)
        left, right = input_schemas
        self.planned_schemas = (left, right)
        if left is None or right is None:
            return None
        return self._pyarrow_join(left.empty_table(), right.empty_table()).schema
