"""``SqlQuery``: binding at plan time, classification from DuckDB's plan, and the three
ways it runs (per batch, streamed, staged), each equal to DuckDB on the whole input."""

from __future__ import annotations

import pickle
from collections.abc import Iterable

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from hybrid_shuffle.config import load_config
from hybrid_shuffle.errors import PlanError, QueryFailedError
from hybrid_shuffle.operators.context import UNBOUNDED, OperatorContext
from hybrid_shuffle.operators.duck.database import TaskDatabase
from hybrid_shuffle.operators.sql import SqlQuery
from hybrid_shuffle.plan.graph import ModeOrigin
from hybrid_shuffle.plan.planner import ExchangeSpec, LogicalNode, plan_job
from hybrid_shuffle.shuffle.routing import Partitioner, PartitionerKind

from .builders import Builder

TABLE = pa.table(
    {
        "k": ["a", "b", "a", None, "c", "b", "a", "c"],
        "v": [5, 3, None, 7, 1, 8, 2, 4],
        "x": [0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5],
    }
)

PER_ROW = {
    "projection": "SELECT k, v * 2 AS w, upper(k) AS u FROM input",
    "filter": "SELECT * FROM input WHERE v > 3",
    "both": "SELECT k, x + 1 AS y FROM input WHERE k IS NOT NULL AND x < 5",
    # Spark's Expand: each input row once per projection
    "union of projections": (
        "(SELECT k, v FROM input WHERE x > 1) UNION ALL (SELECT k, NULL::BIGINT AS v FROM input)"
    ),
}
BLOCKING = {
    "group by": "SELECT k, sum(v) AS s, count(*) AS n FROM input GROUP BY k",
    "order by": "SELECT * FROM input ORDER BY v",
    "window": "SELECT k, v, row_number() OVER (PARTITION BY k ORDER BY v) AS r FROM input",
    "unpartitioned window": "SELECT v, row_number() OVER () AS r FROM input",
    "aggregate": "SELECT count(*) AS n, max(x) AS m FROM input",
    "distinct": "SELECT DISTINCT k FROM input",
    "limit": "SELECT * FROM input LIMIT 3",
    "self-join": "SELECT a.k, a.v, b.v AS w FROM input a JOIN input b ON a.k = b.k",
    "scalar subquery": "SELECT * FROM input WHERE v > (SELECT avg(v) FROM input)",
    "no input": "SELECT 42 AS answer",
}


def bound(query: str, name: str = "q") -> SqlQuery:
    op = SqlQuery(query, name)
    op.output_schema([TABLE.schema])
    return op


def run(op: SqlQuery, batches: Iterable[pa.Table]) -> pa.Table:
    """Open ``op``, push ``batches`` in the task's call order, close it; its output."""
    op.open()
    try:
        out = [t for batch in batches for t in op.process(batch)]
        out += list(op.end_input(0))
        out += list(op.finish())
    finally:
        op.close()
    assert op.binding is not None
    return pa.concat_tables(out) if out else op.binding.schema.empty_table()


def whole(query: str, table: pa.Table = TABLE) -> pa.Table:
    """DuckDB's answer on the whole input: the oracle."""
    connection = duckdb.connect(config={"threads": 1})
    try:
        connection.register("input", table)
        return connection.execute(query).to_arrow_table()
    finally:
        connection.close()


def rows(table: pa.Table) -> list[tuple[object, ...]]:
    return sorted(
        (tuple(r.values()) for r in table.to_pylist()),
        key=lambda r: tuple((v is None, str(v)) for v in r),
    )


def batches(size: int) -> list[pa.Table]:
    return [TABLE.slice(i, size) for i in range(0, TABLE.num_rows, size)]


# -- binding --------------------------------------------------------------------------------


def test_binding_gives_duckdbs_output_schema() -> None:
    op = SqlQuery("SELECT k, v * 2 AS w, x::VARCHAR AS s FROM input", "q")
    schema = op.output_schema([TABLE.schema])
    assert schema == pa.schema([("k", pa.string()), ("w", pa.int64()), ("s", pa.string())])
    assert op.describe() == "q (sql, per batch)"


