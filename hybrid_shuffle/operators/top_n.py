"""Top n rows per key: a ``Reduction`` whose partials are rows of the input.

``TopN(keys, n, by)`` keeps, for every key, the ``n`` rows with the largest
``by`` (``ascending=True``: the smallest).  Its partial of a batch is that
batch's top n per key, and the top n of any union of partials is the top n of
the rows they came from, so it runs in the same phases as an aggregate: on raw
rows (``HashAggregate``), as a map-side combiner (``PartialAggregate``), as a
FLIP-44 local stage (``LocalAggregate``) and merging after the exchange.

**Order, ties and nulls.**  Rows compare by ``by`` first (several columns
compare left to right), nulls last in both directions, so a null never wins
over a value (NaN comes after numbers and before nulls, as pyarrow sorts).
Ties on ``by`` are broken by every other column except the keys, in the
input's column order, ascending, nulls last.  That makes the order of rows
total up to rows that are equal in every column, so the result is a function
of the rows alone: the same whatever the batches, subtasks, flushes or arrival
order, which is what lets the phases agree exactly.  The price: every column
must be orderable (no list, struct, map or union column; ``select`` them away
first) and the reduction reads every column (column pruning keeps them all).

Keys group as ``Table.group_by`` groups them (null keys form one group).  A
result holds the rows of a key together, best first; the order of keys is
unspecified.  Vectorized: one ``group_by`` for the group of every row, one
``sort_indices`` and NumPy for the rank within each group.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hybrid_shuffle.errors import PlanError
from hybrid_shuffle.operators.base import Columns
from hybrid_shuffle.operators.columns import require_columns, require_key_columns

__all__ = ["TopN"]

#: the row-number and group-id columns it adds while it works (in no user's table)
_ROW = "\x00row"
_GROUP = "\x00group"


class TopN:
    """The ``n`` best rows per key by ``by``; see the module docstring for the order."""

    def __init__(
        self,
        keys: Sequence[str],
        n: int,
        by: Sequence[str],
        name: str,
        ascending: bool = False,
    ) -> None:
        self.keys = list(keys)
        self.n = n
        self.by = list(by)
        self.name = name
        self.ascending = ascending

    @property
    def what(self) -> str:
        return f"top_n '{self.name}'"

    @property
    def columns(self) -> Columns:
        return None  # ties are broken on every column

    @property
    def partial_columns(self) -> Columns:
        return None

    def check(self, schema: pa.Schema) -> None:
        require_key_columns(schema, self.keys, self.what)
        require_columns(schema, self.by, self.what)
        for field in schema:
            if field.name in self.keys:
                continue
            t = field.type
            if pa.types.is_nested(t) or (
                pa.types.is_dictionary(t) and pa.types.is_nested(t.value_type)
            ):
                role = "by" if field.name in self.by else "tie-break"
                raise PlanError(
                    f"{self.what}: {role} column '{field.name}' is {t}, which cannot be "
                    "ordered, and top_n orders rows by every column to break ties; drop it "
                    "with select() before top_n"
                )

    def check_partials(self, schema: pa.Schema) -> None:
        self.check(schema)  # its partials are input rows

    def partial(self, table: pa.Table) -> pa.Table:
        return self.combine(table)

    def combine(self, partials: pa.Table) -> pa.Table:
        """The top ``n`` rows of each key of ``partials``, a key's rows together, best
        first."""
        if partials.num_rows == 0:
            return partials
        group = _group_ids(partials, self.keys)
        order = np.asarray(
            pc.sort_indices(self._sort_table(partials, group), options=self._options(partials))
        )
        sorted_groups = group[order]
        positions = np.arange(len(order), dtype=np.int64)
        first = np.ones(len(order), dtype=bool)
        first[1:] = sorted_groups[1:] != sorted_groups[:-1]
        starts = np.maximum.accumulate(np.where(first, positions, 0))
        keep = order[positions - starts < self.n]
        if len(keep) == partials.num_rows and np.array_equal(keep, positions):
            return partials
        return partials.take(pa.array(keep))

    def results(self, combined: pa.Table) -> pa.Table:
        return combined

    def _tie_break(self, schema: pa.Schema) -> list[str]:
        return [n for n in schema.names if n not in self.keys and n not in self.by]

    def _sort_table(self, table: pa.Table, group: np.ndarray) -> pa.Table:
        columns: dict[str, pa.Array | pa.ChunkedArray] = {_GROUP: pa.array(group)}
        for name in [*self.by, *self._tie_break(table.schema)]:
            column = table.column(name)
            if pa.types.is_dictionary(column.type):  # Arrow sorts no dictionary column
                column = column.cast(column.type.value_type)
            columns[name] = column
        return pa.table(columns)

    def _options(self, table: pa.Table) -> pc.SortOptions:
        direction = "ascending" if self.ascending else "descending"
        keys = [(_GROUP, "ascending", "at_end")]
        keys += [(b, direction, "at_end") for b in self.by]
        keys += [(c, "ascending", "at_end") for c in self._tie_break(table.schema)]
        return pc.SortOptions(sort_keys=keys)


def _group_ids(table: pa.Table, keys: Sequence[str]) -> np.ndarray:
    """Per row, the number of its key's group (as ``Table.group_by`` groups keys)."""
    rows = pa.array(np.arange(table.num_rows, dtype=np.int64))
    indexed = table.select(list(keys)).append_column(_ROW, rows)
    lists = indexed.group_by(list(keys), use_threads=False).aggregate([(_ROW, "list")])
    members = lists.column(f"{_ROW}_list").combine_chunks()
    group = np.empty(table.num_rows, dtype=np.int64)
    flat = np.asarray(pc.list_flatten(members))
    group[flat] = np.asarray(pc.list_parent_indices(members))
    return group
