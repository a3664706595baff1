"""The join types the engine offers, in one place every join operator reads.

The user names a join type the short way (``how="left"``); pyarrow's
``Table.join`` takes its own names (``"left outer"``).  ``JOIN_TYPES`` maps
one to the other for every join operator (hash join, sort-merge join), so
they accept the same words and a misspelt one is refused the same way, before
the job runs, by ``check_how``.  ``pyarrow_output`` is a join's output schema:
pyarrow's join of the two empty inputs.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from hybrid_shuffle.errors import PlanError

__all__ = ["JOIN_TYPES", "check_how", "pyarrow_output"]

#: ``how`` as the user writes it -> pyarrow's ``join_type``
JOIN_TYPES: dict[str, str] = {
    "inner": "inner",
    "left": "left outer",
    "right": "right outer",
    "full": "full outer",
    "semi": "left semi",
    "anti": "left anti",
}


def check_how(how: str, name: str) -> str:
    """pyarrow's join type for ``how``; ``PlanError`` naming join ``name`` and the
    supported values when it is not one of them."""
    try:
        return JOIN_TYPES[how]
    except KeyError:
        raise PlanError(
            f"join '{name}': how='{how}' is not supported; use one of: {', '.join(JOIN_TYPES)}"
        ) from None


def pyarrow_output(
    left: pa.Schema, right: pa.Schema, on: Sequence[str], how: str, right_suffix: str
) -> pa.Schema:
    """The schema pyarrow's join of two empty inputs has: a join operator's output."""
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
