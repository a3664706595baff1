"""Rows compared by sort keys, with pyarrow's own order: ``key_groups.align``'s search.

``key_groups.align`` cuts two sorted streams (co_group's sides, sorted by DuckDB in
pyarrow's order) at a common key; the cut must decide "comes before" exactly as
pyarrow's sort does, for every sortable type (nulls last, NaN before them,
strings, multi-column keys).  Nothing here writes a comparison: every decision
is a pyarrow ``sort_indices`` of a few probe rows together with a bound row
(``counts_before``, a vectorized binary search).
``RowTaker`` gathers rows chunk by chunk, because pyarrow's ``take`` of a
many-chunk table concatenates the whole table on every call.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "PROBES",
    "RowTaker",
    "SortKeys",
    "counts_before",
    "key_table",
    "sort_options",
]

#: (column, "ascending" | "descending") pairs, as pyarrow takes them; nulls always last
SortKeys = Sequence[tuple[str, str]]

#: probes per step of ``counts_before``'s search
PROBES = 64


def sort_options(sort_keys: SortKeys) -> pc.SortOptions:
    return pc.SortOptions(sort_keys=[(c, o, "at_end") for c, o in sort_keys])


def key_table(table: pa.Table | pa.RecordBatch, sort_keys: SortKeys) -> pa.Table:
    """The key columns of ``table`` as a table; dictionary columns are decoded (Arrow sorts
    no dictionary column of a table)."""
    columns = []
    for name, _ in sort_keys:
        column = table.column(name)
        if pa.types.is_dictionary(column.type):
            column = column.cast(column.type.value_type)
        columns.append(column)
    return pa.table(columns, names=[c for c, _ in sort_keys])


class RowTaker:
    """Takes rows of a table by position, chunk by chunk.

    ``Table.take`` concatenates a many-chunk table before taking, on every call; sorting
    a buffer of many batches slice by slice would copy the buffer once per slice."""

    def __init__(self, table: pa.Table) -> None:
        self.schema = table.schema
        self.batches = [b for b in table.to_batches() if b.num_rows]
        self.starts = np.cumsum([0] + [b.num_rows for b in self.batches], dtype=np.int64)

    def take(self, rows: np.ndarray) -> pa.Table:
        """The rows at positions ``rows`` (int64), in that order."""
        if len(self.batches) <= 1 or len(rows) == 0:
            if not self.batches or len(rows) == 0:
                return self.schema.empty_table()
            return pa.Table.from_batches([self.batches[0].take(rows)])
        chunk = np.searchsorted(self.starts, rows, side="right") - 1
        order: np.ndarray | None = None
        if np.any(chunk[1:] < chunk[:-1]):
            # group the rows by chunk (a radix sort of small integers), take, put back
            small = chunk.astype(np.uint16 if len(self.batches) < 1 << 16 else np.int64)
            order = np.argsort(small, kind="stable")
            rows, chunk = rows[order], chunk[order]
        counts = np.bincount(chunk, minlength=len(self.batches))
        pieces = []
        at = 0
        for c in np.flatnonzero(counts):
            n = int(counts[c])
            pieces.append(self.batches[c].take(rows[at : at + n] - self.starts[c]))
            at += n
        gathered = pa.Table.from_batches(pieces, schema=self.schema)
        if order is None:
            return gathered
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order), dtype=order.dtype)
        return gathered.combine_chunks().take(inverse)


def counts_before(
    tables: Sequence[pa.Table], bound: pa.Table, sort_keys: SortKeys, inclusive: bool
) -> list[int]:
    """How many leading rows of each table (sorted by ``sort_keys``) sort before the one
    row of ``bound`` (same columns and types); with ``inclusive``, rows equal to it too.

    A binary search of ``PROBES`` probes a table a step; a step sorts every table's probes
    with the bound row in one ``sort_indices`` -- stable, so the bound placed last comes
    after the probes equal to it, placed first before them -- and the order is exactly the
    sort's own (nulls, NaN, strings, any sortable type)."""
    options = sort_options(sort_keys)
    names = [c for c, _ in sort_keys]
    takers = [RowTaker(t) for t in tables]
    lo = np.zeros(len(tables), dtype=np.int64)
    hi = np.array([t.num_rows for t in tables], dtype=np.int64)
    while True:
        active = np.flatnonzero(lo < hi)
        if not len(active):
            return [int(x) for x in lo]
        probes: list[np.ndarray] = []
        for i in active:
            span = hi[i] - lo[i]
            if span <= PROBES:
                probes.append(np.arange(lo[i], hi[i], dtype=np.int64))
            else:  # evenly spread, the first and the last row included
                probes.append(
                    lo[i] + np.arange(PROBES, dtype=np.int64) * (span - 1) // (PROBES - 1)
                )
        taken = [takers[i].take(p) for i, p in zip(active, probes, strict=True)]
        parts = [*taken, bound] if inclusive else [bound, *taken]
        columns = [pa.concat_arrays([c for t in parts for c in t.column(n).chunks]) for n in names]
        order = pc.sort_indices(pa.RecordBatch.from_arrays(columns, names=names), options=options)
        order = order.to_numpy()
        sizes = np.array([len(p) for p in probes])
        owner = np.repeat(np.arange(len(active)), sizes)
        bound_at = len(owner) if inclusive else 0
        if not inclusive:
            owner = np.concatenate([[-1], owner])
        at = int(np.flatnonzero(order == bound_at)[0])
        # a table's probes that sort before the bound are a prefix of its probes
        before = np.bincount(owner[order[:at]], minlength=len(active))
        for j, i in enumerate(active):
            m, p = int(before[j]), probes[j]
            if hi[i] - lo[i] <= PROBES:
                lo[i] = hi[i] = lo[i] + m
            else:
                lo[i], hi[i] = (p[m - 1] + 1 if m else lo[i]), (p[m] if m < len(p) else hi[i])
