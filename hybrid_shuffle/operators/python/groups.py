"""Rows of equal keys side by side: the grouping a grouped Python function needs.

``applyInPandas`` and a grouped-aggregate pandas UDF see each group whole, so the
operator must find the groups of its partition; Spark sorts for that, and so does
this kernel (Arrow's sort, then one vectorized comparison of neighbours per key
column).  Keys compare as Spark groups them: null equals null, NaN equals NaN,
and ``-0.0`` equals ``0.0``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["group_runs", "groupable"]


def groupable(data_type: pa.DataType) -> bool:
    """Whether a key column of ``data_type`` can be grouped here (atomic types only)."""
    return not (
        pa.types.is_nested(data_type)
        or pa.types.is_dictionary(data_type)
        or pa.types.is_null(data_type)
    )


def group_runs(keys: pa.Table) -> tuple[pa.Array, np.ndarray]:
    """The order that puts equal keys next to each other (``keys.take(order)``), and the
    offsets in that order where each group starts, with the row count last: group ``i``
    is ``order[starts[i]:starts[i + 1]]``.  No key column: one group of every row."""
    rows = keys.num_rows
    if rows == 0:
        return pa.array([], pa.int64()), np.zeros(1, dtype=np.int64)
    if keys.num_columns == 0:
        return pa.array(np.arange(rows, dtype=np.int64)), np.array([0, rows], dtype=np.int64)
    order = pc.sort_indices(
        keys, sort_keys=[(name, "ascending", "at_start") for name in keys.column_names]
    )
    ordered = keys.take(order)
    changed = np.zeros(rows - 1, dtype=bool)
    for column in ordered.itercolumns():
        values = column.combine_chunks()
        after, before = values.slice(1), values.slice(0, rows - 1)
        same = pc.fill_null(pc.equal(after, before), False)
        same = pc.or_(same, pc.and_(after.is_null(), before.is_null()))
        if pa.types.is_floating(values.type):
            both_nan = pc.and_(pc.is_nan(after), pc.is_nan(before))
            same = pc.or_(same, pc.fill_null(both_nan, False))
        changed |= ~same.to_numpy(zero_copy_only=False)
    starts = np.concatenate(([0], np.flatnonzero(changed) + 1, [rows])).astype(np.int64)
    return order, starts
