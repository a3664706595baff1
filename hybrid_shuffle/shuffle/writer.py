"""Producer-side writer: routes a task's output rows into its result partition.

Rows are routed with vectorized kernels (``partitioner``) and coalesced per
subpartition until a buffer reaches ``buffer_size`` bytes, because the object
store has a per-object cost: too small a buffer pays it per row group, too
large a buffer stops pipelining.  Range partitions are the exception: the
producer keeps its whole output and publishes a key sample first, so consumers can
agree on key intervals before any row moves (see
``Partitioner.shares_one_subpartition``).  Each buffer carries its key range, and
a consumer reads the buffers that may hold its interval and keeps its rows of them.
An integer key without nulls is sorted first (by NumPy, cheaply), so each consumer reads
about its share.  Any other key (a translated sort's binary key) goes as it came: each
consumer then reads every buffer and keeps its share.  On 5M rows per producer that
filter cost about a sixth of regrouping the rows by key in the producer (a ``take``
of every row, which cost as much as the consumers' sort saved); on one node those
reads are zero-copy, across nodes each consumer fetches every buffer.  With one
consumer nothing is sampled or filtered.

At ``finish`` the writer hands the partition its output schema (of the first
table with rows, else of the first without), which readers receive with the
end of the partition: an input that sent no row still tells its consumer its
columns (a left join's right side), and no empty buffer costs an object.
"""

from __future__ import annotations

from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from hybrid_shuffle.shuffle.api import HandedOver, KeyRange, PartitionDescriptor
from hybrid_shuffle.shuffle.metrics import WriteMetrics
from hybrid_shuffle.shuffle.partitioner import (
    hash_partition_ids,
    round_robin_ids,
    sample_keys,
    sort_order,
    split_by_ids,
)
from hybrid_shuffle.shuffle.routing import PartitionerKind

__all__ = ["ResultPartitionWriter", "WritablePartition"]

_RANGE_SAMPLES = 1000


class WritablePartition(Protocol):
    """What the writer uses of a partition: a ``ResultPartition`` held in this process,
    or a proxy of one held elsewhere (``shuffle.external.remote_partition``).  Same
    contract as ``ResultPartition``'s methods of these names: ``add`` may wait for
    credit, and after ``finish`` or ``fail`` nothing more is added."""

    @property
    def descriptor(self) -> PartitionDescriptor: ...

    @property
    def metrics(self) -> WriteMetrics: ...

    def add(self, subpartition: int, table: pa.Table, key_range: KeyRange | None = None) -> None:
        """Append one buffer to ``subpartition``."""

    def publish_sample(self, sample: Any) -> None:
        """Range partitions: the key sample, before any buffer."""

    def finish(self, schema: pa.Schema | None = None) -> None:
        """Complete the partition; ``schema`` reaches readers with its end."""

    def fail(self, reason: str) -> None:
        """Mark the partition failed; readers get ``reason``."""

    def finished_buffers(self) -> HandedOver | None:
        """The finished partition to hand to later consumers, or None."""


#: a buffer made of more slices than this is copied into one chunk per column
_MAX_CHUNKS = 8


class _Coalescer:
    """Collects slices for one subpartition until they make one buffer.

    A buffer of a few slices keeps them as its chunks: the object store's
    serializer copies each slice's bytes once anyway, so joining them first was a
    second copy of every row (over fresh memory, a page fault a page).  Only a
    buffer of many small slices is made one chunk a column, so that neither the
    serializer nor the consumer pays a per-chunk cost many times over."""

    def __init__(self) -> None:
        self.parts: list[pa.Table] = []
        self.nbytes = 0

    def add(self, table: pa.Table) -> None:
        self.parts.append(table)
        self.nbytes += table.nbytes

    def take(self) -> pa.Table:
        parts = self.parts
        self.parts, self.nbytes = [], 0
        if len(parts) == 1:
            return parts[0]
        table = pa.concat_tables(parts)
        return table.combine_chunks() if len(parts) > _MAX_CHUNKS else table