@pytest.mark.parametrize("query", PER_ROW.values(), ids=list(PER_ROW))
def test_a_projection_or_filter_streams(query: str) -> None:
    op = bound(query)
    assert op.binding is not None and op.binding.per_row
    assert (op.output_on_eof, op.uses_memory, op.needs_context) == (False, False, True)


@pytest.mark.parametrize("query", BLOCKING.values(), ids=list(BLOCKING))
def test_anything_but_a_projection_or_filter_emits_at_end_of_input(query: str) -> None:
    op = bound(query)
    assert op.binding is not None and not op.binding.per_row
    assert (op.output_on_eof, op.uses_memory) == (True, True)
    assert op.describe() == "q (sql, at end of input)"


def test_an_unknown_input_schema_plans_conservatively() -> None:
    op = SqlQuery("SELECT k FROM input", "q")
    assert op.output_schema([None]) is None
    assert (op.output_on_eof, op.uses_memory, op.binding) == (True, True, None)
    assert op.input_columns(frozenset({"k"})) == [None]


@pytest.mark.parametrize(
    "query, duckdb_says",
    [
        ("SELEC k FROM input", "Parser Error: syntax error at or near"),
        ("SELECT nope FROM input", 'Binder Error: Referenced column "nope" not found'),
        ("SELECT no_such_fn(k) FROM input", "Catalog Error: Scalar Function with name"),
        ("SELECT * FROM other", "Catalog Error: Table with name other does not exist"),
    ],
)
def test_a_bad_query_is_a_one_sentence_plan_error_naming_the_operator(
    query: str, duckdb_says: str
) -> None:
    with pytest.raises(PlanError) as err:
        SqlQuery(query, "bad").output_schema([TABLE.schema])
    message = str(err.value)
    assert message.startswith("sql 'bad': DuckDB cannot run the query: ")
    assert duckdb_says in message
    assert "\n" not in message


@pytest.mark.parametrize("query", ["", "   ", None, 42])
def test_the_query_must_be_a_non_empty_string(query: object) -> None:
    with pytest.raises(PlanError, match="sql 'q': the query must be a non-empty string"):
        SqlQuery(query, "q")  # type: ignore[arg-type]


def test_a_bound_operator_pickles_with_its_class() -> None:
    op = pickle.loads(pickle.dumps(bound(BLOCKING["group by"])))
    assert op.binding is not None and op.output_on_eof and op.uses_memory
    op.close()  # before open: nothing to let go of


def test_the_planner_sees_the_class_the_binding_gave() -> None:
    """``output_schema`` runs before the output-on-EOF rule reads ``output_on_eof``."""

    def plan(query: str) -> ModeOrigin:
        b = Builder()
        source = b.source("orders", 2)
        spec = ExchangeSpec(Partitioner(PartitionerKind.HASH, ("customer",)), "by_customer")
        node = LogicalNode(next(b.ids), "q", SqlQuery(query, "q"), [(source, spec)])
        graph = plan_job("sql", node, load_config(None), slots=8).graph
        return graph.edge("by_customer").mode_origin

    assert plan("SELECT customer, sum(amount) AS s FROM input GROUP BY customer") is (
        ModeOrigin.OUTPUT_ON_EOF
    )
    assert plan("SELECT customer FROM input WHERE amount > 1") is ModeOrigin.DEFAULT


# -- running --------------------------------------------------------------------------------


@pytest.mark.parametrize("query", PER_ROW.values(), ids=list(PER_ROW))
def test_per_batch_equals_duckdb_on_the_whole_input(query: str) -> None:
    op = bound(query)
    got = run(op, batches(3))
    assert op.binding is not None and got.schema == op.binding.schema
    assert rows(got) == rows(whole(query))


@pytest.mark.parametrize("query", BLOCKING.values(), ids=list(BLOCKING))
def test_a_blocking_query_equals_duckdb_on_the_whole_input(query: str) -> None:
    got = run(bound(query), batches(3))
    expected = whole(query)
    if "LIMIT" in query:  # which rows is not defined; how many is
        assert got.num_rows == expected.num_rows
    else:
        assert rows(got) == rows(expected)


def test_a_query_reading_input_twice_is_staged_and_runs_at_finish() -> None:
    query = BLOCKING["scalar subquery"]
    op = bound(query)
    assert op.binding is not None and op.binding.input_scans == 2
    op.open()
    try:
        assert [list(op.process(b)) for b in batches(3)] == [[], [], []]
        got = pa.concat_tables(list(op.finish()))
    finally:
        op.close()
    assert rows(got) == rows(whole(query)) != []


