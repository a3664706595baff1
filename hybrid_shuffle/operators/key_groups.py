"""Aligning two key-sorted streams into chunks that hold whole key groups on both sides.

co_group sorts both inputs by the key columns (ascending, nulls last, in
pyarrow's order: DuckDB's ``ORDER BY`` in ``duck/sorter.py``) and then needs, a
piece at a time,
every row of some set of keys from *both* sides at once.  ``align`` cuts the
two sorted streams into chunks ``(left_part, right_part)`` such that every key
value appears in exactly one chunk, on both sides; either part may have no
rows (it then has its side's schema).

Each side keeps a *pool*: the sorted rows read but not yet emitted.  Pools are
refilled by whole batches until they hold ``max_bytes`` together (so a chunk
holds many keys, not one); then the *bound* is the smaller of the last keys of
the sides that may still send rows, and the rows strictly below it are
emitted from both pools.  That is correct because every row a side has not
sent yet is >= its pool's last key >= the bound; the bound key's group waits
for more input (the side whose last key is the bound is read next), unless
every side has ended, when the pools are emitted whole.

Keys compare as the sort orders them (``sort_keys.counts_before`` searches
a pool with pyarrow's own sort): null equals null and NaN equals NaN, so the
null keys of both sides end in one chunk, as pyarrow's ``group_by`` puts them
in one group.  Key columns of the two sides must have the same types (the
operators check it before running).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from hybrid_shuffle.operators.context import HeldBytes
from hybrid_shuffle.operators.sort_keys import SortKeys, counts_before, key_table, sort_options

__all__ = ["align"]


class _Side:
    """One input's sorted stream and its pool of rows read but not emitted."""

    def __init__(self, tables: Iterable[pa.Table], schema: pa.Schema) -> None:
        self._tables = iter(tables)
        self.schema = schema
        self.pool: list[pa.Table] = []
        self.rows = 0
        self.bytes = 0
        #: the stream has no more tables
        self.ended = False

    def read(self) -> None:
        """Add the stream's next table with rows to the pool, or mark the stream ended."""
        for table in self._tables:
            if table.num_rows:
                self.pool.append(table)
                self.rows += table.num_rows
                self.bytes += table.nbytes
                return
        self.ended = True

    def last_key(self, sort_keys: SortKeys) -> pa.Table:
        last = self.pool[-1]
        return key_table(last.slice(last.num_rows - 1, 1), sort_keys)

    def keys(self, sort_keys: SortKeys) -> pa.Table:
        return key_table(self.table(), sort_keys)

    def table(self) -> pa.Table:
        """The pool as one table (its tables' chunks, no copy)."""
        if not self.pool:
            return self.schema.empty_table()
        if len(self.pool) == 1:
            return self.pool[0]
        return pa.concat_tables(self.pool)

    def take_front(self, rows: int) -> pa.Table:
        """Remove the first ``rows`` rows of the pool and return them."""
        whole = self.table()
        front, rest = whole.slice(0, rows), whole.slice(rows)
        self.pool = [rest] if rest.num_rows else []
        self.rows = rest.num_rows
        self.bytes = rest.nbytes
        return front


def align(
    left: Iterable[pa.Table],
    right: Iterable[pa.Table],
    on: Sequence[str],
    schemas: tuple[pa.Schema, pa.Schema],
    max_bytes: int,
    held: HeldBytes | None = None,
) -> Iterator[tuple[pa.Table, pa.Table]]:
    """Chunks ``(left_part, right_part)`` of two streams sorted ascending on ``on`` (nulls
    last) such that every key is in exactly one chunk on both sides (see the module
    docstring); never both parts empty.  ``schemas`` give an empty part its columns;
    the pools hold about ``max_bytes`` (more only for a key group larger than that),
    reported to ``held`` if given."""
    sort_keys = [(c, "ascending") for c in on]
    sides = (_Side(left, schemas[0]), _Side(right, schemas[1]))

    def report() -> None:
        if held is not None:
            held.set("align", sides[0].bytes + sides[1].bytes)

    def smallest_open() -> _Side | None:
        """The side that may still send rows whose pool's last key is smallest."""
        open_ = [s for s in sides if not s.ended and s.rows]
        if len(open_) < 2:
            return open_[0] if open_ else None
        lasts = pa.concat_tables([s.last_key(sort_keys) for s in open_])
        first = pc.sort_indices(lasts, options=sort_options(sort_keys))
        return open_[int(first[0].as_py())]

    stuck = False
    while True:
        for side in sides:
            if not side.rows and not side.ended:
                side.read()
        # refill by whole batches: the side with the smaller last key, until the pools
        # are large enough (or the bound key's group has to grow to get anywhere)
        while stuck or sides[0].bytes + sides[1].bytes < max_bytes:
            reading = smallest_open()
            if reading is None:
                break
            reading.read()
            stuck = False
        report()
        bounding = smallest_open()
        if bounding is None:  # every side ended: the rest is one chunk
            if sides[0].rows or sides[1].rows:
                yield sides[0].take_front(sides[0].rows), sides[1].take_front(sides[1].rows)
            report()
            return
        bound = bounding.last_key(sort_keys)
        keys = [s.keys(sort_keys) for s in sides]
        counts = counts_before(keys, bound, sort_keys, inclusive=False)
        if not any(counts):
            stuck = True  # nothing below the bound: its group needs more rows
            continue
        yield sides[0].take_front(counts[0]), sides[1].take_front(counts[1])
        report()
