"""The SQL of a join whose output equals pyarrow's ``Table.join``, column for column.

The Arrow join operators (``HashJoin``, ``SortMergeJoin``) give pyarrow's join
schema for each ``how`` (``join_types``): key columns appear once, a right column
whose name the left has gets ``right_suffix``; a right join has the left non-key
columns, then every right column (its keys from the right side); a full join
coalesces the keys of both sides; semi and anti keep only the left columns.
``join_query`` writes the one query that gives those columns in that order, over two
relations (the staged inputs, or the left one streamed), or ``None`` when its layout
would not be pyarrow's (an empty ``right_suffix`` on a collision, say): the twin
then hands the join to the Arrow operator.

SQL's ``=`` is never true for a null, so null keys never match, as in pyarrow;
an anti join is ``NOT EXISTS``, which keeps a left row with a null key (``NOT
IN`` would drop it), and a semi join ``EXISTS``, which keeps each left row once
however many right rows match.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from hybrid_shuffle.operators.duck.twin import quote
from hybrid_shuffle.operators.join_types import JOIN_TYPES

__all__ = ["JoinQuery", "join_query", "pyarrow_output"]

_JOINS = {"inner": "JOIN", "left": "LEFT JOIN", "right": "RIGHT JOIN", "full": "FULL OUTER JOIN"}


@dataclass(frozen=True)
class JoinQuery:
    """The query and the schema its rows are conformed to (pyarrow's join schema)."""

    sql: str
    output: pa.Schema


def pyarrow_output(
    left: pa.Schema, right: pa.Schema, on: Sequence[str], how: str, right_suffix: str
) -> pa.Schema:
    """The schema pyarrow's join of two empty inputs has: the Arrow kernels' output."""
    return (
        left.empty_table()
        .join(
            right.empty_table(),
            keys=list(on),
            join_type=JOIN_TYPES[how],
            right_suffix=right_suffix,
            use_threads=False,
        )
        .schema
    )


def join_query(
    left: pa.Schema,
    right: pa.Schema,
    relations: tuple[str, str],
    on: Sequence[str],
    how: str,
    right_suffix: str,
) -> JoinQuery | None:
    """The join of ``relations`` (SQL: a quoted table name or a parenthesized query; left,
    right) whose columns are ``left`` and ``right``'s (see the module docstring)."""
    output = pyarrow_output(left, right, on, how, right_suffix)
    keys = set(on)

    def right_name(name: str) -> str:
        return name + right_suffix if name in left.names else name

    def col(side: str, name: str) -> str:
        return f"{side}.{quote(name)}"

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
