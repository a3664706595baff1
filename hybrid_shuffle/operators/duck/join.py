"""Hash and sort-merge join on DuckDB: inputs staged in temp tables, joined by one query.

Runs ``HashJoin`` and ``SortMergeJoin`` (every ``how`` of ``join_types``).  A join reads
two inputs that arrive interleaved, so the streamed reader of the aggregate and the sort
does not fit: DuckDB reads a join's build side whole before the probe side, and a reader
blocking on one input's queue while the task has a batch of the other would deadlock.
So each batch is appended to a DuckDB TEMP table of its input as it arrives
(``staging.StagedInputs``, which ``sql`` stages with too), and ``finish`` runs one join
query (``lowering.join_query``) and streams its rows out, conformed to pyarrow's join
schema.  An inner, left, semi or anti join (whose output row needs one probe row and the
build rows: ``STREAMED``) does better once its build side ended, as the Arrow
``HashJoin`` does: a ``StreamedQuery`` then joins the probe rows staged so far and every
probe batch after, pushed as it comes, with the staged build side, so its rows flow out
while the probe side is still arriving (a broadcast join's large probe side is never
staged).

DuckDB keeps the staged rows and the join's hash table within the task's
``memory_limit``, spilling both to the task's temp directory (the pyarrow operators
join in memory). The peaks recorded are the join query's
(DuckDB keeps no profile of an ``INSERT``; the join's temp directory peak holds the
staged rows that spilled).

A side with no batch is an empty table of its planned columns
(``planned_schemas``, remembered by the original's ``output_schema``).  The
pyarrow operator runs instead (``fall_back``, the staged rows replayed into it)
where DuckDB would not give its answer: float keys (DuckDB matches ``0.0``
with ``-0.0`` and NaN with NaN), a column type the round trip through DuckDB
does not keep, column names DuckDB cannot tell apart (it ignores case), a
layout ``join_sql`` cannot write, and a side whose columns nobody knows (the
Arrow operator decides whether that is no row or ``SchemaMismatchError``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator

import duckdb
import pyarrow as pa

from hybrid_shuffle.operators.co_group import check_key_types
from hybrid_shuffle.operators.context import OperatorContext
from hybrid_shuffle.operators.duck.base import DuckOperator
from hybrid_shuffle.operators.duck.lowering import (
    JoinQuery,
    conform,
    duck_types,
    join_query,
    quote,
)
from hybrid_shuffle.operators.duck.staging import StagedInputs
from hybrid_shuffle.operators.duck.streamed_query import OUTPUT_ROWS, query_error
from hybrid_shuffle.operators.join import HashJoin
from hybrid_shuffle.operators.sort_merge_join import SortMergeJoin

__all__ = ["STREAMED", "DuckJoin"]

_SIDES = 2
_LEFT, _RIGHT = 0, 1
#: the joins a probe batch can be answered for as soon as the build side ended
STREAMED = ("inner", "left", "semi", "anti")
#: DuckDB's optimizers the streamed join turns off (``_streamed_optimizers`` says why)
_OFF = ("build_side_probe_side", "join_filter_pushdown")


class DuckJoin(DuckOperator):
    """``HashJoin`` or ``SortMergeJoin`` on DuckDB (see the module docstring)."""

    original: HashJoin | SortMergeJoin

    def __init__(self, original: HashJoin | SortMergeJoin) -> None:
        super().__init__(original)

    def open(self, context: OperatorContext | None = None) -> None:
        super().open(context)
        #: per input, the schema of its first batch
        self._schemas: list[pa.Schema | None] = [None, None]
        #: the inputs staged in temp tables (``staging``)
        self._staged = StagedInputs(
            lambda: self.cursor,
            [quote(f"__hs_join_{id(self):x}_{i}") for i in range(_SIDES)],
            self.what,
        )
        self._build_ended = False
        #: the schema the join's rows are conformed to, once its query started
        self._output: pa.Schema | None = None
        self._emitted = False

    # -- arrival --------------------------------------------------------------------------

    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        if self._fallback is not None:
            return self._fallback.process(table, input_index)
        if self._schemas[input_index] is None:
            self._schemas[input_index] = table.schema
            check_key_types(self._schemas, self.original.on, f"join '{self.original.name}'")
            if not duck_types(table.schema, self.original.on):
                return self._replayed([(table, input_index)])
        if input_index == _LEFT and self._build_ended and self.original.how in STREAMED:
            return self._streamed(table)
        self._staged.stage(table, input_index)
        return ()

    def end_input(self, input_index: int) -> Iterable[pa.Table]:
        if self._fallback is not None:
            return self._fallback.end_input(input_index)
        if input_index == _RIGHT:
            self._build_ended = True
        return ()

    def finish(self) -> Iterable[pa.Table]:
        if self._fallback is not None:
            return self._fallback.finish()
        if self._query is not None:
            return self._ended(self._conformed(t) for t in self._query.finish())
        query = self._join_query(self._staged.names[_LEFT])
        if query is None:
            return itertools.chain(self._replayed([]), self._fallback_finish())
        return self._ended(self._joined(query))

    def _join_query(self, left_relation: str) -> JoinQuery | None:
        """The join of ``left_relation`` with the staged build side (a side with no batch
        staged as an empty table of its planned columns); None: the Arrow operator's."""
        planned = self.original.planned_schemas
        left, right = (self._schemas[i] or planned[i] for i in range(_SIDES))
        on = self.original.on
        if left is None or right is None or not (duck_types(left, on) and duck_types(right, on)):
            return None
        query = join_query(
            left,
            right,
            (left_relation, self._staged.names[_RIGHT]),
            on,
            self.original.how,
            self.original.right_suffix,
        )
        if query is None:
            return None
        for index, schema in ((_LEFT, left), (_RIGHT, right)):
            self._staged.stage_empty(schema, index)
        self._output = query.output
        return query

    def _streamed(self, table: pa.Table) -> Iterable[pa.Table]:
        """Push probe batch ``table`` into the streamed join, started on the first."""
        if self._query is None:
            staged = self._staged.names[_LEFT]
            query = self._join_query(f"(SELECT * FROM {staged} UNION ALL SELECT * FROM input)")
            if query is None:
                return self._replayed([(table, _LEFT)])
            self._streamed_optimizers()
            self.stream(query.sql, table.schema)
        assert self._query is not None
        return [self._conformed(t) for t in self._query.push(table)]

    def _streamed_optimizers(self) -> None:
        """Turn off two of DuckDB's optimizers for the streamed join (``_OFF``).

        ``build_side_probe_side`` builds a hash join on the side with fewer estimated
        rows, and DuckDB estimates a stream at one row: it would then read every probe
        row before the first row out, holding them all (5M probe rows x 100k build rows:
        257 MiB and 0.7-1.3 s, against 12 MiB and 0.2 s with the build side as written).
        ``join_filter_pushdown`` pushes the build keys' range into the probe stream's
        scan as a pyarrow expression, which loses a timestamp's nanoseconds (rows go
        missing) and fails on a uint64 past 2^63.  The setting is global to the task's
        database: an ``sql`` operator of the same task plans its queries without these
        two as well (its results are the same; a join in it may be slower).
        """
        disabled = str(self.context.database.setting("disabled_optimizers") or "")
        names = {n.strip() for n in disabled.split(",") if n.strip()}
        if not names.issuperset(_OFF):
            value = ",".join(sorted(names.union(_OFF)))
            self._staged.execute(f"SET disabled_optimizers = '{value}'")

    def _conformed(self, table: pa.Table) -> pa.Table:
        assert self._output is not None
        self._emitted = self._emitted or table.num_rows > 0
        return conform(table, self._output, f"join {self.what}")

    def _fallback_finish(self) -> Iterator[pa.Table]:
        assert self._fallback is not None
        yield from self._fallback.finish()

    # -- staging --------------------------------------------------------------------------

    def _replayed(self, pending: list[tuple[pa.Table, int]]) -> list[pa.Table]:
        """Hand the join to the Arrow operator: the staged rows (read back with their
        input's types), then ``pending``; what it emits for them."""
        fallback = self.fall_back()
        out: list[pa.Table] = []
        for index in range(_SIDES):
            schema = self._schemas[index]
            if index not in self._staged or schema is None:
                continue
            name = self._staged.names[index]
            reader = self._staged.execute(f"SELECT * FROM {name}").to_arrow_reader(OUTPUT_ROWS)
            for batch in reader:
                rows = conform(pa.Table.from_batches([batch]), schema, f"join {self.what}")
                out.extend(fallback.process(rows, index))
            self._staged.drop(index)
            if index == _RIGHT and self._build_ended:  # as the task told this operator
                out.extend(fallback.end_input(_RIGHT))
        for table, index in pending:
            out.extend(fallback.process(table, index))
        return out

    # -- the join -------------------------------------------------------------------------

    def _joined(self, query: JoinQuery) -> Iterator[pa.Table]:
        """The staged join's rows, conformed."""
        try:
            reader = self._staged.execute(query.sql).to_arrow_reader(OUTPUT_ROWS)
            for batch in reader:
                yield self._conformed(pa.Table.from_batches([batch]))
        except duckdb.Error as e:  # raised while the reader streams
            raise query_error(e, self.what) from e

    def _ended(self, tables: Iterable[pa.Table]) -> Iterator[pa.Table]:
        """``tables`` (the join's last rows), then its peaks recorded and the temp tables
        dropped; a zero-row table if the join gave no row (the schema still travels)."""
        for table in tables:
            if table.num_rows:
                yield table
        self.record()
        for index in range(_SIDES):
            self._staged.drop(index)
        if not self._emitted and self._output is not None:
            yield self._output.empty_table()
