"""Comparisons, ``and or not`` (three-valued, as in both Spark and DuckDB), null tests,
``in``/``inset``."""

from __future__ import annotations

from hybrid_shuffle.sparkplan.expressions.core import (
    Scope,
    Sql,
    Unsupported,
    cast,
    children,
    compile_expression,
    compile_value,
    register,
)
from hybrid_shuffle.sparkplan.expressions.misc import literal
from hybrid_shuffle.sparkplan.tree import Node, parse
from hybrid_shuffle.sparkplan.types import BOOLEAN

__all__ = ["IN_SET_FIELD"]

#: the field an ``InSet`` of the plan's JSON gets its values in, each a ``Literal``'s JSON
#: (``physical.mark_jvm_fields``: Spark writes ``hset``, a Scala set, as null)
IN_SET_FIELD = "_values"


def _comparison(op: str) -> object:
    def translate(node: Node, scope: Scope) -> Sql:
        a, b = children(node, scope)[:2]
        # NaN equals NaN and orders above every number in both Spark and DuckDB
        return Sql(f"({a.text} {op} {b.text})", BOOLEAN, a.nullable or b.nullable)

    return translate


for _cls, _op in (
    ("EqualTo", "="),
    ("EqualNullSafe", "IS NOT DISTINCT FROM"),
    ("LessThan", "<"),
    ("LessThanOrEqual", "<="),
    ("GreaterThan", ">"),
    ("GreaterThanOrEqual", ">="),
):
    register(_cls)(_comparison(_op))  # type: ignore[arg-type]


@register("And")
def _and(node: Node, scope: Scope) -> Sql:
    a, b = children(node, scope)[:2]
    return Sql(f"({a.text} AND {b.text})", BOOLEAN)


@register("Or")
def _or(node: Node, scope: Scope) -> Sql:
    a, b = children(node, scope)[:2]
    return Sql(f"({a.text} OR {b.text})", BOOLEAN)


@register("Not")
def _not(node: Node, scope: Scope) -> Sql:
    (a,) = children(node, scope)[:1]
    return Sql(f"(NOT {a.text})", BOOLEAN, a.nullable)


def _tested(node: Node, scope: Scope) -> Sql:
    """The operand of a null test: an expression, or an array or a struct (opaque to
    other expressions, but null the same way in Spark and DuckDB)."""
    value = compile_value(node.children[0], scope)
    if not value.type.readable:
        raise Unsupported(f"a null test of the type {value.type.name}")
    return value


@register("IsNull")
def _is_null(node: Node, scope: Scope) -> Sql:
    a = _tested(node, scope)
    return Sql(f"({a.text} IS NULL)", BOOLEAN, False)


@register("IsNotNull")
def _is_not_null(node: Node, scope: Scope) -> Sql:
    a = _tested(node, scope)
    return Sql(f"({a.text} IS NOT NULL)", BOOLEAN, False)


@register("In")
def _in(node: Node, scope: Scope) -> Sql:
    value, *options = children(node, scope)
    if not options:
        return Sql("FALSE", BOOLEAN)
    items = ", ".join(cast(o, value.type).text for o in options)
    return Sql(f"({value.text} IN ({items}))", BOOLEAN)


@register("InSet")
def _in_set(node: Node, scope: Scope) -> Sql:
    (value,) = children(node, scope)[:1]
    raw = node.get("hset")
    read = node.get(IN_SET_FIELD)  # ``physical.mark_jvm_fields``: read from the JVM
    if isinstance(read, list):
        present = [v for v in read if v[0].get("value") is not None]
        items = [cast(compile_expression(parse(v), scope), value.type).text for v in present]
        has_null = len(present) < len(read)
    elif isinstance(raw, list):
        items = [literal(v, value.type.name).text for v in raw if v is not None]
        has_null = any(v is None for v in raw)
    else:
        raise Unsupported("an InSet whose values the plan's JSON does not carry")
    text = f"({value.text} IN ({', '.join(items)}))" if items else "FALSE"
    if has_null:
        text = f"(CASE WHEN {text} THEN TRUE ELSE NULL END)"
    return Sql(text, BOOLEAN)
