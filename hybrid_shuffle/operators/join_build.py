"""The build side of a hash join (``join.HashJoin``): one build table, ready to be probed.

A ``BuildTable`` answers probe batches of the left input with output rows.  A
single integer-like key of small range is joined through ``DenseBuild``
(``dense_join.py``): the build side is indexed once, by the key's value, and
every probe batch is joined against the index.  The index is made only if it
fits in half the memory the build side leaves.  Otherwise ``Table.join`` does it, which
builds its hash table from the right table on every call (``HashJoin`` groups
probe batches to spread that cost).

Join types (``join_types.JOIN_TYPES``): ``inner``, ``left``, ``semi`` and
``anti`` are answered probe batch by probe batch.  ``right`` and ``full`` probe
as ``inner`` and ``left`` do while marking which build rows matched (a NumPy
bool per build row; the pyarrow path carries a row-id column through the join),
and ``unmatched`` gives the build rows no probe row matched, once the caller has
probed with every probe row, left columns null (a full join's key taken from the
build row).  Key columns appear once (from the left side, except in a right
join: from the right side, as pyarrow does), null keys never match, and every
table out has the schema pyarrow's join of the two (empty) inputs has for that
``how`` (``JoinLayout``).

A build table whose right schema is unknown (``table`` None: no right batch came
and the planner did not know the columns, see ``join``) matches nothing: an
inner, semi or right join gives no row, an anti join the probe rows as they
are, and a left or full join with probe rows raises ``SchemaMismatchError``
rather than emit them without the right columns.  Unmatched build rows whose
left schema is unknown raise it the same way.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hybrid_shuffle.errors import SchemaMismatchError
from hybrid_shuffle.operators.dense_join import DenseBuild
from hybrid_shuffle.operators.join_types import JOIN_TYPES

__all__ = ["TRACKED", "BuildTable", "JoinLayout", "JoinSpec"]

#: the join each probe batch gets; right and full add the unmatched build rows at the end
_PROBE_HOW = {
    "inner": "inner",
    "left": "left",
    "right": "inner",
    "full": "left",
    "semi": "semi",
    "anti": "anti",
}
#: the joins that emit the build rows no probe row matched
TRACKED = ("right", "full")
#: the build row number a tracked join carries through ``Table.join`` (no user's column)
_ROW_ID = "\x00build_row"
#: unmatched build rows are emitted in tables of at most this many rows
_UNMATCHED_ROWS = 1 << 17


class JoinSpec:
    """What a build table needs to know of its join: the keys, ``how`` (checked by the
    operator), the name errors give and the suffix of colliding right columns; and the
    ``JoinLayout`` of every pair of input schemas seen (made once per pair)."""

    def __init__(self, on: Sequence[str], how: str, name: str, right_suffix: str) -> None:
        self.on = list(on)
        self.how = how
        self.name = name
        self.right_suffix = right_suffix
        self._layouts: dict[tuple[pa.Schema, pa.Schema], JoinLayout] = {}

    def join(self, left: pa.Table, right: pa.Table, how: str | None = None) -> pa.Table:
        """pyarrow's join of ``left`` and ``right``, of ``how`` (default: the join's own)."""
        return left.join(
            right,
            keys=self.on,
            join_type=JOIN_TYPES[how or self.how],
            right_suffix=self.right_suffix,
            use_threads=False,
        )

    def layout(self, left: pa.Schema, right: pa.Schema) -> JoinLayout:
        layout = self._layouts.get((left, right))
        if layout is None:
            layout = self._layouts[(left, right)] = JoinLayout(self, left, right)
        return layout


class JoinLayout:
    """Where each output column comes from, for one pair of input schemas.

    ``output`` is pyarrow's join schema for ``how``; ``probe_schema`` that of the join a
    probe batch gets (``_PROBE_HOW``).  ``from_probe`` maps a probe join's columns (the
    left ones, then the right non-key ones) to the output's: the same for every ``how``
    but ``right``, whose output has the left non-key columns, then all right ones.
    ``from_build`` says, per output column, which build column an unmatched build row
    fills it from (``None``: null).
    """

    def __init__(self, spec: JoinSpec, left: pa.Schema, right: pa.Schema) -> None:
        self.output = spec.join(left.empty_table(), right.empty_table()).schema
        probe_how = _PROBE_HOW[spec.how]
        self.probe_schema = spec.join(left.empty_table(), right.empty_table(), probe_how).schema
        keys = set(spec.on)
        payload = [j for j, f in enumerate(right) if f.name not in keys]
        left_payload = [i for i, f in enumerate(left) if f.name not in keys]
        self.from_probe: list[int] | None = None
        self.from_build: list[int | None] = []
        if spec.how == "right":
            self.from_probe = [
                *left_payload,
                *(
                    left.get_field_index(f.name) if f.name in keys else len(left) + payload.index(j)
                    for j, f in enumerate(right)
                ),
            ]
            self.from_build = [*([None] * len(left_payload)), *range(len(right))]
        elif spec.how == "full":
            self.from_build = [
                *(right.get_field_index(f.name) if f.name in keys else None for f in left),
                *payload,
            ]
        probe_types = self.probe_schema.types
        from_probe = self.from_probe or range(len(probe_types))
        if [probe_types[i] for i in from_probe] != self.output.types or (
            self.from_build and len(self.from_build) != len(self.output)
        ):
            raise RuntimeError(
                f"join '{spec.name}': pyarrow's {spec.how} join of {left} and {right} has "
                f"columns this operator does not know how to assemble: {self.output}"
            )

    def from_probe_join(self, joined: pa.Table) -> pa.Table:
        """A probe join's output (``probe_schema``) as output rows."""
        columns = joined.columns
        if self.from_probe is not None:
            columns = [columns[i] for i in self.from_probe]
        elif joined.schema == self.output:
            return joined
        return pa.Table.from_arrays(columns, schema=self.output)

    def unmatched(self, build_rows: pa.Table) -> pa.Table:
        """Build rows no probe row matched, as output rows (left columns null)."""
        n = build_rows.num_rows
        columns = [
            pa.nulls(n, f.type) if j is None else build_rows.column(j)
            for f, j in zip(self.output, self.from_build, strict=True)
        ]
        return pa.Table.from_arrays(columns, schema=self.output)


