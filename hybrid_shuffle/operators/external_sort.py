"""External sort: sorts more rows than the memory it is given, through sorted runs.

``ExternalSorter`` is what the sort, co_group and sort-merge join operators
sort with.  ``add`` buffers batches; once the buffer (plus the sort indices
and one output slice it will need) would pass ``memory`` it is sorted and
written as a *sorted run* (``SpillRun``), then dropped.  ``sorted_batches``
yields every row added, in order, in batches of bounded size: slices of the
sorted buffer when nothing spilled, else a k-way merge of the runs (a
remainder smaller than one merge batch is merged from memory, a larger one is
spilled first, so the merge never holds it whole).

Sorting is pyarrow's ``sort_indices`` on the key columns (stable; nulls at
the end in either direction, NaN just before them), and the merge decides
"comes before" with the same kernel, so the runs and their merge agree on
every sortable type, multi-column keys included, without a comparison written
here.  The merge keeps, per run, the unconsumed part of the batch read last
(a *queue*, sorted).  Each round:

1. every queue that is empty reads its run's next batch;
2. the *bound* is the smallest last-read row among runs with rows still
   unread; every unread row of every run is >= its run's last-read row >=
   the bound;
3. so every queued row <= the bound can go: the bound's own queue whole, of
   each other queue the prefix found by ``sort_keys.counts_before`` -- a binary search
   whose probes are sorted with the bound row by the same kernel, 64 probes
   a queue a step, every queue's in one small sort;
4. the emitted prefixes (sorted pieces, one per run) are sorted together and
   yielded; what is left stays queued.

Every row is sorted once more in the merge, plus a few small sorts a round,
and a round empties at least one queue, so the rounds number about the
batches read.  More runs than ``MAX_FAN_IN`` (fewer for a tiny budget) are
first merged into longer runs (a multi-pass merge), so the read batches stay
reasonably large.

Memory: the buffer is spilled before ``buffer + 8 bytes a row (indices) +
one output slice`` exceeds ``memory``; the merge reads batches of about
``memory / (2 * (k + 1))`` bytes for k runs.  What a sorter holds is reported
through ``HeldBytes``, which sums the parts of one operator (co_group holds
two sorters) into ``OperatorContext.hold``.  Every run is deleted once read.

``pyarrow``'s ``take`` of a many-chunk table concatenates the table first, on
every call -- a copy of the whole buffer per output slice -- so rows are
gathered chunk by chunk (``sort_keys.RowTaker``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from hybrid_shuffle.operators.context import HeldBytes, OperatorContext
from hybrid_shuffle.operators.sort_keys import (
    RowTaker,
    SortKeys,
    counts_before,
    key_table,
    sort_indices,
    sort_options,
)
from hybrid_shuffle.operators.spill_run import SpillRun

__all__ = [
    "MAX_FAN_IN",
    "ExternalSorter",
    "SharedBuffers",
]

#: bytes a row of sort indices takes
INDEX_BYTES = 8
#: never slice, read or write fewer rows than this at once (tiny budgets only)
MIN_SLICE_ROWS = 256
#: output and spill slices stay below this however large the budget
MAX_SLICE_BYTES = 8 << 20
#: batches smaller than this are gathered into one before they are buffered, so the
#: chunk-by-chunk gather (``RowTaker``) makes few calls per slice
COALESCE_ROWS = 1 << 16
#: runs merged at once; more are first merged into longer runs
MAX_FAN_IN = 32


def _row_bytes(nbytes: int, rows: int) -> int:
    return max(1, nbytes // max(1, rows))


class _Queue:
    """One run being merged: the unconsumed part of the batch read last, and the rows not
    read yet."""

    def __init__(self, batches: Iterator[pa.RecordBatch], rows: int, run: SpillRun | None):
        self._batches = batches
        self.unread = rows
        self.run = run
        #: the queued rows (None until the first read)
        self.batch: pa.RecordBatch = None

    def refill(self) -> None:
        """Read the next batch if the queue is empty; delete the run once read whole."""
        while (self.batch is None or self.batch.num_rows == 0) and self.unread > 0:
            self.batch = next(self._batches)
            self.unread -= self.batch.num_rows
        if self.unread == 0:
            self.close()

    @property
    def rows(self) -> int:
        return 0 if self.batch is None else int(self.batch.num_rows)

    def close(self) -> None:
        if self.run is not None:
            getattr(self._batches, "close", lambda: None)()  # unmaps (the batches stay valid)
            self.run.delete()
            self.run = None


class SharedBuffers:
    """One buffer budget for the sorters of one operator (co_group and the sort-merge
    join sort both inputs at once).

    Split in two fixed halves, a 100,000-row dimension would leave its half idle while
    a 10M-row fact table spilled runs of a few MiB each (the merge of that many small
    runs took four times the in-memory join).  Shared, the buffers together stay within
    ``total``: when a batch would pass it, the sorter buffering the most spills first.
    The merge that follows still gives each sorter its own share of the reads."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.sorters: list[ExternalSorter] = []

    def make_room(self, incoming: int) -> None:
        """Spill the largest buffers until ``incoming`` more bytes fit."""
        while True:
            buffered = [s for s in self.sorters if s.buffered_rows]
            if sum(s.buffered_bytes for s in buffered) + incoming <= self.total or not buffered:
                return
            max(buffered, key=lambda s: s.buffered_bytes).spill()


