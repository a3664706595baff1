"""``Stream.sql``: a DuckDB query over each subtask's input, which it names ``input``.

SQL runs on the task's DuckDB (``TaskDatabase``): its threads, its
``memory_limit`` and its spill directory.

**Binding.**  The planner asks ``output_schema`` before anything runs; the
operator then *binds* the query: it runs it on an empty table of the input's
schema in a throwaway DuckDB connection (``threads=1``), which gives the
output schema, and a bad query (syntax, unknown column or function) is a
``PlanError`` naming the operator before any task starts.  When the input's
schema is unknown at plan time (after a ``map_batches``), the query is bound
on the first batch instead, and its errors surface while the job runs.

**Classification.**  DuckDB's own physical plan of the bound query (the operators
its profiler saw in that run on empty input: ``EXPLAIN``'s plan) says how it
runs: if every physical operator is a scan of ``input``, a projection or a
filter, and ``input`` is scanned once, the query is *per-row* and runs on each
batch as it comes (``output_on_eof`` False);
anything else (a group-by, an aggregate, an order, a window, DISTINCT, LIMIT,
a join) needs all of the subtask's input and emits at end of input
(``output_on_eof`` True, so FLIP-331's rule makes its input edges batch; see
``plan.output_on_eof``).  Reading the plan rather than the text means the
optimizer's view decides, not a parser of our own.  The planner reads
``output_on_eof`` only after it asked every node's ``output_schema``
(``plan_job``: schemas are checked before the graph is built), so binding in
``output_schema`` is in time; an operator whose input schema is unknown keeps
the conservative class defaults (end of input, a share of memory) for
planning and classifies its query on its first batch.

**Running.**  A per-row query runs on each batch registered as ``input`` on
the operator's cursor: no thread, no state.  A blocking query that scans
``input`` once is a ``StreamedQuery``: it consumes a pipelined or hybrid
input as it arrives and spills within ``memory_limit``.  One that scans it
more than once (a self-join, a scalar subquery over ``input``) cannot read a
stream twice, so its input is staged into a DuckDB temp table named
``input`` as batches arrive (DuckDB spills that too) and the query runs at
finish.  A query that fails on the data (a cast that cannot be made) is a
``QueryFailedError`` naming the operator: fatal, so the job is not retried.

**Several inputs** (``inputs=n``, what a translated Spark stage needs: a join's
two sides, a broadcast build side, a scalar subquery's value): input 0 is
``input``, input *i* is ``input<i>``.  Inputs 1.. are staged into temp tables as
they arrive; input 0 streams through the query once every other input has
ended, or is staged too if it arrives earlier.  Such a query needs its inputs'
end, unless the translation says input 0 flows through it row by row
(``streams``: a hash join's probe side) and the query reads it once: then it
emits while input 0 arrives, and only inputs 1.. are output-on-EOF
(``output_on_eof_of``); the input 0 batches that come before the others ended
are held (within a quarter of its memory) and go into the query first.

**Input 0 read by DuckDB** (``read_input_from``): a source task whose split DuckDB
can read itself (a Parquet split: ``sources.duck_scan``) hands the query that
split as a ``DuckRelation`` instead of pushing batches.  At ``finish`` input 0 is
a view over the relation's SQL and the query runs once over it, whatever its
class (per-row or not, one scan of ``input`` or several): decoding, the query's
filter (pushed into the scan) and its operators are one DuckDB pipeline, whose
output streams out in batches.  Inputs 1.. are staged first, as always.

**Variables** (``variables``, name -> a scalar SQL expression over inputs 1..): once
inputs 1.. are staged and before the query first runs, each is set on the query's
connection (``SET VARIABLE``), where the query reads it with ``getvariable``.  DuckDB's
optimizer folds a variable as a constant, so a branch of the query a variable turns
off is not planned at all: a translated stage's runtime filter lets every row pass
this way when its keys are too many (``sparkplan.built_first``).  A query must read
an unset variable (NULL) as its default: it is bound without them, and a rewrite of
the graph that moves it into another query keeps them only where its inputs keep
their numbers (a join switch taking in the probe producer's query).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import duckdb
import pyarrow as pa

from hybrid_shuffle.empty_column import EMPTY_COLUMN, placeholder
from hybrid_shuffle.errors import PlanError, summary
from hybrid_shuffle.operators.base import Columns, Operator
from hybrid_shuffle.operators.context import OperatorContext
from hybrid_shuffle.operators.duck.lowering import conform
from hybrid_shuffle.operators.duck.planning_database import planning_cursor
from hybrid_shuffle.operators.duck.staging import StagedInputs, hold_bytes
from hybrid_shuffle.operators.duck.streamed_query import (
    OUTPUT_ROWS,
    StreamedQuery,
    close_query,
    query_error,
)

__all__ = ["DuckRelation", "SqlBinding", "SqlQuery", "bind", "rejection"]

#: the physical operators of a per-row query (``EXPLAIN``'s names; a filter is often
#: pushed into the scan; a union of such branches over ``input``, a Spark ``Expand``,
#: still makes each output row of one input row)
_PER_ROW = frozenset({"ARROW_SCAN", "PROJECTION", "FILTER", "UNION"})
#: how a registered Arrow table (``input``) is scanned in DuckDB's plan
_INPUT_SCAN = "ARROW_SCAN"


@dataclass(frozen=True)
class SqlBinding:
    """What binding a query against an input schema found (see the module docstring)."""

    #: the input schema it was bound against
    input_schema: pa.Schema
    #: the query's output schema
    schema: pa.Schema
    #: every physical operator is a scan, projection or filter, over one scan of input (or
    #: a union of such branches)
    per_row: bool
    #: how many times the plan scans ``input``
    input_scans: int


class DuckRelation(Protocol):
    """Rows DuckDB reads itself (``SqlQuery.read_input_from``): a ``SELECT`` over files."""

    def sql(self) -> str:
        """The ``SELECT`` whose rows are the input."""
        ...

    def read_error(self, error: BaseException) -> Exception | None:
        """The error to raise for a DuckDB error reading the rows (a file gone or
        corrupt), or ``None`` if ``error`` is the query's own."""
        ...