class BuildTable:
    """One build table ready to be probed: indexed by key when the key qualifies
    (``DenseBuild``), else joined with ``Table.join``; for a right or full join it keeps
    which of its rows matched.  ``table`` is None when the right schema is unknown;
    ``memory`` is the operator's, half of what the table leaves of it may go to the
    index."""

    def __init__(self, spec: JoinSpec, table: pa.Table | None, memory: int) -> None:
        self.spec = spec
        self.table = table
        self.memory = memory
        self.rows = 0 if table is None else table.num_rows
        self.matched = (
            np.zeros(self.rows, dtype=bool) if spec.how in TRACKED and table is not None else None
        )
        self.dense: DenseBuild | None = None
        self._dense_for: pa.Schema | None = None
        #: the table with its row ids (a tracked join through ``Table.join``)
        self._keyed: pa.Table | None = None

    @property
    def nbytes(self) -> int:
        """The Arrow and NumPy data held: the table, its index, matched flags, row ids."""
        held = 0 if self.table is None else self.table.nbytes
        if self.matched is not None:
            held += self.matched.nbytes
        if self.dense is not None:
            held += self.dense.nbytes
        if self._keyed is not None:
            held += 8 * self.rows
        return held

    def indexed(self, left: pa.Schema) -> bool:
        """Whether probe batches of schema ``left`` go through the key index (made on the
        first ask, once per left schema)."""
        table, spec = self.table, self.spec
        if table is None or len(spec.on) != 1 or table.num_rows == 0:
            return False
        if self._dense_for != left:
            self._dense_for = left
            self.dense = None
            self.dense = DenseBuild.create(
                table,
                spec.on[0],
                _PROBE_HOW[spec.how],
                spec.layout(left, table.schema).probe_schema,
                left,
                spec.right_suffix,
                self.matched,
                # half of what the build side leaves (the rest: probe rows)
                max(self.memory - self.nbytes, 0) // 2,
            )
        return self.dense is not None

    def probe(self, left: pa.Table) -> list[pa.Table]:
        """``left`` joined with the build side, as output rows."""
        spec, table = self.spec, self.table
        if table is None:
            return self._without_right(left)
        layout = spec.layout(left.schema, table.schema)
        probe_how = _PROBE_HOW[spec.how]
        if self.indexed(left.schema):
            assert self.dense is not None
            joined = self.dense.probe(left, spec.on[0])
        elif self.matched is None:
            joined = spec.join(left, table, probe_how)
        else:
            if self._keyed is None:
                ids = pa.array(np.arange(self.rows, dtype=np.int64))
                self._keyed = table.append_column(_ROW_ID, ids)
            joined = spec.join(left, self._keyed, probe_how)
            last = joined.num_columns - 1
            self.matched[pc.drop_null(joined.column(last)).to_numpy()] = True
            joined = joined.remove_column(last)
        return [layout.from_probe_join(joined)]

    def unmatched(self, left: pa.Schema | None) -> Iterator[pa.Table]:
        """The build rows no probe row matched (right and full joins), as output rows;
        ``left`` is the left schema, None if unknown."""
        if self.matched is None or self.table is None:
            return
        rows = np.flatnonzero(~self.matched)
        if rows.size == 0:
            return
        if left is None:
            raise self._without_left()
        layout = self.spec.layout(left, self.table.schema)
        for start in range(0, rows.size, _UNMATCHED_ROWS):
            taken = self.table.take(pa.array(rows[start : start + _UNMATCHED_ROWS]))
            yield layout.unmatched(taken)

    def _without_right(self, left: pa.Table) -> list[pa.Table]:
        """``left`` probed when no right schema is known anywhere (see the module
        docstring): nothing can match."""
        how = self.spec.how
        if how in ("inner", "semi", "right") or left.num_rows == 0:
            return []
        if how == "anti":
            return [left]
        raise SchemaMismatchError(
            f"join '{self.spec.name}': the right input sent this subtask no row and its "
            "columns were not known when the job was planned (an operator such as "
            "map_batches makes them), so the left rows cannot be given the right side's "
            "columns; compute the right side's columns before from_arrow, or join first and "
            "map after"
        )

    def _without_left(self) -> SchemaMismatchError:
        return SchemaMismatchError(
            f"join '{self.spec.name}': the left input sent this subtask no row and its "
            "columns were not known when the job was planned (an operator such as "
            f"map_batches makes them), so the right rows of this {self.spec.how} join cannot "
            "be given the left side's columns; compute the left side's columns before "
            "from_arrow, or join first and map after"
        )
