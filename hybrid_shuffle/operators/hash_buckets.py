"""Hash-partitioning an operator's spilled state into buckets on disk (grace hashing).

A hash join whose build side does not fit its memory, or a hash aggregate
whose partials do not, writes its rows into ``n`` buckets by a hash of the
keys (``hash_bucket_ids``, salted by ``level``) so that every key is whole in
one bucket; it then works bucket by bucket, one bucket's rows at a time in
memory.  A bucket still too large is split again at ``level + 1`` (the salt
changes, so its rows spread); only the rows of one key can never be split.

``HashBuckets`` stages the tables it is given and, once they take
``buffer_bytes``, partitions them in one pass (one ``take``) and appends each
bucket's piece to that bucket's ``SpillRun``: one write per bucket per
``buffer_bytes`` staged, rather than a tiny write per bucket per table, and
never more than ``buffer_bytes`` (plus the table being added) held.  ``close``
writes what is staged and hands back each bucket's run (``None`` for a bucket
that got no row); the caller reads and deletes them.  Runs are created on a
bucket's first row, so an operator holds at most ``n`` open files per bucket
set.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pyarrow as pa

from hybrid_shuffle.operators.context import OperatorContext
from hybrid_shuffle.operators.spill_run import SpillRun
from hybrid_shuffle.shuffle.partitioner import hash_bucket_ids, split_by_ids

__all__ = ["MAX_BUCKETS", "MAX_LEVELS", "MIN_BUCKETS", "HashBuckets", "bucket_count"]

#: the fewest buckets a spill uses: room for the data to grow past what was seen
MIN_BUCKETS = 8
#: the most buckets one level uses (two bucket sets of a join keep 2 * this many files
#: open); a bucket still too large is split again at the next level
MAX_BUCKETS = 256
#: how many times a bucket still too large is split again (level 0 is the first split);
#: a bucket at this level is worked on in memory whatever its size
MAX_LEVELS = 3


def bucket_count(nbytes: int, memory: int) -> int:
    """Buckets for ``nbytes`` of state so that one bucket takes about half of ``memory``:
    a power of two, at least ``MIN_BUCKETS``, at most ``MAX_BUCKETS``."""
    want = -(-max(nbytes, 0) // max(memory // 2, 1))
    n = MIN_BUCKETS
    while n < want and n < MAX_BUCKETS:
        n *= 2
    return n


class HashBuckets:
    """``n`` buckets of spill runs for one kind of table (see the module docstring).

    ``held_outside`` returns what the owner holds in all (this set's staging
    included); while a staged batch is partitioned the set reports that plus the
    partitioned copy to ``context.hold``.
    """

    def __init__(
        self,
        context: OperatorContext,
        keys: Sequence[str],
        n: int,
        level: int,
        what: str,
        buffer_bytes: int,
        held_outside: Callable[[], int] | None = None,
    ) -> None:
        self.context = context
        self.keys = list(keys)
        self.n = n
        self.level = level
        self.what = what
        self.buffer_bytes = max(buffer_bytes, 1)
        self._held_outside = held_outside
        self.runs: list[SpillRun | None] = [None] * n
        self._staged: list[pa.Table] = []
        self._staged_bytes = 0
        self._spilled_bytes = 0
        self._closed = False

    @property
    def held(self) -> int:
        """Bytes staged in memory, not written yet."""
        return self._staged_bytes

    @property
    def nbytes(self) -> int:
        """Bytes added so far (written or staged)."""
        return self._spilled_bytes + self._staged_bytes

    def add(self, table: pa.Table | pa.RecordBatch) -> None:
        """Put ``table``'s rows into their buckets (staged until ``buffer_bytes``)."""
        assert not self._closed, "add after close"
        if table.num_rows == 0:
            return
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        self._staged.append(table)
        self._staged_bytes += table.nbytes
        if self._staged_bytes >= self.buffer_bytes:
            self._flush()

    def _flush(self) -> None:
        """Partition and write what is staged, ``buffer_bytes`` of it at a time (a table
        added whole may be larger): the copy in bucket order stays that small."""
        if not self._staged:
            return
        staged = self._staged
        table = staged[0] if len(staged) == 1 else pa.concat_tables(staged)
        step = max(1, -(-table.num_rows * self.buffer_bytes // max(table.nbytes, 1)))
        for start in range(0, table.num_rows, step):
            self._write(table.slice(start, step))
        self._staged, self._staged_bytes = [], 0

    def _write(self, table: pa.Table) -> None:
        ids = hash_bucket_ids(table, self.keys, self.n, self.level)
        if self._held_outside is not None:
            # the owner's data (the staged tables among it) and their copy in bucket order
            self.context.hold(self._held_outside() + table.nbytes + ids.nbytes)
        for bucket, piece in enumerate(split_by_ids(table, ids, self.n)):
            if piece.num_rows == 0:
                continue
            run = self.runs[bucket]
            if run is None:
                run = self.context.new_run(table.schema, f"{self.what}-{self.level}-{bucket}")
                self.runs[bucket] = run
            run.append(piece)
            self._spilled_bytes += piece.nbytes

    def close(self) -> list[SpillRun | None]:
        """Write what is staged, close every run (counted as spilled) and return them,
        one per bucket (``None``: no row).  The caller deletes them once read."""
        if not self._closed:
            self._flush()
            self._closed = True
            for run in self.runs:
                if run is not None:
                    run.close()
                    self.context.spilled(run)
        return list(self.runs)

    def delete(self) -> None:
        """Drop what is staged and delete every run (idempotent)."""
        self._staged, self._staged_bytes = [], 0
        for run in self.runs:
            if run is not None:
                run.delete()
