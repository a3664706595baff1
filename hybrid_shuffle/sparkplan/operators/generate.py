"""``Generate``: rows made from each input row by a generator.

Only Spark's own ``ReplicateRows`` is translated: the generator that ``INTERSECT ALL``
and ``EXCEPT ALL`` plan (``RewriteIntersectAll``/``RewriteExceptAll``), which emits its
values ``n`` times for a row whose first child is ``n``.  In DuckDB each row is
joined with ``UNNEST(range(n))``: ``n`` rows, none when ``n`` is null or not positive
(Spark reads a null count as 0 and ``Range(0, n)`` is empty then).  Such a plan
outputs the child's attributes twice (its required child columns, then the same
attributes as the generator's output): the copies are named apart
(``relation.distinct``).  Any other generator (``explode``, ``inline``, ``stack``...)
and an ``outer`` generate run in Spark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hybrid_shuffle.sparkplan.expressions import Scope, Unsupported, compile_expression
from hybrid_shuffle.sparkplan.operators.registry import register_operator
from hybrid_shuffle.sparkplan.relation import Column, Rel, attribute_column, distinct
from hybrid_shuffle.sparkplan.stage import Stage
from hybrid_shuffle.sparkplan.tree import Node

if TYPE_CHECKING:
    from hybrid_shuffle.sparkplan.translate import Translator

__all__: list[str] = []

#: the generators translated, by Spark class
GENERATORS = ("ReplicateRows",)


@register_operator("GenerateExec")
def _generate(tr: Translator, node: Node, stage: Stage) -> Rel:
    generator = node.expr("generator")
    kind = generator.cls if generator is not None else "none"
    if generator is None or kind not in GENERATORS:
        raise Unsupported(f"the generator {kind} has no translation")
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
        f"SELECT {', '.join(items) or 'NULL AS __hs_empty'} FROM (SELECT *, "
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
