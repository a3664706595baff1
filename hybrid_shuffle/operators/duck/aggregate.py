"""Hash aggregate and top_n: one streamed GROUP BY (or window) per task on DuckDB, or
one ``np.bincount`` per column for a dense integer key whose input fits.

``DuckAggregate`` runs ``HashAggregate`` for both its reductions (the SQL is
``lowering``'s: ``aggregate_query``, ``top_n_query``):

- ``Aggregation`` (sum, count, min, max, mean): the query reduces rows (phase
  ``complete``) or partials (``final``, ``merge``) to one row of fully
  combined partials per key, in the partial columns and types the pyarrow
  operators use (``Aggregation.partial_columns``), and ``Aggregation.results``
  turns each output batch into the user's columns.  So ``mean`` is the float64
  sum over the count exactly as on Arrow, a decimal sum has Spark's type and
  overflowing it is the same ``PlanError``, an integer sum wraps in int64 (uint64)
  as pyarrow's does (DuckDB sums in int128; ``_wrapped``), a float ``max`` skips
  NaN unless a key has nothing else (pyarrow's rule; DuckDB's NaN is above every
  number), and a combiner's partials (``PartialAggregate``, on Arrow) merge alike.
- ``TopN``: ``row_number()`` over each key's rows in ``TopN``'s total order
  (``by``, then every other column ascending, nulls last), keeping the first
  ``n``; a key's rows come out together, best first (float columns are ordered by
  ``sort_key``, which keeps their ``-0.0`` values and puts NaN where pyarrow does).

An ``Aggregation`` grouped by one integer key, of sums, counts and means, holds its
batches as Arrow (``HeldBatches``) while they and what the reduction will take beside
them fit in half its memory (``dense_bytes``, ``Aggregation.dense_row_bytes``).
If its input ends within that, ``Aggregation.dense`` reduces it with one
``np.bincount`` per column, as the combiner does, when the keys' span allows
(``dense_aggregate``): a final merge of 100,000 partial rows took 4-8 ms of CPU so
against 23-29 ms on DuckDB (``docs/architecture.md`` §11).  The first batch past
that, or a span or values the dense path declines, sends every held batch into
the DuckDB query in the order they came.

DuckDB spills the hash table (or the window's partitions) to the task's temp
directory within ``memory_limit``.  Each batch is staged encoded
(``encoding.Encoding``, the keys compared by their bits), so float keys group as
pyarrow groups them (``0.0`` apart from ``-0.0``, each NaN payload apart), and
types and names DuckDB would not give back come back as they were.  A task whose
input sent no batch emits nothing (no schema to give an empty table).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator

import duckdb
import pyarrow as pa

from hybrid_shuffle.errors import PlanError, QueryFailedError, summary
from hybrid_shuffle.operators.aggregate import HashAggregate
from hybrid_shuffle.operators.aggregation import Aggregation
from hybrid_shuffle.operators.context import OperatorContext
from hybrid_shuffle.operators.duck.base import DuckOperator
from hybrid_shuffle.operators.duck.encoding import Encoding
from hybrid_shuffle.operators.duck.lowering import aggregate_query, conform, top_n_query
from hybrid_shuffle.operators.held_batches import HeldBatches, hand_over
from hybrid_shuffle.operators.top_n import TopN

__all__ = ["DuckAggregate", "dense_bytes"]


def dense_bytes(memory: int) -> int:
    """The most an aggregate given ``memory`` holds as Arrow for ``Aggregation.dense``,
    with what the reduction takes beside each row (``Aggregation.dense_row_bytes``):
    half, so that the estimate may be short by half again within ``memory``."""
    return memory // 2


class DuckAggregate(DuckOperator):
    """``HashAggregate`` (any phase, ``Aggregation`` or ``TopN``) on DuckDB, or through
    ``Aggregation.dense`` when its input fits (see the module docstring)."""

    original: HashAggregate

    def __init__(self, original: HashAggregate) -> None:
        super().__init__(original)

    def open(self, context: OperatorContext | None = None) -> None:
        super().open(context)
        reduction = self.original.reduction
        row_bytes = reduction.dense_row_bytes if isinstance(reduction, Aggregation) else 0
        #: the batches held for the dense reduction while they fit; past them, DuckDB
        self.held = HeldBatches(dense_bytes(self.context.memory), self.context, row_bytes)
        self._planned = False

    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        if not self._planned:
            self._plan(table.schema)
        if self.held.offer(table):
            return ()
        if self._query is None:
            return self._to_duckdb([*self.held.release(), table])
        return self._push(table)

    def _push(self, table: pa.Table) -> list[pa.Table]:
        assert self._query is not None
        try:
            return [self._convert(t) for t in self._query.push(self._encoding.encode(table))]
        except QueryFailedError as e:
            raise self._overflow(e) from e.__cause__

    def _to_duckdb(self, tables: list[pa.Table]) -> list[pa.Table]:
        """Start the DuckDB query and push ``tables`` into it (the held ones first)."""
        self.stream(self._sql, self._encoding.staged)
        return hand_over(tables, self._push)

    def finish(self) -> Iterable[pa.Table]:
        if not self._planned:  # no batch at all: no schema, no row
            return ()
        empty = self._convert(self._target.empty_table())
        pushed: list[pa.Table] = []
        if self.held.holding:
            held = self.held.release()
            if not any(t.num_rows for t in held):
                return (empty,)
            dense = self._dense(pa.concat_tables(held))
            if dense is not None:
                return (dense,)
            pushed = self._to_duckdb(held)
        return itertools.chain(pushed, self.streamed(self._finished(), empty))

    def _dense(self, table: pa.Table) -> pa.Table | None:
        """The held rows reduced by ``Aggregation.dense``, if its values allow it."""
        reduction = self.original.reduction
        assert isinstance(reduction, Aggregation)
        dense = reduction.dense(table, on_rows=self.original.phase == "complete")
        if dense is None:
            return None
        # the held rows, what the reduction took beside them (estimated), the result
        working = reduction.dense_row_bytes * table.num_rows
        self.context.hold(table.nbytes + working + dense.nbytes)
        return self._convert(dense)

    def _finished(self) -> Iterator[pa.Table]:
        assert self._query is not None
        try:
            yield from (self._convert(t) for t in self._query.finish())
        except QueryFailedError as e:
            raise self._overflow(e) from e.__cause__

    def _overflow(self, error: QueryFailedError) -> Exception:
        """``error`` as the ``PlanError`` of ``conform`` if DuckDB's decimal sum overflowed
        (the sum of a ``decimal(38, s)`` column, whose Spark type DuckDB's own sum
        shares): a sum past its type is an error naming the column, never a wrapped
        value, on DuckDB as on pyarrow (``aggregation``'s promise)."""
        reduction = self.original.reduction
        if not isinstance(error.__cause__, duckdb.OutOfRangeException) or not isinstance(
            reduction, Aggregation
        ):
            return error
        decimal_sums = [
            f for f in self._target if f.name.endswith("_sum") and pa.types.is_decimal(f.type)
        ]
        if not decimal_sums:
            return error
        names = ", ".join(f"'{f.name.removesuffix('_sum')}' ({f.type})" for f in decimal_sums)
        return PlanError(
            f"aggregate {self.what}: the sum of column {names} does not fit its type "
            f"({summary(error.__cause__)}); cast the input column to a wider type first"
        )

    # -- the query ------------------------------------------------------------------------

    def _plan(self, schema: pa.Schema) -> None:
        """Check input ``schema`` and write the query for it; stop holding batches if the
        dense reduction cannot apply to it."""
        self._planned = True
        reduction = self.original.reduction
        if self.original.phase == "complete":
            reduction.check(schema)
        elif self.original.phase == "merge":
            reduction.check_partials(schema)
        keys = reduction.keys
        if isinstance(reduction, Aggregation):
            # a key that is aggregated too must stay a number: it groups as DuckDB's float
            keys = [k for k in keys if all(c != k for c, _ in reduction.partials)]
        self._encoding = encoding = Encoding(schema, keys)
        if isinstance(reduction, Aggregation):
            on_rows = self.original.phase == "complete"
            self._sql, self._target = aggregate_query(reduction, on_rows, schema, encoding.names)
            if not reduction.may_be_dense(schema, on_rows):
                self.held.release()
        elif isinstance(reduction, TopN):
            self._sql, self._target = top_n_query(reduction, schema, encoding.names), schema
            self.held.release()
        else:
            raise TypeError(f"aggregate {self.what}: no SQL for {type(reduction).__name__}")

    def _convert(self, table: pa.Table) -> pa.Table:
        conformed = conform(table, self._target, f"aggregate {self.what}")
        return self.original.reduction.results(conformed)
