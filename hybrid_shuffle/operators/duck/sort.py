"""Sort of one partition: in memory on Arrow while it fits, else one streamed DuckDB
``ORDER BY`` per task.

Runs ``SortPartition``.  A range exchange hands each sort task the slices of every
producer, and each slice is already sorted (the producer sorted its block to cut it
into ranges).  pyarrow's ``sort_indices`` takes such runs as they are, where DuckDB's
sort starts over: over eight sorted runs of 156k rows (an int64 key and a float64)
pyarrow took 35 ms and DuckDB 110 ms, and on shuffled rows both about 160 ms (one
thread; ``BENCHMARKS.md``, issue 37's kernels).  So the batches are held as Arrow
while they fit in ``in_memory_bytes`` (half the task's ``operators.memory``: the
sorted copy is taken a batch at a time beside them), and a partition that ends
within it is sorted by ``sort_indices`` and ``take``.  The first batch past it sends
every held batch into DuckDB, whose sort runs within the task's ``memory_limit`` and
spills sorted runs to the task's temp directory; so does a key pyarrow cannot sort
(``_arrow_sorts``) or a batch whose schema differs from the first's.

Both give pyarrow's order (``lowering.sort_key`` writes it for DuckDB): nulls last in
both directions, NaN just before them, and a float key's ``-0.0`` values come out as
they went in.  Rows with equal keys come out in any order.  On DuckDB each batch is
staged encoded (``encoding.Encoding``), so types and names DuckDB would not give back
come back as they were.  An input with no batch at all gives nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from hybrid_shuffle.operators.columns import require_key_columns
from hybrid_shuffle.operators.context import OperatorContext
from hybrid_shuffle.operators.duck.base import DuckOperator
from hybrid_shuffle.operators.duck.encoding import Encoding
from hybrid_shuffle.operators.duck.lowering import conform, sort_query
from hybrid_shuffle.operators.duck.streamed_query import OUTPUT_ROWS
from hybrid_shuffle.operators.held_batches import HeldBatches, hand_over
from hybrid_shuffle.operators.sort import SortPartition
from hybrid_shuffle.operators.sort_keys import key_table, sort_options

__all__ = ["DuckSort", "in_memory_bytes"]


def in_memory_bytes(memory: int) -> int:
    """The most a sort given ``memory`` holds as Arrow before it sorts on DuckDB: half,
    since its sorted copy is taken beside the held rows."""
    return memory // 2


def _arrow_sorts(kind: pa.DataType) -> bool:
    """Whether pyarrow's ``sort_indices`` orders a key of ``kind`` (a dictionary key by its
    values, as ``sort_keys.key_table`` decodes it)."""
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    t = pa.types
    return (
        (t.is_integer(kind) or t.is_boolean(kind) or t.is_decimal(kind) or t.is_null(kind))
        or (t.is_floating(kind) and not t.is_float16(kind))
        or (t.is_temporal(kind) and not t.is_interval(kind))
        or t.is_string(kind) or t.is_large_string(kind)
        or t.is_binary(kind) or t.is_large_binary(kind) or t.is_fixed_size_binary(kind)
    )  # fmt: skip


class DuckSort(DuckOperator):
    """``SortPartition`` as a task runs it (see the module docstring)."""

    original: SortPartition

    def __init__(self, original: SortPartition) -> None:
        super().__init__(original)

    def open(self, context: OperatorContext | None = None) -> None:
        super().open(context)
        #: the batches held as Arrow while they fit; past them, the sort runs on DuckDB
        self.held = HeldBatches(in_memory_bytes(self.context.memory), self.context)
        self._schema: pa.Schema | None = None

    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        if self._schema is None:
            require_key_columns(table.schema, self.original.by, f"sort {self.what}")
            self._schema = table.schema
            if not all(_arrow_sorts(table.schema.field(c).type) for c in self.original.by):
                self.held.release()  # a key pyarrow cannot sort: DuckDB from the first batch
        if self.held.offer(table):
            return ()
        if self._query is None:
            return self._to_duckdb([*self.held.release(), table])
        return self._push(table)

    def _to_duckdb(self, tables: list[pa.Table]) -> list[pa.Table]:
        """Start the DuckDB sort and push ``tables`` into it (the held ones first)."""
        assert self._schema is not None
        self._encoding = Encoding(self._schema)
        by, descending = self.original.by, self.original.descending
        self.stream(sort_query(by, descending, self._schema, self._encoding.names),
                    self._encoding.staged)  # fmt: skip
        return hand_over(tables, self._push)

    def _push(self, table: pa.Table) -> list[pa.Table]:
        assert self._query is not None
        return [self._conform(t) for t in self._query.push(self._encoding.encode(table))]

    def finish(self) -> Iterable[pa.Table]:
        if self._schema is None:  # no batch at all: no schema, no row
            return ()
        if self.held.holding:
            return self._sorted_in_memory(self._schema)
        assert self._query is not None
        return self.streamed(
            (self._conform(t) for t in self._query.finish()), self._schema.empty_table()
        )

    def _sorted_in_memory(self, schema: pa.Schema) -> Iterator[pa.Table]:
        """The held rows in pyarrow's order, ``OUTPUT_ROWS`` at a time (one empty table if
        there are none, so the schema still travels)."""
        held = self.held.release()  # never empty: still holding, the first batch was held
        # one chunk: a take from many chunks groups its rows by chunk first, which costs
        # more than this copy (the held batches are let go as it is made)
        table = pa.concat_tables(held).combine_chunks()
        self.context.hold(sum(t.nbytes for t in held) + table.nbytes)  # both alive here
        del held
        if table.num_rows == 0:
            yield schema.empty_table()
            return
        order = "descending" if self.original.descending else "ascending"
        keys = [(c, order) for c in self.original.by]
        indices = pc.sort_indices(key_table(table, keys), options=sort_options(keys))
        rows = indices.to_numpy()
        for start in range(0, len(rows), OUTPUT_ROWS):
            yield table.take(rows[start : start + OUTPUT_ROWS])

    def _conform(self, table: pa.Table) -> pa.Table:
        assert self._schema is not None
        return conform(table, self._schema, f"sort {self.what}")
