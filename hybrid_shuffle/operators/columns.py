"""The column checks every operator and the planner use, and pruning's projection.

A missing column or a key of a type that cannot be hashed or compared is a
``PlanError`` raised before anything runs (the planner calls these through
``Operator.output_schema``), naming the operator, the column and what to do.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pyarrow as pa

from hybrid_shuffle.errors import PlanError

__all__ = ["project", "require_columns", "require_key_columns"]


def require_columns(schema: pa.Schema, columns: Iterable[str], what: str) -> None:
    """Every column is in ``schema``; ``what`` names the operator (``sort 'top'``)."""
    for column in columns:
        if column not in schema.names:
            raise PlanError(
                f"{what}: column '{column}' not in input; columns are: {', '.join(schema.names)}"
            )


def require_key_columns(schema: pa.Schema, keys: Iterable[str], what: str) -> None:
    """Every key is in ``schema`` and of a type rows can be hashed and grouped by
    (not a list, struct, map or union: Arrow neither hashes nor orders those)."""
    keys = list(keys)
    require_columns(schema, keys, what)
    for key in keys:
        key_type = schema.field(key).type
        if pa.types.is_nested(key_type) or (
            pa.types.is_dictionary(key_type) and pa.types.is_nested(key_type.value_type)
        ):
            raise PlanError(
                f"{what}: key column '{key}' is {key_type}, which cannot be hashed or "
                "compared; key by scalar columns (flatten the struct or list first)"
            )


def project(names: Sequence[str], keep: frozenset[str] | None) -> list[str] | None:
    """The columns of ``names`` to keep, in their order; ``None`` when that is all of them
    (so the caller can skip the copy-free but not free ``select``)."""
    if keep is None:
        return None
    kept = [n for n in names if n in keep]
    return None if len(kept) == len(names) else kept
