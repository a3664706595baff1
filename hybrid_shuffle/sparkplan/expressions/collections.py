"""Arrays: ``arr[i]`` (``GetArrayItem``), ``element_at``, ``size``/``cardinality``,
``array(...)`` (``CreateArray``) and ``array_contains``, as a DuckDB ``LIST``; structs:
``named_struct(...)`` (``CreateNamedStruct``) and ``s.field`` (``GetStructField``), as a
DuckDB ``STRUCT``.

An array or struct value stays opaque to every other expression (``types.column_type``:
Spark orders and compares them its own way), so only these translators read one,
through ``compile_value``, and a projection carries one.  A struct's field is read by its
position, as Spark's ``GetStructField`` does (Spark's names may differ from the struct's
only in case, which a DuckDB ``STRUCT`` cannot hold: such a struct stays Spark's).
Spark's non-ANSI semantics: ``arr[i]`` is 0-based and null out of
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
    Support,
    Unsupported,
    cast,
    compile_expression,
    compile_value,
    quote,
    register,
    register_value,
)
from hybrid_shuffle.sparkplan.tree import Node, parse
from hybrid_shuffle.sparkplan.types import (
    BOOLEAN,
    INT,
    SparkType,
    array_of,
    spark_type,
    struct_of,
)

__all__ = ["ELEMENTS_FIELD", "array_literal"]

#: the field an array ``Literal`` of the plan's JSON gets its elements in, each a
#: ``Literal``'s JSON (``physical.mark_jvm_fields``: Spark writes the array as text)
ELEMENTS_FIELD = "_elements"


def _array(node: Node, scope: Scope) -> tuple[Sql, SparkType]:
    """The array operand and its element type; ``Unsupported`` for a map or another type."""
    a = compile_value(node, scope)
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
    items = [compile_value(c, scope) for c in node.children]
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


@register(
    "CreateNamedStruct",
    support=Support.PARTIAL,
    note=(
        "a projection outputs the struct and GetStructField reads it; one compared, "
        "grouped or sorted by (Spark orders structs its own way) falls back, as does one "
        "with two field names equal but for case"
    ),
)
def _struct_elsewhere(node: Node, scope: Scope) -> Sql:
    raise Unsupported("a struct compared, grouped or sorted by")


@register_value("CreateNamedStruct")
def _create_named_struct(node: Node, scope: Scope) -> Sql:
    """``named_struct('a', x, 'b', y)``: its children alternate the field's name (a string
    literal) and its value."""
    names, values = node.children[0::2], node.children[1::2]
    if not values or len(names) != len(values):
        raise Unsupported("a struct of no fields")
    if any(n.cls != "Literal" or n.get("value") is None for n in names):
        raise Unsupported("a struct whose field names are not literals")
    fields = [
        (str(n.get("value")), compile_value(v, scope)) for n, v in zip(names, values, strict=True)
    ]
    for name, value in fields:
        if not value.type.readable:
            raise Unsupported(f"a struct field {name!r} of the type {value.type.name}")
    kind = struct_of([(name, value.type) for name, value in fields])
    packed = ", ".join(f"{quote(name)} := {value.text}" for name, value in fields)
    return Sql(f"struct_pack({packed})", kind, False)


@register_value("GetStructField", expression=True)
def _struct_field(node: Node, scope: Scope) -> Sql:
    """``s.field`` by the field's position (``ordinal``); null where the struct is."""
    s = compile_value(node.children[0], scope)
    fields = s.type.fields
    ordinal = int(node.get("ordinal", -1))
    if fields is None or not 0 <= ordinal < len(fields):
        raise Unsupported(f"a struct field of {s.type.name}")
    return Sql(f"struct_extract_at({s.text}, {ordinal + 1})", fields[ordinal][1])
