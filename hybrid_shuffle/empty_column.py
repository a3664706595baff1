"""The placeholder column of a relation that has rows but no column.

Arrow tables of no column cannot carry a row count into DuckDB, a Parquet read of no
column or a Spark hand-over of none (``SELECT count(*)`` over a pruned scan, a
``SELECT`` without ``FROM``, a join side that contributes no column): such a step
carries one column of nulls instead, named ``EMPTY_COLUMN``, which never reaches the
user (``Stream.collect`` drops it for a translated result of no column).
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["EMPTY_COLUMN", "EMPTY_SELECT", "placeholder"]

EMPTY_COLUMN = "__hs_empty"

#: the item a SQL ``SELECT`` of no column selects instead (DuckDB has no empty SELECT)
EMPTY_SELECT = f"NULL AS {EMPTY_COLUMN}"


def placeholder(rows: int) -> pa.Table:
    """``rows`` rows of no column: the placeholder column, one null per row."""
    return pa.table({EMPTY_COLUMN: pa.nulls(rows)})