def _connection() -> duckdb.DuckDBPyConnection:
    """A cursor of the process's planning database (``duck.planning_database``)."""
    return planning_cursor()


def _no_python_scans(cursor: duckdb.DuckDBPyConnection) -> None:
    """Keep a table name in the query from resolving to a Python variable of the caller's
    frame (DuckDB's replacement scans): ``input`` is the only table there is."""
    cursor.execute("SET python_enable_replacements = false")


def _profiled_operators(nodes: list[Any]) -> Iterator[str]:
    """The names of every physical operator in DuckDB's profile of a query run (the
    tree under the profile's root, as ``EXPLAIN`` names them)."""
    for node in nodes:
        yield str(node.get("operator_name", ""))
        yield from _profiled_operators(node.get("children", []))


def _countable(schema: pa.Schema) -> pa.Schema:
    """``schema``, or the placeholder column's if it has no column."""
    return schema if schema.names else pa.schema([(EMPTY_COLUMN, pa.null())])


def _with_rows(table: pa.Table) -> pa.Table:
    """``table``, or its rows as the placeholder column if it has no column."""
    if table.num_columns:
        return table
    return placeholder(table.num_rows)


def input_name(index: int) -> str:
    """The table name input ``index`` has in the query: ``input``, ``input1``, ..."""
    return "input" if index == 0 else f"input{index}"


def bind(query: str, schema: pa.Schema, what: str, others: Sequence[pa.Schema] = ()) -> SqlBinding:
    """Bind ``query`` over an empty ``input`` of ``schema`` (and ``input1``.. of
    ``others``); a ``PlanError`` naming ``what`` (``sql 'name'``) and DuckDB's first
    line if DuckDB rejects it."""
    schema, others = _countable(schema), [_countable(o) for o in others]
    connection = _connection()
    try:
        connection.register("input", schema.empty_table())
        for i, other in enumerate(others, start=1):
            connection.register(input_name(i), other.empty_table())
        # one planning of the query gives both: its result's schema, and (DuckDB's
        # profiler on, writing nowhere) the physical operators it ran, which are
        # ``EXPLAIN``'s; an ``EXPLAIN`` of its own planned the query a second time (433
        # binds of TPC-H's stages replayed alone: 2.22 s with it, 1.93 s without)
        connection.execute("SET enable_profiling = 'no_output'")
        out = connection.execute(query).to_arrow_table().schema
        profile = json.loads(connection.get_profiling_information(format="json"))
        names = list(_profiled_operators(profile.get("children", [])))
    except duckdb.Error as e:
        raise PlanError(f"{what}: DuckDB cannot run the query: {summary(e)}") from e
    finally:
        connection.close()
    # with other inputs the plan does not say which scan is ``input``'s: count the
    # query's references to it instead (a translated stage names each once per scan)
    scans = names.count(_INPUT_SCAN) if not others else _references(query, "input")
    per_row = not others and (scans == 1 or "UNION" in names) and all(n in _PER_ROW for n in names)
    return SqlBinding(schema, out, per_row, scans)


