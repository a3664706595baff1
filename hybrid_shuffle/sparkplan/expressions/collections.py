"""Arrays: ``arr[i]`` (``GetArrayItem``), ``element_at``, ``size``/``cardinality``,
``array(...)`` (``CreateArray``) and ``array_contains``, as a DuckDB ``LIST``.

An array column stays opaque to every other expression (``types.column_type``: Spark
orders and compares arrays its own way), so only these translators read one, through
``Scope.carried``.  Spark's non-ANSI semantics: ``arr[i]`` is 0-based and null out of
bounds (DuckDB's lists are 1-based and count negative indexes from the end);
``element_at`` is 1-based, negative from the end, null out of bounds; ``size(null)``
is -1 under ``spark.sql.legacy.sizeOfNull`` (Spark 3.5's default, which the plan
carries as ``legacySizeOfNull``), null otherwise; ``array_contains`` is null when the
value is not found but the array holds a null.
"""

from __future__ import annotations

from hybrid_shuffle.sparkplan.expressions.core import (
    Scope,
    Sql,
    Unsupported,
    cast,
    compile_expression,
    register,
)
from hybrid_shuffle.sparkplan.tree import Node, parse
from hybrid_shuffle.sparkplan.types import BOOLEAN, INT, SparkType, array_of, spark_type

__all__ = ["ELEMENTS_FIELD", "array_literal"]

#: the field an array ``Literal`` of the plan's JSON gets its elements in, each a
#: ``Literal``'s JSON (``physical.mark_jvm_fields``: Spark writes the array as text)
ELEMENTS_FIELD = "_elements"


def _operand(node: Node, scope: Scope) -> Sql:
    """A child expression, or the array column it names (opaque to ``attribute``)."""
    if node.cls == "AttributeReference":
        return scope.carried(node)
    return compile_expression(node, scope)


def _array(node: Node, scope: Scope) -> tuple[Sql, SparkType]:
    """The array operand and its element type; ``Unsupported`` for a map or another type."""
    a = _operand(node, scope)
    if a.type.element is None:
        raise Unsupported(f"a collection function on {a.type.name}")
    return a, a.type.element


@register("GetArrayItem")
def _get_array_item(node: Node, scope: Scope) -> Sql:
    a, element = _array(node.children[0], scope)
    i = compile_expression(node.children[1], scope)
    if not i.type.is_integral:
        raise Unsupported(f"an array index of {i.type}")
    text = _let_index(
        a.text, i.text, "CASE WHEN @i < 0 THEN NULL ELSE list_extract(@a, @i + 1) END"
    )
    return Sql(text, element)


def _let_index(array: str, index: str, body: str) -> str:
    """``body`` over the array ``@a`` and the index ``@i`` (an index is small SQL: a
    literal or a column, so it is repeated rather than bound)."""
    return "(" + body.replace("@a", f"({array})").replace("@i", f"CAST({index} AS BIGINT)") + ")"


@register("ElementAt")
def _element_at(node: Node, scope: Scope) -> Sql:
    a, element = _array(node.children[0], scope)
    i = compile_expression(node.children[1], scope)
    if not i.type.is_integral:
        raise Unsupported(f"an element_at index of {i.type}")
    # index 0 is an error in Spark (so no row it answers has one)
    return Sql(_let_index(a.text, i.text, "list_extract(@a, @i)"), element)


@register("Size")
def _size(node: Node, scope: Scope) -> Sql:
    a, _ = _array(node.children[0], scope)
    legacy = node.get("legacySizeOfNull")
    if legacy is None:
        raise Unsupported("a size() whose plan does not say how it sizes a null")
    on_null = "-1" if legacy in (True, "true") else "NULL"
    return Sql(f"CAST(coalesce(len({a.text}), {on_null}) AS INTEGER)", INT, on_null == "NULL")


@register("CreateArray")
def _create_array(node: Node, scope: Scope) -> Sql:
    items = [_operand(c, scope) for c in node.children]
    if not items:
        raise Unsupported("an empty array()")
    element = items[0].type
    if element.opaque:
        raise Unsupported(f"an array of {element.name}")
    text = ", ".join(cast(item, element).text for item in items)
    return Sql(f"CAST([{text}] AS {element.duck}[])", array_of(element), False)


def array_literal(node: Node, scope: Scope) -> Sql:
    """An array ``Literal`` (what Spark folds ``array(1, 2)`` into), from the elements
    ``physical`` read from the JVM; one it could not read falls back."""
    raw = node.get(ELEMENTS_FIELD)
    kind = node.get("dataType")
    if not isinstance(raw, list) or not isinstance(kind, dict):
        raise Unsupported("an array literal whose elements the plan does not give")
    element = spark_type(kind.get("elementType"))
    items = [cast(compile_expression(parse(e), scope), element).text for e in raw]
    return Sql(f"CAST([{', '.join(items)}] AS {element.duck}[])", array_of(element), False)


@register("ArrayContains")
def _array_contains(node: Node, scope: Scope) -> Sql:
    a, element = _array(node.children[0], scope)
    v = compile_expression(node.children[1], scope)
    if element.is_fractional or element.opaque:
        raise Unsupported(f"array_contains over {element.name} elements")
    value = cast(v, element).text
    text = (
        f"(CASE WHEN ({a.text}) IS NULL OR ({value}) IS NULL THEN NULL "
        f"WHEN list_contains({a.text}, {value}) THEN TRUE "
        f"WHEN list_count({a.text}) < len({a.text}) THEN NULL ELSE FALSE END)"
    )
    return Sql(text, BOOLEAN)
