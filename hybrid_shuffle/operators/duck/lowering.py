"""The SQL the Stream API's stateful operators run on DuckDB, and their output back.

Every query text the DuckDB operators run is written here, from the operator's
parameters and its input's schema, so that what DuckDB is asked is read in one
place: the ``GROUP BY`` of an aggregate (``aggregate_query``), the window of a
top-n (``top_n_query``), the ``ORDER BY`` of a sort and of co_group's sorters
(``sort_query``), and the join of two relations (``join_query``).  A query's
rows come back through ``conform``: cast to the types the operator planned.

Every query keeps pyarrow's semantics, which the planner's schemas and the
tests' oracle are: nulls last in both directions; a float sort key ordered as
an expression (``sort_key``), so that its ``-0.0`` values come out as they went
in; an aggregate's partials in the columns and types ``Aggregation`` uses, an
integer sum wrapped as pyarrow's (DuckDB sums in int128: ``_wrapped``), a float
``max`` that skips NaN unless a key has nothing else, a decimal sum of Spark's
type whose overflow is a ``PlanError`` (``conform``), never a wrapped value.

The join's columns are pyarrow's ``Table.join``'s, column for column: key
columns appear once, a right column whose name the left has gets
``right_suffix``; a right join has the left non-key columns, then every right
column (its keys from the right side); a full join coalesces the keys of both
sides; semi and anti keep only the left columns.  ``join_query`` returns
``None`` when its layout would not be pyarrow's (an empty ``right_suffix`` on a
collision).  SQL's ``=`` is never true for a null, so null keys never match, as
in pyarrow; an anti join is ``NOT EXISTS``, which keeps a left row with a null
key (``NOT IN`` would drop it), and a semi join ``EXISTS``, which keeps each
left row once however many right rows match.

Where DuckDB's semantics differ from pyarrow's on an input (float keys, where
DuckDB ties ``0.0`` with ``-0.0`` and every NaN; a type the round trip through
DuckDB does not keep; names that differ only in case), the operators stage the
input encoded (``encoding.Encoding``): a query refers to each column by the
name it is staged under (``names``, every input column's; the identity when
omitted), and ``conform`` decodes its output (``encoding.decoded``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import pyarrow as pa
import pyarrow.compute as pc

from hybrid_shuffle.errors import PlanError
from hybrid_shuffle.operators.aggregation import Aggregation, spark_sum_types
from hybrid_shuffle.operators.duck.encoding import decoded
from hybrid_shuffle.operators.join_types import pyarrow_output
from hybrid_shuffle.operators.top_n import TopN

__all__ = [
    "JoinQuery",
    "aggregate_query",
    "conform",
    "join_query",
    "quote",
    "sort_key",
    "sort_query",
    "top_n_query",
]

# -- names, keys, types -------------------------------------------------------------------

#: no column renamed (``names``' default)
_SAME: Mapping[str, str] = MappingProxyType({})


def quote(name: str) -> str:
    """``name`` as a DuckDB identifier (any character, quotes doubled)."""
    return '"' + name.replace('"', '""') + '"'


def _ref(name: str, names: Mapping[str, str]) -> str:
    """Column ``name`` as the query refers to it: its staged name, quoted."""
    return quote(names.get(name, name))


def sort_key(name: str, schema: pa.Schema, names: Mapping[str, str], descending: bool) -> str:
    """Column ``name`` of ``schema`` as ORDER BY terms in pyarrow's order, nulls last.

    DuckDB writes a float column it sorts on back from its normalized sort key, so
    ``-0.0`` came out as ``0.0``; ordering by ``column + 0.0`` (the same order: the
    zeros tie) keeps the column itself a payload.  DuckDB's NaN is above every
    number, pyarrow's after every number in both directions: descending, ``isnan``
    orders first."""
    direction = "DESC" if descending else "ASC"
    ref = _ref(name, names)
    if not pa.types.is_floating(schema.field(name).type):
        return f"{ref} {direction} NULLS LAST"
    key = f"({ref} + 0.0) {direction} NULLS LAST"
    return f"isnan({ref}) ASC NULLS LAST, {key}" if descending else key


def conform(table: pa.Table, schema: pa.Schema, what: str) -> pa.Table:
    """``table`` (DuckDB's output) with ``schema``'s column names and types, each column
    decoded from its staging encoding (``encoding.decoded``) and cast; a value that
    does not fit its type (a decimal sum past its precision) is a ``PlanError``
    naming it."""
    if table.schema.types == schema.types:
        return table if table.schema.names == schema.names else table.rename_columns(schema.names)
    columns = []
    for column, field in zip(table.columns, schema, strict=True):
        column = decoded(column, field.type)
        if column.type == field.type:
            columns.append(column)
            continue
        try:
            columns.append(pc.cast(column, field.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise PlanError(
                f"{what}: column '{field.name}' does not fit {field.type} ({e}); cast the "
                "input column to a wider type first"
            ) from e
    return pa.Table.from_arrays(columns, schema=schema)


# -- sort ---------------------------------------------------------------------------------


def sort_query(
    by: Sequence[str], descending: bool, schema: pa.Schema, names: Mapping[str, str] = _SAME
) -> str:
    """Every row of ``input`` (of ``schema``) ordered by ``by`` as pyarrow orders them
    (``sort_key``: nulls last in both directions, NaN just before them)."""
    order = ", ".join(sort_key(c, schema, names, descending) for c in by)
    return f"SELECT * FROM input ORDER BY {order}"


# -- aggregate and top-n ------------------------------------------------------------------

#: partial -> its SQL on raw rows; ``{c}`` is the column
_ON_ROWS = {
    "sum": "sum({c})",
    "count": "count({c})",
    "min": "min({c})",
    "max": "max({c})",
    "fsum": "sum(CAST({c} AS DOUBLE))",
}
#: partial -> its SQL merging partials
_MERGING = {"sum": "sum({c})", "count": "sum({c})", "min": "min({c})", "max": "max({c})"}
_MERGING["fsum"] = _MERGING["sum"]
_ROW_NUMBER = "__hs_row"
_TWO_64 = 1 << 64


def _wrapped(expression: str, kind: pa.DataType) -> str:
    """An integer sum (DuckDB's int128) wrapped into pyarrow's sum type for a column of
    ``kind``: int64 for a signed column, uint64 for an unsigned one, modulo 2^64 as
    pyarrow's own ``sum`` wraps; any other expression as it is."""
    if pa.types.is_signed_integer(kind):
        low = 1 << 63
        wrapped = f"(({expression}) % {_TWO_64} + {_TWO_64 + low}) % {_TWO_64} - {low}"
        return f"CAST({wrapped} AS BIGINT)"
    if pa.types.is_unsigned_integer(kind):
        return f"CAST((({expression}) % {_TWO_64} + {_TWO_64}) % {_TWO_64} AS UBIGINT)"
    return expression


def aggregate_query(
    agg: Aggregation, on_rows: bool, schema: pa.Schema, names: Mapping[str, str] = _SAME
) -> tuple[str, pa.Schema]:
    """The GROUP BY of ``input`` (of ``schema``) giving one row of fully combined partials
    per key, and the partials' schema.  ``on_rows``: the input is rows (phase
    ``complete``), else partials (``final``, ``merge``)."""
    sql = _ON_ROWS if on_rows else _MERGING
    columns = [_ref(k, names) for k in agg.keys]
    for column, partial in agg.partials:
        read = column if on_rows else f"{column}_{partial}"
        source = _ref(read, names)
        if on_rows and partial == "fsum" and pa.types.is_decimal(schema.field(column).type):
            expression = f"sum({source})"  # exact; divided in float64 by ``results``
        else:
            expression = sql[partial].format(c=source)
        kind = schema.field(read).type
        if partial == "sum":
            expression = _wrapped(expression, kind)
        elif partial == "max" and pa.types.is_floating(kind):
            # pyarrow's max skips NaN unless a group has nothing else; DuckDB's NaN
            # is above every number (its min already skips it so)
            numbers = f"max({source}) FILTER (WHERE NOT isnan({source}))"
            expression = f"coalesce({numbers}, max({source}))"
        columns.append(f"{expression} AS {quote(f'{column}_{partial}')}")
    keys = ", ".join(_ref(k, names) for k in agg.keys)
    query = f"SELECT {', '.join(columns)} FROM input GROUP BY {keys}"
    if on_rows:
        target = agg.partial_schema(schema)
        types = spark_sum_types(schema, agg.partials)
        target = pa.schema([f.with_type(types.get(f.name, f.type)) for f in target])
    else:
        partials = [*agg.keys, *(f"{c}_{p}" for c, p in agg.partials)]
        target = pa.schema([schema.field(n) for n in partials])
    return query, target


def top_n_query(top: TopN, schema: pa.Schema, names: Mapping[str, str] = _SAME) -> str:
    """``row_number()`` over each key's rows in ``TopN``'s total order (``by``, then every
    other column ascending, nulls last), keeping the first ``n``; a key's rows come out
    together, best first."""
    order = [sort_key(b, schema, names, not top.ascending) for b in top.by]
    ties = [n for n in schema.names if n not in top.keys and n not in top.by]
    order += [sort_key(t, schema, names, False) for t in ties]
    partition = ", ".join(_ref(k, names) for k in top.keys)
    columns = ", ".join(_ref(n, names) for n in schema.names)
    ranked = (
        f"SELECT *, row_number() OVER (PARTITION BY {partition} ORDER BY "
        f"{', '.join(order)}) AS {_ROW_NUMBER} FROM input"
    )
    keys = ", ".join(f"{_ref(k, names)} NULLS LAST" for k in top.keys)
    return (
        f"SELECT {columns} FROM ({ranked}) WHERE {_ROW_NUMBER} <= {int(top.n)} "
        f"ORDER BY {keys}, {_ROW_NUMBER}"
    )


# -- join ---------------------------------------------------------------------------------

_JOINS = {"inner": "JOIN", "left": "LEFT JOIN", "right": "RIGHT JOIN", "full": "FULL OUTER JOIN"}


@dataclass(frozen=True)
class JoinQuery:
    """The query and the schema its rows are conformed to (pyarrow's join schema)."""

    sql: str
    output: pa.Schema


def join_query(
    left: pa.Schema,
    right: pa.Schema,
    relations: tuple[str, str],
    on: Sequence[str],
    how: str,
    right_suffix: str,
    names: tuple[Mapping[str, str], Mapping[str, str]] = (_SAME, _SAME),
) -> JoinQuery | None:
    """The join of ``relations`` (SQL: a quoted table name or a parenthesized query; left,
    right) whose columns are ``left`` and ``right``'s, staged under ``names`` (see the
    module docstring)."""
    output = pyarrow_output(left, right, on, how, right_suffix)
    keys = set(on)

    def right_name(name: str) -> str:
        return name + right_suffix if name in left.names else name

    def col(side: str, name: str) -> str:
        return f"{side}.{_ref(name, names[0] if side == 'l' else names[1])}"

    right_payload = [(col("r", n), right_name(n)) for n in right.names if n not in keys]
    columns: list[tuple[str, str]]
    if how in ("inner", "left", "semi", "anti"):
        columns = [(col("l", n), n) for n in left.names]
        if how in ("inner", "left"):
            columns += right_payload
    elif how == "full":
        columns = [
            (f"coalesce({col('l', n)}, {col('r', n)})" if n in keys else col("l", n), n)
            for n in left.names
        ]
        columns += right_payload
    else:  # right
        columns = [(col("l", n), n) for n in left.names if n not in keys]
        columns += [(col("r", n), n if n in keys else right_name(n)) for n in right.names]
    if [name for _, name in columns] != output.names:
        return None
    select = ", ".join(f"{e} AS {quote(f'c{i}')}" for i, (e, _) in enumerate(columns))
    condition = " AND ".join(f"{col('l', k)} = {col('r', k)}" for k in on)
    left_table, right_table = relations
    if how in ("semi", "anti"):
        exists = "EXISTS" if how == "semi" else "NOT EXISTS"
        sql = (
            f"SELECT {select} FROM {left_table} AS l WHERE {exists} "
            f"(SELECT 1 FROM {right_table} AS r WHERE {condition})"
        )
    else:
        sql = (
            f"SELECT {select} FROM {left_table} AS l {_JOINS[how]} {right_table} AS r "
            f"ON {condition}"
        )
    return JoinQuery(sql, output)