class ResultPartitionWriter:
    def __init__(self, partition: WritablePartition, buffer_size: int) -> None:
        self.partition = partition
        self.descriptor = partition.descriptor
        self._partitioner = partition.descriptor.partitioner
        self._buffer_size = buffer_size
        n = partition.descriptor.num_subpartitions
        self._coalescers = [_Coalescer() for _ in range(n)]
        self._rr_offset = partition.descriptor.producer_subtask
        self._range_parts: list[pa.Table] = []
        #: the schema of the first table with rows, else of the first without
        self._schema: pa.Schema | None = None
        self._empty_schema: pa.Schema | None = None

    def emit(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            if self._empty_schema is None:
                self._empty_schema = table.schema
            return
        if self._schema is None:
            self._schema = table.schema
        kind = self._partitioner.kind
        n = self.descriptor.num_subpartitions
        if kind is PartitionerKind.RANGE:
            self._range_parts.append(table)
            return
        if n == 1:
            self._append(0, table)
            return
        if kind is PartitionerKind.HASH:
            ids = hash_partition_ids(table, self._partitioner.keys, n)
        else:  # round-robin; forward and broadcast have one subpartition
            ids = round_robin_ids(table.num_rows, n, self._rr_offset)
            self._rr_offset = (self._rr_offset + table.num_rows) % n
        for sub, part in enumerate(split_by_ids(table, ids, n)):
            if part.num_rows:
                self._append(sub, part)

    def _append(self, sub: int, table: pa.Table) -> None:
        co = self._coalescers[sub]
        co.add(table)
        if co.nbytes >= self._buffer_size:
            self._flush(sub)

    def _flush(self, sub: int) -> None:
        co = self._coalescers[sub]
        if not co.parts:
            return
        table = co.take()
        for piece in _split_rows(table, self._buffer_size):
            self.partition.add(sub, piece)

    def finish(self) -> None:
        """Flush everything (range: sort, publish the sample, then write) and finish."""
        if self._partitioner.kind is PartitionerKind.RANGE:
            self._finish_range()
        else:
            for sub in range(len(self._coalescers)):
                self._flush(sub)
        self.partition.finish(self._schema or self._empty_schema)

    def _finish_range(self) -> None:
        key = self._partitioner.keys[0]
        if not self._range_parts:
            self.partition.publish_sample((pa.array([]), 0.0))
            return
        table = pa.concat_tables(self._range_parts)
        self._range_parts = []
        if self.descriptor.readers_per_subpartition == 1:  # one consumer reads every row
            self.partition.publish_sample((pa.array([], table.schema.field(key).type), 0.0))
            for piece in _split_rows(table, self._buffer_size):
                self.partition.add(0, piece)
            return
        order = sort_order(table.column(key), descending=False)
        if order is not None:  # one chunk in, one chunk out: ``take`` needs no concatenation
            table = table.combine_chunks().take(pa.array(order))
        self.partition.publish_sample(sample_keys(table.column(key), _RANGE_SAMPLES))
        for piece in _split_rows(table, self._buffer_size):
            column = piece.column(key)
            bounds = pc.min_max(column)
            missing = pc.sum(pc.is_null(column, nan_is_null=True)).as_py()  # min_max skips NaN
            self.partition.add(0, piece, KeyRange(bounds["min"], bounds["max"], missing > 0))

    def fail(self, reason: str) -> None:
        self.partition.fail(reason)

    @property
    def metrics(self) -> WriteMetrics:
        return self.partition.metrics

    def finished_buffers(self) -> HandedOver | None:
        return self.partition.finished_buffers()


def _split_rows(table: pa.Table, buffer_size: int) -> list[pa.Table]:
    """Slices of about ``buffer_size`` bytes (zero-copy)."""
    if table.nbytes <= buffer_size or table.num_rows <= 1:
        return [table]
    pieces = -(-table.nbytes // buffer_size)
    rows = -(-table.num_rows // pieces)
    return [table.slice(i, rows) for i in range(0, table.num_rows, rows)]