def test_an_unknown_schema_is_bound_on_the_first_batch() -> None:
    op = SqlQuery(PER_ROW["filter"], "q")
    op.output_schema([None])
    assert rows(run(op, batches(4))) == rows(whole(PER_ROW["filter"]))
    assert op.binding is not None and op.binding.per_row


@pytest.mark.parametrize("staged", [False, True])
def test_no_batch_at_all_runs_the_query_on_an_empty_input(staged: bool) -> None:
    query = "SELECT count(*) AS n FROM input"
    if staged:
        query += " WHERE v < (SELECT max(v) FROM input)"
    assert run(bound(query), []).to_pylist() == [{"n": 0}]


@pytest.mark.parametrize(
    "query",
    [
        "SELECT CAST(k AS INTEGER) AS i FROM input",
        "SELECT CAST(k AS INTEGER) AS i, count(*) AS n FROM input GROUP BY i",
        "SELECT * FROM input WHERE CAST(k AS INTEGER) > (SELECT count(*) FROM input)",
    ],
    ids=["per batch", "streamed", "staged"],
)
def test_a_query_failing_on_the_data_is_a_query_failed_error_naming_the_operator(
    query: str,
) -> None:
    with pytest.raises(QueryFailedError) as err:
        run(bound(query, "casts"), batches(3))
    message = str(err.value)
    assert message.startswith("sql 'casts': DuckDB failed on the data: Conversion Error")
    assert "\n" not in message


def test_a_python_variable_is_not_a_table() -> None:
    """DuckDB's replacement scans would read a variable of the frame that runs the query
    (the operator's ``table`` argument) as a table: ``input`` is the only one."""
    op = bound(PER_ROW["projection"])
    op.query = 'SELECT * FROM "table"'  # bound as another query: run it as this one
    with pytest.raises(QueryFailedError, match="Table with name table does not exist"):
        run(op, batches(3))


def test_a_query_that_stops_reading_early_drops_the_batches_after_it() -> None:
    """``LIMIT`` ends DuckDB's query before its input ends: pushing on must not wait for a
    reader that is gone (the wait would time out), and closing ends its generator."""
    op = bound("SELECT * FROM input LIMIT 3")
    op.open(OperatorContext(UNBOUNDED, wait_timeout=5))
    try:
        out = [t for _ in range(40) for t in op.process(TABLE)]
        out += list(op.finish())
    finally:
        op.close()
    assert sum(t.num_rows for t in out) == 3


def test_two_queries_of_one_chain_share_the_task_database_without_seeing_each_other() -> None:
    """Each operator has a cursor of its own: its ``input`` (a view, or a staged table)
    is not the other's."""
    database = TaskDatabase()
    contexts = [OperatorContext(UNBOUNDED, database=database) for _ in range(3)]
    first = bound(PER_ROW["filter"], "first")
    second = SqlQuery("SELECT k, count(*) AS n FROM input GROUP BY k", "second")
    assert first.binding is not None
    second.output_schema([first.binding.schema])
    third = bound(BLOCKING["scalar subquery"], "third")
    for op, context in zip([first, second, third], contexts, strict=True):
        op.open(context)
    try:
        out: list[pa.Table] = []
        staged: list[pa.Table] = []
        for batch in batches(3):
            staged += third.process(batch)
            for t in first.process(batch):
                out += second.process(t)
        out += second.finish()
        staged += third.finish()
    finally:
        for op in (first, second, third):
            op.close()
        database.close()
    expected = whole("SELECT k, count(*) AS n FROM input WHERE v > 3 GROUP BY k")
    assert rows(pa.concat_tables(out)) == rows(expected)
    assert rows(pa.concat_tables(staged)) == rows(whole(BLOCKING["scalar subquery"]))


# -- two inputs, input 0 streamed (a translated hash join's probe side) -------------------

DIM = pa.table({"k": ["a", "b", None, "d"], "name": ["A", "B", "N", "D"]})
JOIN = "SELECT p.k, p.v, d.name FROM input AS p JOIN input1 AS d ON p.k = d.k"