def rejection(query: str, tables: Mapping[str, pa.Schema]) -> str | None:
    """DuckDB's first line if it cannot run ``query`` over empty tables of ``tables``
    (name -> schema), else ``None``: the plan-time check of a query built from parts (a
    translated Spark stage), which says which part DuckDB rejects before anything runs."""
    connection = _connection()
    try:
        for name, schema in tables.items():
            connection.register(name, schema.empty_table())
        connection.execute(query).fetch_arrow_table()
    except duckdb.Error as e:
        return summary(e)
    finally:
        connection.close()
    return None


def _references(query: str, table: str) -> int:
    return len(re.findall(rf"\b{table}\b(?!\.)", query))


class SqlQuery(Operator):
    """A DuckDB query over the subtask's input (``input``); see the module docstring.

    The class defaults are the conservative ones of a query not bound yet: it emits at
    end of input and gets a share of ``operators.memory``.
    """

    output_on_eof = True
    uses_memory = True
    # per-task state (``open``); set here too so that ``close`` works before ``open``
    _cursor: duckdb.DuckDBPyConnection | None = None
    _query: StreamedQuery | None = None
    _relation: DuckRelation | None = None
    _own_context = False

    def __init__(
        self,
        query: str,
        name: str,
        inputs: int = 1,
        streams: bool = False,
        variables: Mapping[str, str] | None = None,
    ) -> None:
        if not isinstance(query, str) or not query.strip():
            raise PlanError(
                f"sql '{name}': the query must be a non-empty string of SQL naming its input "
                f"'input', got {query!r}"
            )
        self.query = query.strip().rstrip(";")
        self.name = name
        self.num_inputs = inputs
        #: with several inputs: input 0's rows flow through the query one by one (a
        #: translated stage's probe side, ``Rel.streams``), so once the other inputs ended
        #: the query emits while input 0 arrives, if it reads input 0 once
        self.streams = streams
        #: name -> a scalar expression over inputs 1.., set before the query runs
        self.variables = dict(variables or {})
        self.binding: SqlBinding | None = None

    @property
    def what(self) -> str:
        return f"sql '{self.name}'"

    def describe(self) -> str:
        if self.binding is None:
            return f"{self.name} (sql)"
        how = "per batch" if self.binding.per_row else "at end of input"
        if self._streams_input(self.binding):
            how = "streams input 0 once the others ended"
        return f"{self.name} (sql, {how})"

    # -- planning -------------------------------------------------------------------------

    def output_schema(self, input_schemas: Sequence[pa.Schema | None]) -> pa.Schema | None:
        input_schemas = [None if s is None else _countable(s) for s in input_schemas]
        schema = input_schemas[0]
        others = [o for o in input_schemas[1:] if o is not None]
        if schema is None or len(others) != len(input_schemas) - 1:
            return None
        planned = [schema, *others]
        if self.binding is not None and getattr(self, "_planned", None) == planned:
            return self.binding.schema  # bound on these schemas already (a translation's check)
        self._planned: list[pa.Schema] = planned
        self._adopt(bind(self.query, schema, self.what, others))
        assert self.binding is not None
        return self.binding.schema

    def bind_as(self, input_schemas: Sequence[pa.Schema], schema: pa.Schema) -> None:
        """Bind the query on ``input_schemas`` as giving ``schema``, without DuckDB: for a
        rewrite of the graph that only moved a bound query's parts, whose output is
        known (``plan.join_switch``: DuckDB took 20-30 ms to plan a switched join's fused
        query on the driver, between two stages).  Several inputs only: then the query
        is never per-row and its scans of ``input`` are counted in its text, as ``bind``
        does; with one, whether it is per-row takes DuckDB's plan (``output_schema``).
        A query DuckDB rejects then fails in its task, not here; the task's output is
        cast to ``schema`` (``conform``), the schema the graph was planned with."""
        planned = [_countable(s) for s in input_schemas]
        if len(planned) < 2:
            raise ValueError(f"{self.what}: bind_as needs several inputs, got {len(planned)}")
        self._planned = planned
        self._adopt(SqlBinding(planned[0], schema, False, _references(self.query, "input")))

    @property
    def planned_inputs(self) -> list[pa.Schema]:
        """The input schemas the query was bound on when planned (empty: not bound), one
        per input: what a rewrite of the graph binds a query built from this one on."""
        return list(getattr(self, "_planned", []))

    def _adopt(self, binding: SqlBinding) -> None:
        """Take ``binding``'s class: what the planner and the task read of the operator."""
        self.binding = binding
        self.output_on_eof = not binding.per_row and not self._streams_input(binding)
        self.uses_memory = not binding.per_row
        self.needs_context = binding.per_row  # the task's database, no memory of its own

    def _streams_input(self, binding: SqlBinding) -> bool:
        """Input 0 streams through the query (see ``streams``)."""
        return self.streams and self.num_inputs > 1 and binding.input_scans == 1

    def output_on_eof_of(self, input_index: int) -> bool:
        """A query streaming input 0 emits before input 0 ends, never before the others
        did (they are staged whole first)."""
        if self.binding is not None and self._streams_input(self.binding):
            return input_index != 0
        return self.output_on_eof

    def input_columns(self, wanted: Columns) -> list[Columns]:
        return [None] * self.num_inputs  # the engine cannot see which columns the SQL reads

    # -- running --------------------------------------------------------------------------

    def open(self, context: OperatorContext | None = None) -> None:
        self._own_context = context is None
        self.context = context if context is not None else OperatorContext.unbounded()
        self._cursor = None
        self._query = None
        self._relation = None
        #: inputs read whole, each in a temp table named as the query names it
        self._staged = StagedInputs(
            lambda: self.cursor,
            [input_name(i) for i in range(self.num_inputs)],
            self.what,
            hold_bytes=hold_bytes(self.context.memory),
        )
        self._ended: set[int] = set()
        #: input 0's batches held while the other inputs have not ended (``streams``)
        self._early: list[pa.Table] = []
        self._early_bytes = 0
        self._schemas: dict[int, pa.Schema] = {}

    @property
    def cursor(self) -> duckdb.DuckDBPyConnection:
        if self._cursor is None:
            self._cursor = self.context.database.cursor()
            _no_python_scans(self._cursor)
        return self._cursor

    @property
    def reads_relations(self) -> bool:
        """``read_input_from`` may be called: the query was bound when planned (on the
        schema the relation has)."""
        return self.binding is not None

    def read_input_from(self, relation: DuckRelation) -> None:
        """Input 0 is ``relation``, read by the query's DuckDB, instead of pushed batches
        (see the module docstring); call after ``open``, before any batch of input 0,
        and only if ``reads_relations``.  ``finish`` runs the query over it."""
        if self.binding is None:
            raise PlanError(f"{self.what}: its input's schema was not known when planned")
        self._relation = relation

    def _bound(self, schema: pa.Schema) -> SqlBinding:
        if self.binding is None:  # the planner did not know the input schema
            self.binding = bind(self.query, schema, self.what)
        return self.binding

    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        table = _with_rows(table)
        if self.num_inputs > 1:
            return self._process_one_of_many(table, input_index)
        binding = self._bound(table.schema)
        if binding.per_row:
            return self._per_batch(table, binding.schema)
        if binding.input_scans == 1:
            if self._query is None:
                self._query = StreamedQuery(
                    self.cursor, self.query, table.schema, self.what, self.context.wait_timeout
                )
            return [self._conform(t) for t in self._query.push(table)]
        self._staged.stage(table)
        return ()

    def _process_one_of_many(self, table: pa.Table, index: int) -> Iterable[pa.Table]:
        """Stage inputs 1.. (and input 0 while any of them has not ended); stream input 0
        once they all have, if the query reads it once.  A query that ``streams`` holds
        the input 0 batches that arrive before that (the inputs' batches come
        interleaved) within a quarter of its memory and pushes them first; past that it
        stages input 0 too, and runs at the end."""
        if self.binding is None:
            raise PlanError(f"{self.what}: its inputs' schemas were not known when planned")
        self._schemas.setdefault(index, table.schema)
        ready = self._ended >= set(range(1, self.num_inputs))
        if index == 0 and 0 not in self._staged and self.binding.input_scans == 1:
            if ready:
                return self._stream(table)
            if self.streams and self._early_bytes + table.nbytes <= self.context.memory // 4:
                self._early.append(table)
                self._early_bytes += table.nbytes
                return ()
        if index == 0:
            self._stage_early()
        self._staged.stage(table, index)
        return ()

    def _stream(self, table: pa.Table) -> list[pa.Table]:
        """Input 0's ``table`` through the streamed query (started by the first, which
        also pushes the held early batches)."""
        out: list[pa.Table] = []
        if self._query is None:
            self._stage_missing(1)
            self._staged.flush()
            self._set_variables()
            self._query = StreamedQuery(
                self.cursor, self.query, table.schema, self.what, self.context.wait_timeout
            )
            for early in self._early:
                out.extend(self._query.push(early))
            self._early, self._early_bytes = [], 0
        out.extend(self._query.push(table))
        return [self._conform(t) for t in out]

    def _stage_missing(self, first: int) -> None:
        """Stage inputs ``first``.. that sent no batch as empty tables of their schema (the
        one a batch or ``set_input_schema`` gave, else the planned one)."""
        for i in range(first, self.num_inputs):
            self._staged.stage_empty(self._schemas.get(i) or self._planned[i], i)

    def _stage_early(self) -> None:
        """Stage the held input 0 batches (the query will run at the end)."""
        for early in self._early:
            self._staged.stage(early, 0)
        self._early, self._early_bytes = [], 0

    def end_input(self, input_index: int) -> Iterable[pa.Table]:
        self._ended.add(input_index)
        return ()

    def _finish_many(self) -> Iterable[pa.Table]:
        if self._query is not None:  # input 0 streamed
            return self._recorded(self._conform(t) for t in self._query.finish())
        assert self.binding is not None
        self._stage_early()  # input 0 ended before the others did
        self._stage_missing(0)
        self._staged.flush()
        self._set_variables()
        return self._recorded(self._run_staged())

    def _set_variables(self) -> None:
        """Set ``variables`` on the cursor (inputs 1.. staged and written)."""
        for name, expression in self.variables.items():
            try:
                self.cursor.execute(f"SET VARIABLE {name} = ({expression})")
            except duckdb.Error as e:
                raise query_error(e, self.what) from e

    def finish(self) -> Iterable[pa.Table]:
        if self._relation is not None:
            return self._recorded(self._run_over(self._relation))
        if self.num_inputs > 1:
            return self._finish_many()
        binding = self.binding
        if binding is None:  # no batch and no schema: nothing to run the query on
            return ()
        if binding.per_row:
            return ()
        if binding.input_scans == 1:
            if self._query is None:  # no batch: the query runs on an empty input
                empty = binding.input_schema
                self._query = StreamedQuery(
                    self.cursor, self.query, empty, self.what, self.context.wait_timeout
                )
            return self._recorded(self._conform(t) for t in self._query.finish())
        if not self._staged:
            self._staged.stage(binding.input_schema.empty_table())
        return self._recorded(self._run_staged())

    def _per_batch(self, table: pa.Table, schema: pa.Schema) -> list[pa.Table]:
        cursor = self.cursor
        cursor.register("input", table)
        try:
            out = cursor.execute(self.query).to_arrow_table()
        except duckdb.Error as e:
            raise query_error(e, self.what) from e
        finally:
            cursor.unregister("input")
        return [conform(out, schema, self.what)] if out.num_rows else []

    def _run_staged(self) -> Iterator[pa.Table]:
        try:
            reader = self._staged.execute(self.query).to_arrow_reader(OUTPUT_ROWS)
            for batch in reader:
                yield self._conform(pa.Table.from_batches([batch]))
        except duckdb.Error as e:
            raise query_error(e, self.what) from e

    def _run_over(self, relation: DuckRelation) -> Iterator[pa.Table]:
        """The query over ``relation`` as ``input`` (inputs 1.. staged, an empty table for
        one that had no batch), its output streamed as DuckDB makes it."""
        self._stage_missing(1)
        self._staged.flush()
        self._set_variables()
        cursor = self.cursor
        try:
            cursor.execute(f"CREATE TEMP VIEW input AS {relation.sql()}")
            # a relation streams its result (``execute`` would make all of it first)
            for batch in cursor.sql(self.query).to_arrow_reader(OUTPUT_ROWS):
                yield self._conform(pa.Table.from_batches([batch]))
        except duckdb.Error as e:
            raise (relation.read_error(e) or query_error(e, self.what)) from e

    def _conform(self, table: pa.Table) -> pa.Table:
        assert self.binding is not None
        return conform(table, self.binding.schema, self.what)

    def _recorded(self, tables: Iterable[pa.Table]) -> Iterator[pa.Table]:
        """``tables``, then the finished query's DuckDB peaks in the operator's metrics."""
        yield from tables
        if self._cursor is None:
            return
        self.context.hold(self.context.record_query(self._cursor, self._query))

    def close(self) -> None:
        close_query(self._query, self._cursor)
        self._query, self._cursor = None, None
        if self._own_context:  # opened outside a task: the database is the operator's
            self.context.database.close()
            self._own_context = False
