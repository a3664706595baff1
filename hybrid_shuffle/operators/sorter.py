"""pyarrow's sorter: every row added, sorted in memory by pyarrow.

``Sorter`` is what the pyarrow sort and sort-merge join sort with where their
DuckDB operators hand an input to them (float keys, which DuckDB orders
differently: ``duck/base.py``), and co_group's side with such keys.  ``add`` keeps the batches;
``sorted_batches`` sorts them once (``sort_keys.sort_indices``: nulls last in
either direction, NaN just before them) and yields the rows in slices of at
most ``SLICE_BYTES``, each gathered on its own (``sort_keys.RowTaker``), so
the sorted copy never exists whole.

It never spills: ``operators.memory`` is reported, not enforced (bounded
memory and spilling are the DuckDB operators' job, and
co_group's DuckDB sorter is ``duck/sorter.py``).  What it holds -- the
batches, then their sort indices and one slice -- is reported through
``HeldBytes``, which sums the parts of one operator (co_group holds two
sorters) into the operator's ``peak_memory_bytes``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from hybrid_shuffle.operators.context import HeldBytes, OperatorContext
from hybrid_shuffle.operators.sort_keys import RowTaker, SortKeys, sort_indices

__all__ = ["SLICE_BYTES", "Sorter"]

#: the most bytes of one output slice
SLICE_BYTES = 8 << 20
#: never slice fewer rows than this at once
MIN_SLICE_ROWS = 256
#: batches smaller than this are gathered into one as they come, so the chunk-by-chunk
#: gather (``RowTaker``) makes few calls per slice
COALESCE_ROWS = 1 << 16


class Sorter:
    """Sorts what ``add`` gets, in memory (see the module docstring).  ``held`` (default:
    one of its own on ``context``) is where it reports the bytes it holds."""

    def __init__(
        self, sort_keys: SortKeys, context: OperatorContext, held: HeldBytes | None = None
    ):
        keys: dict[str, str] = {}
        for column, order in sort_keys:
            keys.setdefault(column, order)
        self.sort_keys = list(keys.items())
        self.held = held if held is not None else HeldBytes(context)
        self.schema: pa.Schema | None = None
        #: rows added so far
        self.rows = 0
        self._parts: list[pa.RecordBatch] = []
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self._bytes = 0

    def add(self, table: pa.Table) -> None:
        """Keep ``table``'s rows (of one schema with every other table added)."""
        if self.schema is None:
            self.schema = table.schema
        self.rows += table.num_rows
        for batch in table.to_batches():
            if batch.num_rows == 0:
                continue
            if not batch.schema.equals(self.schema):
                batch = pa.RecordBatch.from_arrays(batch.columns, schema=self.schema)
            if batch.num_rows >= COALESCE_ROWS:
                self._parts.append(batch)
            else:
                self._pending.append(batch)
                self._pending_rows += batch.num_rows
                if self._pending_rows >= COALESCE_ROWS:
                    self._flush_pending()
            self._bytes += batch.nbytes
        self.held.set(self, self._bytes)

    def _flush_pending(self) -> None:
        if len(self._pending) > 1:
            combined = pa.Table.from_batches(self._pending, schema=self.schema).combine_chunks()
            self._parts.extend(combined.to_batches())
        else:
            self._parts.extend(self._pending)
        self._pending, self._pending_rows = [], 0

    def sorted_batches(self) -> Iterator[pa.Table]:
        """Every row added, sorted, in slices of at most ``SLICE_BYTES``; call once, after
        the last ``add``.  The rows are let go of at the end (and by ``close``)."""
        try:
            if self.schema is None or self.rows == 0:
                return
            self._flush_pending()
            table = pa.Table.from_batches(self._parts, schema=self.schema)
            order = sort_indices(table, self.sort_keys)
            taker = RowTaker(table)
            row_bytes = max(1, self._bytes // max(1, self.rows))
            step = max(MIN_SLICE_ROWS, SLICE_BYTES // row_bytes)
            self.held.set(self, self._bytes + order.nbytes + min(step, self.rows) * row_bytes)
            self._parts = []
            for start in range(0, len(order), step):
                yield taker.take(order[start : start + step])
        finally:
            self.close()

    def close(self) -> None:
        """Let go of the rows (idempotent)."""
        self._parts, self._pending, self._pending_rows, self._bytes = [], [], 0, 0
        self.held.set(self, 0)