class ExternalSorter:
    """Sorts what ``add`` gets within ``memory`` bytes, spilling sorted runs through
    ``context``; see the module docstring.  ``what`` names the runs' files; ``held``
    (default: one of its own) is where it reports the bytes it holds; ``shared`` puts its
    buffer on a budget shared with other sorters (``SharedBuffers``), ``memory`` then
    sizing only its slices and merge reads."""

    def __init__(
        self,
        sort_keys: SortKeys,
        context: OperatorContext,
        memory: int,
        what: str,
        held: HeldBytes | None = None,
        shared: SharedBuffers | None = None,
    ) -> None:
        keys: dict[str, str] = {}
        for column, order in sort_keys:
            keys.setdefault(column, order)
        self.sort_keys = list(keys.items())
        self.context = context
        self.memory = max(1, memory)
        self.what = what
        self.held = held if held is not None else HeldBytes(context)
        self.schema: pa.Schema | None = None
        #: rows added so far
        self.rows = 0
        self._slice_bytes = max(1, min(MAX_SLICE_BYTES, self.memory // 16))
        self._parts: list[pa.RecordBatch] = []
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self._bytes = 0
        self._buffer_rows = 0
        #: runs to merge
        self._runs: list[SpillRun] = []
        #: every run made, for ``close`` (deleting a deleted run is a no-op)
        self._made: list[SpillRun] = []
        self._shared = shared
        if shared is not None:
            shared.sorters.append(self)

    # -- buffering and spilling ------------------------------------------------------------

    def add(self, table: pa.Table) -> None:
        """Buffer ``table`` (of one schema with every other one added), spilling a sorted
        run first when the buffer would pass the budget."""
        if self.schema is None:
            self.schema = table.schema
        self.rows += table.num_rows
        for batch in table.to_batches():
            if batch.num_rows == 0:
                continue
            if not batch.schema.equals(self.schema):
                batch = pa.RecordBatch.from_arrays(batch.columns, schema=self.schema)
            for part in self._split(batch):
                self._add_batch(part)

    def _split(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        """``batch`` in parts of at most half the budget (with their indices): a batch
        larger than the budget is sorted and spilled a part at a time."""
        if not self.context.can_spill:
            return [batch]
        per_row = _row_bytes(batch.nbytes, batch.num_rows) + INDEX_BYTES
        step = max(MIN_SLICE_ROWS, self.memory // 2 // per_row)
        if batch.num_rows <= step:
            return [batch]
        return [batch.slice(i, step) for i in range(0, batch.num_rows, step)]

    def _over(self, nbytes: int, rows: int) -> bool:
        return (
            self.context.can_spill and nbytes + INDEX_BYTES * rows + self._slice_bytes > self.memory
        )

    @property
    def buffered_rows(self) -> int:
        return self._buffer_rows

    @property
    def buffered_bytes(self) -> int:
        """What the buffer will take when sorted: its rows, their indices, one slice."""
        return self._bytes + INDEX_BYTES * self._buffer_rows + self._slice_bytes

    def spill(self) -> None:
        """Write the buffer as a sorted run now (``SharedBuffers`` makes room so)."""
        if self._buffer_rows:
            self._spill()

    def _add_batch(self, batch: pa.RecordBatch) -> None:
        if self._shared is not None:
            if self.context.can_spill:
                self._shared.make_room(batch.nbytes + INDEX_BYTES * batch.num_rows)
        elif self._buffer_rows and self._over(
            self._bytes + batch.nbytes, self._buffer_rows + batch.num_rows
        ):
            self._spill()
        if batch.num_rows >= COALESCE_ROWS:
            self._parts.append(batch)
        else:
            self._pending.append(batch)
            self._pending_rows += batch.num_rows
            if self._pending_rows >= COALESCE_ROWS:
                self._flush_pending()
        self._bytes += batch.nbytes
        self._buffer_rows += batch.num_rows
        self._report(self._bytes)

    def _flush_pending(self) -> None:
        if len(self._pending) > 1:
            combined = pa.Table.from_batches(self._pending, schema=self.schema).combine_chunks()
            self._parts.extend(combined.to_batches())
        else:
            self._parts.extend(self._pending)
        self._pending = []
        self._pending_rows = 0

    def _report(self, nbytes: int) -> None:
        self.held.set(self, nbytes)

    def _slice_rows(self, row_bytes: int) -> int:
        return max(MIN_SLICE_ROWS, self._slice_bytes // row_bytes)

    def _sorted_buffer(self) -> Iterator[pa.Table]:
        """The buffer sorted, in slices (each taken on its own: the sorted copy never
        exists whole); the buffer is dropped at the end."""
        self._flush_pending()
        assert self.schema is not None
        table = pa.Table.from_batches(self._parts, schema=self.schema)
        order = sort_indices(table, self.sort_keys)
        taker = RowTaker(table)
        step = self._slice_rows(_row_bytes(self._bytes, self._buffer_rows))
        slice_bytes = min(step, self._buffer_rows) * _row_bytes(self._bytes, self._buffer_rows)
        self._report(self._bytes + order.nbytes + 2 * slice_bytes)
        self._parts, self._bytes, self._buffer_rows = [], 0, 0
        for start in range(0, len(order), step):
            yield taker.take(order[start : start + step])

    def _spill(self) -> None:
        """Write the buffer as one sorted run and drop it."""
        run = self._new_run()
        try:
            for table in self._sorted_buffer():
                run.append(table)
            run.close()
        except BaseException:
            run.delete()
            raise
        self.context.spilled(run)
        self._runs.append(run)
        self._report(0)

    def _new_run(self) -> SpillRun:
        assert self.schema is not None
        run = self.context.new_run(self.schema, self.what)
        self._made.append(run)
        return run

    # -- reading back ----------------------------------------------------------------------

    def sorted_batches(self) -> Iterator[pa.Table]:
        """Every row added, sorted, in batches of bounded size; call once, after the last
        ``add``.  Runs are deleted as they are read (and by ``close``)."""
        try:
            if self.schema is None or self.rows == 0:
                return
            if not self._runs:
                yield from self._sorted_buffer()
                return
            self._flush_pending()
            fan_in = self._fan_in()
            while len(self._runs) > fan_in:  # merge the oldest runs into a longer one
                group, self._runs = self._runs[:fan_in], self._runs[fan_in:]
                merged = self._new_run()
                self._runs.append(merged)
                queues = [self._run_queue(r, len(group)) for r in group]
                for table in self._merge(queues):
                    merged.append(table)
                merged.close()
                self.context.spilled(merged)
            queues = [self._run_queue(r, len(self._runs) + 1) for r in self._runs]
            remainder = self._remainder(len(queues) + 1)
            if remainder is not None:
                queues.append(remainder)
            self._runs = []
            emitted = 0
            for table in self._merge(queues):
                emitted += table.num_rows
                yield table
            assert emitted == self.rows, f"merge lost rows: {emitted} of {self.rows}"
        finally:
            self.close()

    def _fan_in(self) -> int:
        """Runs merged at once: ``MAX_FAN_IN``, fewer when the budget would make the read
        batches smaller than ``MIN_SLICE_ROWS`` rows."""
        row_bytes = _row_bytes(sum(r.bytes for r in self._runs), sum(r.rows for r in self._runs))
        fits = self.memory // (2 * MIN_SLICE_ROWS * row_bytes) - 1
        return int(min(MAX_FAN_IN, max(2, fits)))

    def _merge_batch_bytes(self, runs: int) -> int:
        return max(1, self.memory // (2 * (runs + 1)))

    def _run_queue(self, run: SpillRun, runs: int) -> _Queue:
        step = max(MIN_SLICE_ROWS, self._merge_batch_bytes(runs) // _row_bytes(run.bytes, run.rows))
        return _Queue(run.batches(step), run.rows, run)

    def _remainder(self, runs: int) -> _Queue | None:
        """The buffer as one more queue: sorted in memory if it is no larger than a merge
        batch, else spilled as a run first (so the merge does not hold it whole)."""
        if self._buffer_rows == 0:
            return None
        if self._bytes > self._merge_batch_bytes(runs):
            self._spill()
            return self._run_queue(self._runs.pop(), runs)
        rows = self._buffer_rows
        sorted_ = pa.concat_tables(list(self._sorted_buffer())).combine_chunks()
        self._report(sorted_.nbytes)
        return _Queue(iter(sorted_.to_batches()), rows, None)

    def _merge(self, queues: list[_Queue]) -> Iterator[pa.Table]:
        """The rows of sorted ``queues`` in order (see the module docstring)."""
        out: list[pa.Table] = []
        out_rows = 0
        out_bytes = 0
        while True:
            for q in queues:
                q.refill()
            queues = [q for q in queues if q.rows]
            if not queues:
                break
            counts = self._round(queues)
            pieces = [q.batch.slice(0, n) for q, n in zip(queues, counts, strict=True) if n]
            for q, n in zip(queues, counts, strict=True):
                q.batch = q.batch.slice(n)
            held = sum(q.batch.nbytes for q in queues)
            for table in self._sort_pieces(pieces, held + out_bytes):
                out.append(table)
                out_rows += table.num_rows
                out_bytes += table.nbytes
                if out_bytes >= self._slice_bytes:
                    yield pa.concat_tables(out)
                    out, out_rows, out_bytes = [], 0, 0
        if out:
            yield pa.concat_tables(out)

    def _round(self, queues: list[_Queue]) -> list[int]:
        """How many rows of each queue can be emitted this round: those <= the bound (the
        smallest last-read row of the runs with rows unread), or all if none has."""
        open_ = [q for q in queues if q.unread > 0]
        if not open_:
            return [q.rows for q in queues]
        lasts = [key_table(q.batch.slice(q.rows - 1, 1), self.sort_keys) for q in open_]
        if len(lasts) == 1:
            first = 0
        else:
            rows = pa.concat_tables(lasts)
            first = int(pc.sort_indices(rows, options=sort_options(self.sort_keys))[0].as_py())
        bound, owner = lasts[first], open_[first]
        others = [q for q in queues if q is not owner]
        keys = [key_table(q.batch, self.sort_keys) for q in others]
        found = dict(zip(others, counts_before(keys, bound, self.sort_keys, True), strict=True))
        return [q.rows if q is owner else found[q] for q in queues]

    def _sort_pieces(self, pieces: list[pa.RecordBatch], held: int) -> Iterator[pa.Table]:
        """The rows of sorted ``pieces`` sorted together, in output slices."""
        if len(pieces) == 1:  # already sorted
            self._report(held + pieces[0].nbytes)
            yield pa.Table.from_batches(pieces)
            return
        table = pa.Table.from_batches(pieces, schema=self.schema)
        order = sort_indices(table, self.sort_keys)
        taker = RowTaker(table)
        row_bytes = _row_bytes(table.nbytes, table.num_rows)
        step = self._slice_rows(row_bytes)
        self._report(held + table.nbytes + order.nbytes + 3 * step * row_bytes)
        for start in range(0, len(order), step):
            yield taker.take(order[start : start + step])

    def close(self) -> None:
        """Delete every run not read yet and drop the buffer (idempotent)."""
        for run in self._made:
            run.delete()
        self._runs, self._made = [], []
        self._parts, self._pending, self._bytes, self._buffer_rows = [], [], 0, 0
        self._report(0)
