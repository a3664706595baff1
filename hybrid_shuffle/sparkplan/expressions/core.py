"""The expression table, the scope an expression is compiled in, and ``compile_expression``."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from hybrid_shuffle.operators.duck.lowering import quote
from hybrid_shuffle.sparkplan.tree import Node
from hybrid_shuffle.sparkplan.types import SparkType, UnsupportedType, spark_type

__all__ = [
    "TABLE",
    "Scope",
    "Sql",
    "Support",
    "Translator",
    "Unsupported",
    "compile_expression",
    "compile_value",
    "int_literal",
    "quote",
    "register",
    "register_value",
]


class Unsupported(Exception):
    """An expression (or operator) the engine does not translate; the message says which
    and why, and is what ``explain_data()["spark_subtrees"]`` reports."""


class Support(enum.Enum):
    """How faithfully a translator follows Spark (Comet's levels)."""

    #: the same result as Spark's for every input
    COMPATIBLE = "compatible"
    #: the same result except in a documented corner (the note says which)
    PARTIAL = "partial"


@dataclass(frozen=True)
class Sql:
    """A compiled expression: DuckDB text of the Spark type ``type``.

    ``narrow``, where set (decimal arithmetic), is DuckDB text of the same value as a
    decimal of at most 18 digits at ``type``'s scale (DuckDB's 64-bit arithmetic), null
    where the value is null or needs more digits: the form arithmetic above computes
    in first (``arithmetic``), since 128-bit decimals cost DuckDB 4-10x per row."""

    text: str
    type: SparkType
    nullable: bool = True
    narrow: str | None = None


@dataclass
class Scope:
    """What an expression may reference: the input's columns by Spark attribute id (and
    by ordinal, for ``BoundReference``), and how a scalar subquery becomes a table."""

    #: Spark exprId -> the column's SQL reference and type
    columns: dict[int, Sql] = field(default_factory=dict)
    #: the input's columns in order (``BoundReference`` ordinals)
    ordered: list[Sql] = field(default_factory=list)
    #: given a scalar subquery's plan, the SQL of its value (``None``: not translatable)
    subquery: Callable[[Node], Sql] | None = None

    #: type-only: an attribute the input lacks compiles to a typed null (a final
    #: aggregate's function names its partial's input, of which only the type matters)
    types_only: bool = False

    def attribute(self, node: Node) -> Sql:
        key = node.expr_id
        found = self.columns.get(key)
        if found is None and self.types_only:
            kind = spark_type(node.get("dataType"))
            return Sql(f"CAST(NULL AS {kind.duck})", kind)
        if found is None:
            name = node.get("name", "?")
            raise Unsupported(f"the attribute {name}#{key} is not among its operator's inputs")
        if found.type.opaque:
            name = node.get("name", "?")
            raise Unsupported(f"the column {name}#{key} of the type {found.type.name}")
        return found

    def carried(self, node: Node) -> Sql:
        """The column an ``AttributeReference`` names, to pass through as it is: unlike
        ``attribute``, also one of an opaque type (``types.column_type``)."""
        found = self.columns.get(node.expr_id)
        return found if found is not None and found.type.opaque else self.attribute(node)


Translator = Callable[[Node, Scope], Sql]


@dataclass(frozen=True)
class Entry:
    translate: Translator
    support: Support
    note: str


#: Spark expression class (short name) -> its translator
TABLE: dict[str, Entry] = {}


def register(
    *classes: str, support: Support = Support.COMPATIBLE, note: str = ""
) -> Callable[[Translator], Translator]:
    def add(fn: Translator) -> Translator:
        for cls in classes:
            TABLE[cls] = Entry(fn, support, note)
        return fn

    return add


#: Spark expression class -> its translator as a value of a carried type (an array or a
#: struct: ``compile_value``), where it differs from ``TABLE``'s or ``TABLE`` has none
VALUES: dict[str, Translator] = {}


def register_value(*classes: str, expression: bool = False) -> Callable[[Translator], Translator]:
    """Register a translator in ``VALUES``; with ``expression``, in ``TABLE`` too, where it
    refuses a value of a carried type."""

    def add(fn: Translator) -> Translator:
        for cls in classes:
            VALUES[cls] = fn
            if expression:
                TABLE[cls] = Entry(partial(_not_carried, fn), Support.COMPATIBLE, "")
        return fn

    return add


def _not_carried(fn: Translator, node: Node, scope: Scope) -> Sql:
    value = fn(node, scope)
    if value.type.opaque:
        raise Unsupported(f"{node.cls} of the type {value.type.name} here")
    return value


def compile_expression(node: Node, scope: Scope) -> Sql:
    """``node`` as DuckDB SQL; ``Unsupported`` naming the expression if it has no
    translation."""
    entry = TABLE.get(node.cls)
    if entry is None:
        raise Unsupported(f"the expression {node.cls} has no translation")
    try:
        return entry.translate(node, scope)
    except UnsupportedType as e:
        raise Unsupported(f"{node.cls} of {e}") from e


def compile_value(node: Node, scope: Scope) -> Sql:
    """``node`` as a value that may also be of a carried type (``types``: an array or a
    struct): what a projection outputs, and what the collection and struct functions
    read.  ``compile_expression`` refuses such values (a column of one, a struct built,
    a subquery's struct), since every other expression would compare, order or group
    them DuckDB's way, not Spark's."""
    if node.cls == "AttributeReference":
        return scope.carried(node)
    translate = VALUES.get(node.cls)
    if translate is None:
        return compile_expression(node, scope)
    try:
        return translate(node, scope)
    except UnsupportedType as e:
        raise Unsupported(f"{node.cls} of {e}") from e


def children(node: Node, scope: Scope) -> list[Sql]:
    return [compile_expression(c, scope) for c in node.children]


def int_literal(node: Node) -> int | None:
    """The value of an integer ``Literal``; ``None`` for a null one or any other node."""
    value = node.get("value") if node.cls == "Literal" else None
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def typed(node: Node) -> SparkType:
    """The ``dataType`` field of ``node`` (literals, casts, references)."""
    return spark_type(node.get("dataType"))


def cast(sql: Sql, to: SparkType) -> Sql:
    """``sql`` as ``to`` when its type differs (a plain, exact or rounding cast)."""
    if sql.type == to:
        return sql
    return Sql(f"CAST({sql.text} AS {to.duck})", to, sql.nullable)