def joined(streams: bool) -> SqlQuery:
    op = SqlQuery(JOIN, "joined", inputs=2, streams=streams)
    op.output_schema([TABLE.schema, DIM.schema])
    return op


def run_interleaved(op: SqlQuery, memory: int) -> pa.Table:
    """Input 0's batches before, between and after input 1's, as gates deliver them."""
    probe, build = batches(2), [DIM.slice(0, 2), DIM.slice(2)]
    op.open(OperatorContext(memory))
    out: list[pa.Table] = []
    try:
        out += op.process(probe[0], 0)
        out += op.process(build[0], 1)
        out += op.process(probe[1], 0)
        out += op.process(build[1], 1)
        out += op.end_input(1)
        out += op.process(probe[2], 0)
        out += op.process(probe[3], 0)
        out += op.end_input(0)
        out += op.finish()
    finally:
        op.close()
    return pa.concat_tables(out)


def oracle_join() -> pa.Table:
    connection = duckdb.connect(config={"threads": 1})
    try:
        connection.register("input", TABLE)
        connection.register("input1", DIM)
        return connection.execute(JOIN).to_arrow_table()
    finally:
        connection.close()


def test_a_streaming_query_emits_before_input_0_ends_and_needs_only_input_1_whole() -> None:
    op = joined(streams=True)
    assert (op.output_on_eof, op.output_on_eof_of(0), op.output_on_eof_of(1)) == (
        False,
        False,
        True,
    )
    assert op.describe() == "joined (sql, streams input 0 once the others ended)"
    blocking = joined(streams=False)
    assert (blocking.output_on_eof_of(0), blocking.output_on_eof_of(1)) == (True, True)


@pytest.mark.parametrize("memory", [64 << 20, 16], ids=["held", "staged"])
@pytest.mark.parametrize("streams", [True, False], ids=["streams", "whole"])
def test_a_two_input_query_equals_duckdb_whatever_order_its_inputs_arrive_in(
    streams: bool, memory: int
) -> None:
    """Input 0's early batches are held (within a quarter of the memory) and pushed
    first, or staged with the rest when they do not fit: the answer is DuckDB's."""
    got = run_interleaved(joined(streams), memory)
    assert rows(got) == rows(oracle_join())


# -- variables set from inputs 1.. before the query runs (a runtime filter's cap) ---------

#: every row when input 1 holds more than 3 rows, else the rows input 1's keys match (the
#: shape ``sparkplan`` gives a runtime filter of a side computed first)
EVERY = "coalesce(getvariable('hs_every'), false)"
CAPPED = (
    f"WITH l AS NOT MATERIALIZED (SELECT k, v FROM input) SELECT k, v FROM l WHERE {EVERY} "
    f"UNION ALL SELECT k, v FROM l SEMI JOIN "
    f"(SELECT * FROM input1 AS b WHERE NOT {EVERY}) AS d ON l.k = d.k"
)


def capped(streams: bool) -> SqlQuery:
    op = SqlQuery(
        CAPPED,
        "capped",
        inputs=2,
        streams=streams,
        variables={"hs_every": "(SELECT count(*) FROM input1) > 3"},
    )
    op.output_schema([TABLE.schema, DIM.schema])
    return op


@pytest.mark.parametrize("memory", [64 << 20, 16], ids=["held", "staged"])
@pytest.mark.parametrize("streams", [True, False], ids=["streams", "whole"])
def test_a_variable_set_from_input_1_chooses_the_querys_branch(streams: bool, memory: int) -> None:
    """Input 1's 4 rows pass the cap of 3, so every row of input 0 comes out (and input 0
    still streams: the query reads it once); unset, the variable means the semi join."""
    op = capped(streams)
    assert op.output_on_eof_of(0) is not streams
    got = run_interleaved(op, memory)
    assert rows(got) == rows(TABLE.select(["k", "v"]))
    unset = SqlQuery(CAPPED, "unset", inputs=2, streams=streams)
    unset.output_schema([TABLE.schema, DIM.schema])
    matched = pc.is_in(TABLE["k"], value_set=DIM["k"], skip_nulls=True)
    semi = TABLE.filter(matched).select(["k", "v"])
    assert rows(run_interleaved(unset, memory)) == rows(semi)
