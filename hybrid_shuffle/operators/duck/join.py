"""Hash and sort-merge join on DuckDB: inputs staged in temp tables, joined by one query.

Runs ``HashJoin`` and ``SortMergeJoin`` (every ``how`` of ``join_types``).  A join reads
two inputs that arrive interleaved, so the streamed reader of the aggregate and the sort
does not fit: DuckDB reads a join's build side whole before the probe side, and a reader
blocking on one input's queue while the task has a batch of the other would deadlock.
So each batch is appended to a DuckDB TEMP table of its input as it arrives
(``staging.StagedInputs``, which ``sql`` stages with too), and ``finish`` runs one join
query (``lowering.join_query``) and streams its rows out, conformed to pyarrow's join
schema.  An inner, left, semi or anti join (whose output row needs one probe row and the
build rows: ``STREAMED``) does better once its build side ended: a ``StreamedQuery``
then joins the probe rows staged so far and every
probe batch after, pushed as it comes, with the staged build side, so its rows flow out
while the probe side is still arriving (a broadcast join's large probe side is never
staged).  An inner or left join on one integer key whose build side ended within a
quarter of the memory, with unique keys that form a dense run, does not query DuckDB
at all: its build rows are read back and indexed by key (``dense_index.DenseIndex``),
and every probe batch is joined by one NumPy gather (the probe rows staged before
included), 7x cheaper than the DuckDB join for a 12,500-row dimension.

DuckDB keeps the staged rows and the join's hash table within the task's
``memory_limit``, spilling both to the task's temp directory. The peaks recorded are
the join query's (DuckDB keeps no profile of an ``INSERT``; the join's temp directory
peak holds the staged rows that spilled).

Each batch is staged encoded (``encoding.Encoding``): float keys as their bits, so
that ``0.0`` and ``-0.0`` match only themselves and a NaN only the same NaN, as in
pyarrow's join; types and names DuckDB would not give back come back as they were.
A side with no batch is an empty table of its planned columns (``planned_schemas``,
remembered by the planning operator's ``output_schema``).  A side whose columns
nobody knows (no batch, none planned) has no row: the join gives the rows that need
none of its columns (an anti join's left rows), nothing, or ``SchemaMismatchError``
when rows of the other side would need them (``_unknown_side``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Literal

import duckdb
import pyarrow as pa

from hybrid_shuffle.errors import SchemaMismatchError
from hybrid_shuffle.operators.co_group import check_key_types
from hybrid_shuffle.operators.context import OperatorContext
from hybrid_shuffle.operators.dense_index import DenseIndex
from hybrid_shuffle.operators.duck.base import DuckOperator
from hybrid_shuffle.operators.duck.encoding import Encoding
from hybrid_shuffle.operators.duck.lowering import JoinQuery, conform, join_query, quote
from hybrid_shuffle.operators.duck.staging import StagedInputs, hold_bytes
from hybrid_shuffle.operators.duck.streamed_query import OUTPUT_ROWS, query_error
from hybrid_shuffle.operators.join import Join

__all__ = ["STREAMED", "DuckJoin"]

_SIDES = 2
_LEFT, _RIGHT = 0, 1
_SIDE_NAMES = ("left", "right")
#: per ``how``, the sides whose columns the other side's unmatched rows need
_NEEDED = {"left": (_RIGHT,), "right": (_LEFT,), "full": (_LEFT, _RIGHT)}
#: the joins a probe batch can be answered for as soon as the build side ended
STREAMED = ("inner", "left", "semi", "anti")
#: DuckDB's optimizers the streamed join turns off (``_streamed_optimizers`` says why)
_OFF = ("build_side_probe_side", "join_filter_pushdown")
#: the joins a dense index answers (``dense_index``): one output row per probe row at most
_DENSE = ("inner", "left")


class DuckJoin(DuckOperator):
    """``HashJoin`` or ``SortMergeJoin`` on DuckDB (see the module docstring)."""

    original: Join

    def __init__(self, original: Join) -> None:
        super().__init__(original)

    def open(self, context: OperatorContext | None = None) -> None:
        super().open(context)
        #: per input, the schema of its first batch
        self._schemas: list[pa.Schema | None] = [None, None]
        #: per input, how its batches are staged (made by its first batch)
        self._encodings: list[Encoding | None] = [None, None]
        #: per input, whether it sent a row
        self._rows = [False, False]
        #: the inputs staged in temp tables (``staging``)
        self._staged = StagedInputs(
            lambda: self.cursor,
            [quote(f"__hs_join_{id(self):x}_{i}") for i in range(_SIDES)],
            self.what,
            hold_bytes=hold_bytes(self.context.memory),
        )
        self._build_ended = False
        #: the schema the join's rows are conformed to, once its query started
        self._output: pa.Schema | None = None
        self._emitted = False
        #: bytes of the build side's batches (whether a dense index may read it back)
        self._build_bytes = 0
        #: the build side indexed by key and its rows (``_dense_join``); False: not
        #: eligible; None: not decided yet
        self._dense: tuple[DenseIndex, pa.Table] | Literal[False] | None = None

    # -- arrival --------------------------------------------------------------------------

    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        if self._schemas[input_index] is None:
            self._schemas[input_index] = table.schema
            check_key_types(self._schemas, self.original.on, f"join '{self.original.name}'")
        self._rows[input_index] = self._rows[input_index] or table.num_rows > 0
        if input_index == _RIGHT:
            self._build_bytes += table.nbytes
        if input_index == _LEFT and self._build_ended and self.original.how in STREAMED:
            if self._query is None and self._dense is not False:
                joined = self._dense_join(table)
                if joined is not None:
                    return joined
            return self._streamed(table)
        self._staged.stage(self._encoding(input_index).encode(table), input_index)
        return ()

    def _encoding(self, index: int) -> Encoding:
        """How input ``index`` is staged: by its first batch's schema, else the planned."""
        encoding = self._encodings[index]
        if encoding is None:
            schema = self._schemas[index] or self.original.planned_schemas[index]
            assert schema is not None, "a side with no columns is never staged"
            encoding = self._encodings[index] = Encoding(schema, self.original.on)
        return encoding

    def end_input(self, input_index: int) -> Iterable[pa.Table]:
        if input_index == _RIGHT:
            self._build_ended = True
        return ()

    def finish(self) -> Iterable[pa.Table]:
        if self._query is not None:
            return self._ended(self._conformed(t) for t in self._query.finish())
        if self._dense is not False:
            joined = self._dense_join(None)
            if joined is not None:
                return self._ended(joined)
        query = self._join_query(self._staged.names[_LEFT])
        if query is None:
            return self._unknown_side()
        return self._ended(self._joined(query))

    def _known(self) -> tuple[pa.Schema | None, pa.Schema | None]:
        """Both inputs' schemas: of their first batch, else planned; None if neither."""
        planned = self.original.planned_schemas
        left, right = (self._schemas[i] or planned[i] for i in range(_SIDES))
        return left, right

    def _join_query(self, left_relation: str) -> JoinQuery | None:
        """The join of ``left_relation`` with the staged build side (a side with no batch
        staged as an empty table of its planned columns); None if a side's columns are
        unknown."""
        left, right = self._known()
        if left is None or right is None:
            return None
        encodings = (self._encoding(_LEFT), self._encoding(_RIGHT))
        query = join_query(
            left,
            right,
            (left_relation, self._staged.names[_RIGHT]),
            self.original.on,
            self.original.how,
            self.original.right_suffix,
            (encodings[_LEFT].names, encodings[_RIGHT].names),
        )
        if query is None:
            raise SchemaMismatchError(
                f"join {self.what}: the columns of pyarrow's join of these inputs cannot be "
                "written as one query; rename the colliding columns before the join"
            )
        for index in (_LEFT, _RIGHT):
            self._staged.stage_empty(encodings[index].staged, index)
        self._output = query.output
        return query

    def _unknown_side(self) -> Iterator[pa.Table]:
        """The output when a side's columns are unknown (it sent no batch, none planned, so
        it has no row): nothing, the left rows as they are (an anti join), or
        ``SchemaMismatchError`` when rows of the other side would need its columns."""
        how = self.original.how
        try:
            for index in (_LEFT, _RIGHT):
                other = 1 - index
                if self._known()[index] is not None or not self._rows[other]:
                    continue
                if how == "anti":  # the right side is the unknown one: no left row matches
                    yield from self._staged_rows(_LEFT)
                    return
                if index in _NEEDED.get(how, ()):
                    side, rows = _SIDE_NAMES[index], _SIDE_NAMES[other]
                    raise SchemaMismatchError(
                        f"join {self.what}: the {side} input sent this subtask no row and "
                        "its columns were not known when the job was planned (an operator "
                        f"such as map_batches makes them), so the {rows} rows of this {how} "
                        f"join cannot be given the {side} side's columns; compute the {side} "
                        "side's columns before from_arrow, or join first and map after"
                    )
        finally:
            for index in range(_SIDES):
                self._staged.drop(index)

    def _staged_rows(self, index: int) -> Iterator[pa.Table]:
        """Input ``index``'s staged rows, read back with their types (from the batches
        still held, if none was written to its table)."""
        schema = self._schemas[index]
        if index not in self._staged or schema is None:
            return
        held = self._staged.held(index)
        if held is not None:
            for table in held:
                yield conform(table, schema, f"join {self.what}")
            return
        name = self._staged.names[index]
        reader = self._staged.execute(f"SELECT * FROM {name}").to_arrow_reader(OUTPUT_ROWS)
        for batch in reader:
            yield conform(pa.Table.from_batches([batch]), schema, f"join {self.what}")

    # -- a dense index instead of DuckDB -------------------------------------------------

    def _dense_join(self, table: pa.Table | None) -> list[pa.Table] | None:
        """Probe batch ``table`` (and, the first time, the probe rows staged before)
        joined through the build side's dense index; None if the join is not one
        (``_dense_index``: decided once)."""
        staged: list[pa.Table] = []
        if self._dense is None:
            self._dense = self._dense_index() or False
            if self._dense is not False:
                staged = list(self._staged_rows(_LEFT))
                self._staged.drop(_LEFT)
        if not isinstance(self._dense, tuple):
            return None
        index, build = self._dense
        probes = [*staged, *([table] if table is not None else [])]
        return [self._dense_probe(index, build, t) for t in probes if t.num_rows]

    def _dense_index(self) -> tuple[DenseIndex, pa.Table] | None:
        """The build side's rows and their index, if the join is an inner or left join on
        one integer key whose ended build side holds at most a quarter of the memory and
        whose keys are dense and unique, their slots within an eighth of it
        (``DenseIndex.of``); else None."""
        how, on = self.original.how, self.original.on
        if how not in _DENSE or len(on) != 1 or not self._build_ended:
            return None
        if not self._rows[_RIGHT] or self._build_bytes > self.context.memory // 4:
            return None
        if self._join_query(self._staged.names[_LEFT]) is None:  # the output's schema
            return None
        build = pa.concat_tables(self._staged_rows(_RIGHT)).combine_chunks()
        # the slots (8 bytes each) take at most an eighth of the memory
        index = DenseIndex.of(build.column(on[0]), self.context.memory // 64)
        if index is None:
            return None
        self.context.hold(build.nbytes + index.nbytes)
        return index, build

    def _dense_probe(self, index: DenseIndex, build: pa.Table, table: pa.Table) -> pa.Table:
        """Probe batch ``table`` joined with the build rows its keys index: pyarrow's join
        columns (every left column, then the right side's others), conformed."""
        assert self._output is not None
        rows = index.positions(table.column(self.original.on[0]))
        matched = rows >= 0
        if self.original.how == "inner":
            if not matched.all():
                table, rows = table.filter(pa.array(matched)), rows[matched]
            taken = pa.array(rows)
        else:  # left: an unmatched probe row takes nulls
            taken = pa.array(rows, mask=~matched)
        keys = set(self.original.on)
        right = [build.column(n).take(taken) for n in build.column_names if n not in keys]
        left_schema = self._known()[_LEFT]
        assert left_schema is not None  # the output's schema was made from it
        columns = [*table.select(left_schema.names).columns, *right]
        return self._conformed(pa.Table.from_arrays(columns, names=self._output.names))

    def _streamed(self, table: pa.Table) -> Iterable[pa.Table]:
        """Push probe batch ``table`` into the streamed join, started on the first."""
        encoding = self._encoding(_LEFT)
        if self._query is None:
            staged = self._staged.names[_LEFT]
            query = self._join_query(f"(SELECT * FROM {staged} UNION ALL SELECT * FROM input)")
            if query is None:  # the right side's columns unknown: no row to join with
                return [table] if self.original.how == "anti" and table.num_rows else []
            self._streamed_optimizers()
            self._staged.flush()
            self.stream(query.sql, encoding.staged)
        assert self._query is not None
        return [self._conformed(t) for t in self._query.push(encoding.encode(table))]

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
