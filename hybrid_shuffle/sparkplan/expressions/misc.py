"""References, literals, aliases, ``coalesce``, ``case when``, ``if``, ``nullif``,
``greatest``/``least`` (both skip nulls and order NaN last, as DuckDB's), subqueries."""

from __future__ import annotations

from hybrid_shuffle.sparkplan.expressions.core import (
    Scope,
    Sql,
    Unsupported,
    cast,
    children,
    compile_expression,
    register,
    register_value,
)
from hybrid_shuffle.sparkplan.tree import Node, parse
from hybrid_shuffle.sparkplan.types import spark_type

__all__ = ["literal"]


@register("AttributeReference")
def _attribute(node: Node, scope: Scope) -> Sql:
    return scope.attribute(node)


@register("BoundReference")
def _bound(node: Node, scope: Scope) -> Sql:
    return scope.ordered[int(node.get("ordinal"))]


@register("Alias", "KnownFloatingPointNormalized", "PromotePrecision")
def _transparent(node: Node, scope: Scope) -> Sql:
    return compile_expression(node.child, scope)


def literal(value: object, type_name: object) -> Sql:
    t = spark_type(type_name)
    if value is None:
        return Sql(f"CAST(NULL AS {t.duck})", t, True)
    text = str(value)
    if t.name == "string":
        return Sql("'" + text.replace("'", "''") + "'", t, False)
    if t.name == "boolean":
        return Sql("TRUE" if text == "true" else "FALSE", t, False)
    if t.name in ("date", "timestamp", "timestamp_ntz"):
        if t.name != "date":
            raise Unsupported("a timestamp literal")
        return Sql(f"DATE '{text}'", t, False)
    if t.name == "binary":
        raise Unsupported("a binary literal")
    if t.is_fractional:
        if text in ("NaN", "Infinity", "-Infinity"):
            text = {"NaN": "'nan'", "Infinity": "'inf'", "-Infinity": "'-inf'"}[text]
        return Sql(f"CAST({text} AS {t.duck})", t, False)
    return Sql(f"CAST({text} AS {t.duck})", t, False)


@register("Literal")
def _literal(node: Node, scope: Scope) -> Sql:
    return literal(node.get("value"), node.get("dataType"))


@register("Coalesce")
def _coalesce(node: Node, scope: Scope) -> Sql:
    args = children(node, scope)
    t = args[0].type
    text = ", ".join(cast(a, t).text for a in args)
    return Sql(f"coalesce({text})", t, all(a.nullable for a in args))


@register("CaseWhen")
def _case_when(node: Node, scope: Scope) -> Sql:
    args = children(node, scope)
    pairs, default = args[: len(args) // 2 * 2], args[len(args) // 2 * 2 :]
    t = pairs[1].type
    parts = [
        f"WHEN {pairs[i].text} THEN {cast(pairs[i + 1], t).text}" for i in range(0, len(pairs), 2)
    ]
    end = f" ELSE {cast(default[0], t).text}" if default else ""
    return Sql(f"(CASE {' '.join(parts)}{end} END)", t)


@register("If")
def _if(node: Node, scope: Scope) -> Sql:
    test, yes, no = children(node, scope)
    return Sql(
        f"(CASE WHEN {test.text} THEN {yes.text} ELSE {cast(no, yes.type).text} END)", yes.type
    )


@register_value("ScalarSubquery", expression=True)
def _subquery_value(node: Node, scope: Scope) -> Sql:
    """A scalar subquery's value, also a struct: Spark merges the scalar subqueries over
    one relation into one that returns them as a struct's fields (``MergeScalarSubqueries``),
    which ``GetStructField`` reads."""
    plan = node.get("plan")
    if scope.subquery is None or not isinstance(plan, list):
        raise Unsupported("a scalar subquery here")
    sub = node.fields.get("_parsed")
    return scope.subquery(sub if isinstance(sub, Node) else parse(plan))


@register("NullIf")
def _nullif(node: Node, scope: Scope) -> Sql:
    a, b = children(node, scope)[:2]
    return Sql(f"nullif({a.text}, {b.text})", a.type)


@register("Greatest")
def _greatest(node: Node, scope: Scope) -> Sql:
    args = children(node, scope)
    t = args[0].type
    return Sql(f"greatest({', '.join(cast(a, t).text for a in args)})", t)


@register("Least")
def _least(node: Node, scope: Scope) -> Sql:
    args = children(node, scope)
    t = args[0].type
    return Sql(f"least({', '.join(cast(a, t).text for a in args)})", t)
