"""Spark expressions -> DuckDB SQL with Spark's semantics (one table, a support level each).

``compile_expression(node, scope)`` turns one resolved Spark expression (a
``tree.Node``) into ``Sql``: DuckDB text, the Spark type it has, and whether it
can be null.  The translators are registered per Spark class in ``TABLE`` by
the modules of this package (``arithmetic``, ``numeric``, ``predicates``,
``strings``, ``datetime``, ``casts``, ``misc``, ``bitwise``, ``collections``), each with
a ``Support`` level, as Comet keeps one serde per expression:
``docs/guide/spark-plans.md`` lists the table.  An expression with no entry, or
whose translator raises ``Unsupported``, makes its operator fall back to Spark
(``sparkplan.fallback``).

Spark has resolved every type and inserted its casts; a translator computes
the value and, where DuckDB would type the result differently (decimal
arithmetic, ``year``), casts it to the type Spark gave.  The non-ANSI evaluation
mode is the one translated: a division by zero or an invalid cast gives null, as in
Spark 3.5's default.  Under ANSI evaluation (Spark 4's default) Spark raises there
and gives the same value everywhere else; the plan's JSON does not carry an
expression's mode (``evalMode``, ``evalContext``: null), so the translation cannot
raise as Spark does.
"""

from __future__ import annotations

from hybrid_shuffle.sparkplan.expressions.core import (
    TABLE,
    Scope,
    Sql,
    Support,
    Unsupported,
    compile_expression,
    compile_value,
    quote,
    register,
)

# the translators register themselves on import
from hybrid_shuffle.sparkplan.expressions import (  # noqa: F401  isort: skip
    arithmetic,
    binary,
    bitwise,
    casts,
    collections,
    datetime,
    misc,
    numeric,
    predicates,
    strings,
)

__all__ = [
    "TABLE",
    "Scope",
    "Sql",
    "Support",
    "Unsupported",
    "compile_expression",
    "compile_value",
    "quote",
    "register",
]
