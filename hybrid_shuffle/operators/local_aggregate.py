"""FLIP-44's local aggregation: per-key state kept in the subtask, partials flushed on.

``Stream.local_key_by(keys).aggregate(...)`` / ``.top_n(...)`` builds a
``LocalAggregate``: an operator chained into its input's task (no exchange)
that reduces the rows of its own subtask per key and emits *partials*, which
``key_by(keys)`` then exchanges and a ``HashAggregate(phase="merge")`` merges.
A hot key reaches its receiver as one partial row per flush of each sender
instead of every one of its rows: FLIP-44's answer to key skew.

**Flush policy.**  The state is emitted (and started afresh) when:

- ``flush_rows`` input rows were taken in since the last flush (counted per
  batch: a batch is never split, so a flush covers at least ``flush_rows``
  rows);
- its partials take half of its memory (``OperatorContext.memory``, its share
  of ``operators.memory``; the other half is the working set of re-reducing
  them), FLIP-44's flush on a full buffer -- it never spills;
- and always at end of input.

Between flushes the partials of each batch are re-reduced together once there
are many of them and they grew (``_COMPACT_EVERY``; as ``PartialAggregate``), so a
flush emits about one partial row per key.  Unlike the map-side combiner
(``PartialAggregate``) it never stops combining on its own: the user asked for
it.

**Output** (what ``collect()`` of the local stream itself returns): partial
rows, one or more per key and subtask (one per flush).  For an aggregate: the
keys, then per partial ``<column>_sum``, ``<column>_count``, ``<column>_min``,
``<column>_max`` and, for a ``mean``, ``<column>_fsum`` (the float64 sum a mean
divides by ``<column>_count``); a decimal sum is already Spark's wider type.
For ``top_n``: rows of the input, each subtask's top n per key per flush.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pyarrow as pa

from hybrid_shuffle._words import plural
from hybrid_shuffle.operators.base import Columns, Operator
from hybrid_shuffle.operators.context import OperatorContext
from hybrid_shuffle.operators.reduction import Reduction

__all__ = ["LocalAggregate"]

#: partial tables kept before they are re-reduced (when they also grew)
_COMPACT_EVERY = 16


class LocalAggregate(Operator):
    """Reduces its subtask's rows per key; emits partials on each flush (module
    docstring).  ``flush_rows=None``: flush only when memory fills and at the end."""

    uses_memory = True

    def __init__(self, reduction: Reduction, flush_rows: int | None = None) -> None:
        self.reduction = reduction
        self.name = reduction.name
        self.keys = reduction.keys
        self.flush_rows = flush_rows

    def describe(self) -> str:
        flush = ""
        if self.flush_rows:
            flush = f", flush every {self.flush_rows:,} {plural(self.flush_rows, 'row')}"
        return f"{self.name} (local by {', '.join(self.keys)}{flush})"

    def open(self, context: OperatorContext | None = None) -> None:
        self._context = context if context is not None else OperatorContext.unbounded()
        self._max_bytes = max(self._context.memory // 2, 1)
        self._checked = False
        self._reset()
        #: how many times it emitted its state (tests and explain of a run)
        self.flushes = 0

    def _reset(self) -> None:
        self._parts: list[pa.Table] = []
        self._bytes = 0
        self._compacted_bytes = 0
        self._rows = 0

    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        if not self._checked:
            self.reduction.check(table.schema)
            self._checked = True
        if not table.num_rows:
            return ()
        partial = self.reduction.partial(table)
        self._parts.append(partial)
        self._bytes += partial.nbytes
        self._rows += table.num_rows
        self._context.hold(self._bytes + table.nbytes)
        if len(self._parts) >= _COMPACT_EVERY and self._bytes >= 2 * self._compacted_bytes:
            combined = self.reduction.combine(pa.concat_tables(self._parts))
            self._context.hold(self._bytes + combined.nbytes)
            self._parts, self._bytes = [combined], combined.nbytes
            self._compacted_bytes = combined.nbytes
        if self.flush_rows is not None and self._rows >= self.flush_rows:
            return self._flush()
        if self._bytes >= self._max_bytes:
            return self._flush()
        return ()

    def _flush(self) -> tuple[pa.Table, ...]:
        parts, held = self._parts, self._bytes
        self._reset()
        if not parts:
            return ()
        self.flushes += 1
        if len(parts) == 1:
            return (parts[0],)
        combined = self.reduction.combine(pa.concat_tables(parts))
        self._context.hold(held + combined.nbytes)
        return (combined,)

    def end_input(self, input_index: int) -> Iterable[pa.Table]:
        return self._flush()

    def output_schema(self, input_schemas: Sequence[pa.Schema | None]) -> pa.Schema | None:
        schema = input_schemas[0]
        if schema is None:
            return None
        self.reduction.check(schema)
        return self.reduction.partial(schema.empty_table()).schema

    def input_columns(self, wanted: Columns) -> list[Columns]:
        return [self.reduction.columns]

    def partition_keys(self, keys: tuple[str, ...]) -> tuple[str, ...] | None:
        # each partial row carries its key's values and stays in its subtask
        return keys if set(keys) <= set(self.keys) else None
