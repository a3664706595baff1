"""Hash join of two co-partitioned inputs: input 1 builds, input 0 probes.

Inputs arrive interleaved, in whatever order their producers deliver: probe
batches that come before the build side has ended are kept, then joined once
it has; probe batches that come after it ended are joined at once.  Reading
both sides as they arrive (rather than the build side first) is what keeps a
diamond-shaped job from deadlocking on pipelined credits.  The ended build side
is a ``join_build.BuildTable``: how it joins a probe batch (by a key index or
pyarrow's ``Table.join``), the join types (``join_types.JOIN_TYPES``) and the
columns out (pyarrow's join schema for ``how``) are described there.  A right
or full join's build rows that no probe row matched come out once both inputs
ended.  The output row order is not defined.

``Table.join`` builds its hash table from the right table on every call, so a
call costs the build side's rows plus the probe rows.  Unless the build side is
indexed by key, probe batches are therefore joined in groups of at least
``PROBE_PER_BUILD`` times the build side's rows (or ``MAX_PROBE_BYTES``,
whichever comes first): rebuilding then costs at most a fraction of the
probing, where joining each 4 MiB batch on its own rebuilt a 375,000-row table
some 40 times per subtask in the main job.

Memory (``OperatorContext``): the operator holds the build side and the probe
batches waiting for it, in memory, and reports them (``peak_memory_bytes``); it
never spills.  A task runs the join on DuckDB and this operator only on the inputs the
DuckDB join hands back to it: ``operators.memory`` is not enforced here (it only
sizes the probe groups and the key index): bounded memory and spilling are the
DuckDB join's job (``duck/join.py``, which spills within the task's
``memory_limit``).  The held figure is the Arrow data the operator references
(build side, its index, waiting probe rows), not pyarrow's own hash table inside a
``Table.join`` call nor the output handed on.

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
columns, or make the subtasks' outputs differ from each other.  A full join
does the same; a right or full join whose left schema is unknown the same way
raises it for the build rows it would have to give left columns.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterable, Sequence

import pyarrow as pa

from hybrid_shuffle.operators.base import Columns, Operator
from hybrid_shuffle.operators.co_group import check_key_types
from hybrid_shuffle.operators.context import OperatorContext
from hybrid_shuffle.operators.dense_join import DenseBuild
from hybrid_shuffle.operators.join_build import BuildTable, JoinSpec
from hybrid_shuffle.operators.join_types import check_how

__all__ = ["HashJoin"]

_LEFT, _RIGHT = 0, 1
#: probe rows joined per call, as a multiple of the build side's rows (see the docstring)
PROBE_PER_BUILD = 4
#: ... but never more probe bytes held than this before a call
MAX_PROBE_BYTES = 64 << 20
#: ... nor fewer rows than this (a tiny build side is no reason for tiny calls)
MIN_PROBE_ROWS = 1 << 16
#: the least probe bytes gathered for one call: 1/this of the memory
_PROBE_SHARE = 8


class BuildSide(enum.Enum):
    """Where the build (right) input is; its schema is a separate question."""

    OPEN = "open"  # may still send batches: probe batches wait
    ENDED = "ended"  # sent everything: probe batches are joined as they come


class HashJoin(Operator):
    """Join on ``on``; ``how`` is one of ``join_types.JOIN_TYPES``.  See the module
    docstring for arrival order, the fast paths and the memory bound."""

    operator_kind = "join"
    num_inputs = 2
    uses_memory = True

    def __init__(
        self, on: Sequence[str], how: str, name: str, right_suffix: str = "_right"
    ) -> None:
        check_how(how, name)
        self.on = list(on)
        self.how = how
        self.name = name
        self.right_suffix = right_suffix
        #: the input schemas the planner knew (``output_schema``); travels with the operator
        self.planned_schemas: tuple[pa.Schema | None, pa.Schema | None] = (None, None)

    def open(self, context: OperatorContext | None = None) -> None:
        self._context = context if context is not None else OperatorContext.unbounded()
        self._memory = self._context.memory
        self._build_side = BuildSide.OPEN
        self._build: list[pa.Table] = []
        self._build_bytes = 0
        #: probe batches not joined yet (all of them while the build side is open)
        self._waiting: list[pa.Table] = []
        self._waiting_rows = 0
        self._waiting_bytes = 0
        self._probe_ended = False
        #: the build side in memory once it ended (its table None if its schema is unknown)
        self._built: BuildTable | None = None
        #: the output due once both inputs ended was handed out
        self._tail_given = False
        #: per input, the schema of its first batch
        self._schemas: list[pa.Schema | None] = [None, None]
        #: the join as its build tables see it, and the output layout per pair of schemas
        self._spec = self._join_spec()

    @property
    def _dense(self) -> DenseBuild | None:
        """The build side's key index, if the in-memory build side has one."""
        return None if self._built is None else self._built.dense

    def _join_spec(self) -> JoinSpec:
        """What the build side needs of this join (made in ``open``: layouts are cached)."""
        return JoinSpec(self.on, self.how, self.name, self.right_suffix)

    # -- arrival --------------------------------------------------------------------------

    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        if self._schemas[input_index] is None:
            self._schemas[input_index] = table.schema
            check_key_types(self._schemas, self.on, f"join '{self.name}'")
        if input_index == _RIGHT:
            if table.num_rows:
                self._build.append(table)
                self._build_bytes += table.nbytes
            self._context.hold(self._held())
            return ()
        self._waiting.append(table)
        self._waiting_rows += table.num_rows
        self._waiting_bytes += table.nbytes
        self._context.hold(self._held())
        return self._probe_waiting(force=False)

    def _held(self) -> int:
        """The bytes of Arrow data the operator references now (see the module docstring)."""
        held = self._build_bytes + self._waiting_bytes
        if self._built is not None:
            held += self._built.nbytes
        return held

    def _probe_waiting(self, force: bool) -> list[pa.Table]:
        """Join the waiting probe batches in one call once the build side ended and they
        are enough (see the module docstring), or when ``force``d at the end."""
        built = self._built
        if self._build_side is BuildSide.OPEN or not self._waiting or built is None:
            return []
        if not force:
            enough = max(PROBE_PER_BUILD * built.rows, MIN_PROBE_ROWS)
            if built.indexed(self._waiting[0].schema):
                enough = 0  # indexed once: no rebuilds to spread over many rows
            if self._waiting_rows < enough and self._waiting_bytes < self._probe_room(built):
                return []
        self._context.hold(self._held())
        waiting = self._waiting
        self._waiting, self._waiting_rows, self._waiting_bytes = [], 0, 0
        table = waiting[0] if len(waiting) == 1 else pa.concat_tables(waiting)
        return built.probe(table)

    def _probe_room(self, built: BuildTable) -> int:
        """The most probe bytes to gather for one call next to ``built``."""
        spare = max(self._memory - built.nbytes, self._memory // _PROBE_SHARE)
        return min(MAX_PROBE_BYTES, spare)

    # -- end of input ---------------------------------------------------------------------

    def end_input(self, input_index: int) -> Iterable[pa.Table]:
        if input_index == _LEFT:
            if self._probe_ended:
                return ()
            self._probe_ended = True
            out = self._probe_waiting(force=True)
        else:
            if self._build_side is BuildSide.ENDED:
                return ()
            self._build_side = BuildSide.ENDED
            self._end_build()
            out = self._probe_waiting(force=self._probe_ended)
        if self._probe_ended and self._build_side is BuildSide.ENDED and not self._tail_given:
            self._tail_given = True
            assert self._built is not None
            return itertools.chain(out, self._built.unmatched(self._left_schema()))
        return out

    def _end_build(self) -> None:
        """The build side ended: make it the build table."""
        table = pa.concat_tables(self._build) if self._build else self._empty_right()
        self._build, self._build_bytes = [], 0
        self._built = self._new_build(table, self._waiting_bytes)

    def _empty_right(self) -> pa.Table | None:
        schema = self._schemas[_RIGHT] or self.planned_schemas[_RIGHT]
        return None if schema is None else schema.empty_table()

    def _left_schema(self) -> pa.Schema | None:
        return self._schemas[_LEFT] or self.planned_schemas[_LEFT]

    def _new_build(self, table: pa.Table | None, held_besides: int) -> BuildTable:
        # one chunk per column makes every probe's take faster, if the copy fits
        if (
            table is not None
            and table.num_columns
            and table.column(0).num_chunks > 1
            and self._context.fits(2 * table.nbytes + held_besides)
        ):
            table = table.combine_chunks()
        return BuildTable(self._spec, table, self._memory)

    def finish(self) -> Iterable[pa.Table]:
        # every input ended, so both did here too (end_input is idempotent)
        return itertools.chain(self.end_input(_RIGHT), self.end_input(_LEFT))

    # -- schemas --------------------------------------------------------------------------

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
        return self._join_spec().join(left.empty_table(), right.empty_table()).schema
