"""``Generate``: rows made from each input row by a generator.

Translated: ``explode``/``posexplode`` of an array (a DuckDB ``LIST``), their
``_outer`` forms (``LATERAL VIEW [OUTER]`` too), and Spark's own ``ReplicateRows``.

An array is exploded by joining each row with ``UNNEST`` of its 0-based positions:
``range(len(a))`` (no row for a null or empty array, as in Spark); the outer form
unnests ``[NULL]`` instead for those, so the row is kept with a null position and a
null element (``a[NULL]`` is null).  ``posexplode``'s position is Spark's 0-based one,
an ``int``.  The generator's columns come after the child's ``requiredChildOutput``.
Exploding a map, ``inline`` and ``stack`` run in Spark.

``ReplicateRows`` is the generator that ``INTERSECT ALL``
and ``EXCEPT ALL`` plan (``RewriteIntersectAll``/``RewriteExceptAll``), which emits its
values ``n`` times for a row whose first child is ``n``.  In DuckDB each row is
joined with ``UNNEST(range(n))``: ``n`` rows, none when ``n`` is null or not positive
(Spark reads a null count as 0 and ``Range(0, n)`` is empty then).  Such a plan
outputs the child's attributes twice (its required child columns, then the same
attributes as the generator's output): the copies are named apart
(``relation.distinct``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hybrid_shuffle.empty_column import EMPTY_SELECT
from hybrid_shuffle.sparkplan.expressions import Scope, Sql, Unsupported, compile_expression
from hybrid_shuffle.sparkplan.operators.registry import register_operator
from hybrid_shuffle.sparkplan.relation import Column, Rel, attribute_column, distinct
from hybrid_shuffle.sparkplan.stage import Stage
from hybrid_shuffle.sparkplan.tree import Node

if TYPE_CHECKING:
    from hybrid_shuffle.sparkplan.translate import Translator

__all__: list[str] = []

#: the generators translated, by Spark class
GENERATORS = ("ReplicateRows", "Explode", "PosExplode")

#: what the support table says of ``GenerateExec``
NOTE = (
    "explode, posexplode and their outer forms (LATERAL VIEW [OUTER] too) of an array; "
    "Spark's ReplicateRows (INTERSECT ALL, EXCEPT ALL). Exploding a map, inline, stack "
    "and any other generator fall back"
)


@register_operator("GenerateExec", support="partial", note=NOTE)
def _generate(tr: Translator, node: Node, stage: Stage) -> Rel:
    generator = node.expr("generator")
    kind = generator.cls if generator is not None else "none"
    if generator is None or kind not in GENERATORS:
        raise Unsupported(f"the generator {kind} has no translation")
    if kind in ("Explode", "PosExplode"):
        return _explode(tr, node, stage, generator)
    if node.get("outer", False):
        raise Unsupported(f"an outer {kind}")
    required = node.exprs("requiredChildOutput")
    outputs = [attribute_column(a) for a in node.exprs("generatorOutput")]
    count, *values = generator.children
    if len(values) != len(outputs):
        raise Unsupported(f"a {kind} of {len(values)} values into {len(outputs)} columns")
    child = tr.rel(node.child, stage)
    scope = child.scope(tr.subquery_of_stage)
    times = compile_expression(count, scope)
    columns = distinct([attribute_column(a) for a in required] + outputs)
    items = [
        f"{scope.carried(a).text} AS {c.ref}"
        for a, c in zip(required, columns[: len(required)], strict=True)
    ]
    for value, column in zip(values, columns[len(required) :], strict=True):
        items.append(_value(value, column, scope))
    return Rel(
        f"SELECT {', '.join(items) or EMPTY_SELECT} FROM (SELECT *, "
        f"UNNEST(range(CAST({times.text} AS BIGINT))) AS __hs_copy FROM ({child.sql}) AS t) AS t",
        columns,
    )


def _value(value: Node, column: Column, scope: Scope) -> str:
    """``value`` as the generator's output ``column``: an attribute as it is (a column of
    an opaque type too), any other expression cast to the column's type."""
    if value.cls == "AttributeReference":
        return f"{scope.carried(value).text} AS {column.ref}"
    sql = compile_expression(value, scope)
    return f"CAST({sql.text} AS {column.type.duck}) AS {column.ref}"


def _explode(tr: Translator, node: Node, stage: Stage, generator: Node) -> Rel:
    """``explode``/``posexplode`` (``outer`` or not) of an array: see the module's doc."""
    required = node.exprs("requiredChildOutput")
    outputs = [attribute_column(a) for a in node.exprs("generatorOutput")]
    positional = generator.cls == "PosExplode"
    if len(outputs) != 1 + positional:
        raise Unsupported(f"a {generator.cls} into {len(outputs)} columns")
    child = tr.rel(node.child, stage)
    scope = child.scope(tr.subquery_of_stage)
    (operand,) = generator.children
    array = _array(operand, scope)
    element = array.type.element
    if element is None:
        raise Unsupported(f"a {generator.cls} of {array.type.name}")
    if element.opaque or outputs[-1].type != element:
        raise Unsupported(f"a {generator.cls} of array<{element.name}>")
    columns = distinct([attribute_column(a) for a in required] + outputs)
    items = [
        f"t.{scope.carried(a).text} AS {c.ref}"
        for a, c in zip(required, columns[: len(required)], strict=True)
    ]
    made = columns[len(required) :]
    if positional:
        items.append(f"CAST(t.__hs_pos AS INTEGER) AS {made[0].ref}")
    items.append(f"list_extract(t.__hs_array, t.__hs_pos + 1) AS {made[-1].ref}")
    length = "len(t.__hs_array)"
    positions = (
        f"CASE WHEN {length} > 0 THEN range({length}) ELSE [CAST(NULL AS BIGINT)] END"
        if node.get("outer", False)
        else f"range(coalesce({length}, 0))"
    )
    return Rel(
        f"SELECT {', '.join(items)} FROM (SELECT t.*, UNNEST({positions}) AS __hs_pos "
        f"FROM (SELECT *, {array.text} AS __hs_array FROM ({child.sql}) AS t) AS t) AS t",
        columns,
    )


def _array(node: Node, scope: Scope) -> Sql:
    """The exploded operand: an array column as it is carried, or an array expression."""
    if node.cls == "AttributeReference":
        return scope.carried(node)
    return compile_expression(node, scope)
