"""``WindowExec``: ranking functions and aggregates over frames, as SQL windows."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hybrid_shuffle.sparkplan.expressions import Unsupported, compile_expression
from hybrid_shuffle.sparkplan.operators.basic import order_by
from hybrid_shuffle.sparkplan.operators.registry import register_operator
from hybrid_shuffle.sparkplan.relation import Column, Rel
from hybrid_shuffle.sparkplan.stage import Stage
from hybrid_shuffle.sparkplan.tree import Node
from hybrid_shuffle.sparkplan.types import DOUBLE, INT, LONG, SparkType

if TYPE_CHECKING:
    from hybrid_shuffle.sparkplan.translate import Translator

__all__: list[str] = []

_RANKING = {
    "Rank": ("rank()", INT),
    "DenseRank": ("dense_rank()", INT),
    "RowNumber": ("row_number()", INT),
}


def _bound(node: Node | None, side: str) -> str:
    if node is None:
        raise Unsupported("a window frame bound")
    if node.cls in ("UnboundedPreceding$", "UnboundedPreceding"):
        return "UNBOUNDED PRECEDING"
    if node.cls in ("UnboundedFollowing$", "UnboundedFollowing"):
        return "UNBOUNDED FOLLOWING"
    if node.cls in ("CurrentRow$", "CurrentRow"):
        return "CURRENT ROW"
    if node.cls == "Literal":
        value = int(str(node.get("value")))
        return f"{abs(value)} {'PRECEDING' if value < 0 else 'FOLLOWING'}"
    raise Unsupported(f"the window frame bound {node.cls}")


def _frame(spec: Node) -> str:
    frame = spec.children[-1] if spec.children else None
    if frame is None or frame.cls == "UnspecifiedFrame$":
        return ""
    if frame.cls != "SpecifiedWindowFrame":
        raise Unsupported(f"the window frame {frame.cls}")
    kind = "ROWS" if frame.object("frameType") == "RowFrame" else "RANGE"
    lower, upper = frame.children[0], frame.children[1]
    return f" {kind} BETWEEN {_bound(lower, 'lower')} AND {_bound(upper, 'upper')}"


@register_operator("WindowExec")
def _window(tr: Translator, node: Node, stage: Stage) -> Rel:
    child = tr.rel(node.child, stage)
    scope = child.scope(tr.subquery_of_stage)
    partition = [compile_expression(p, scope).text for p in node.exprs("partitionSpec")]
    orders = node.exprs("orderSpec")
    over = ""
    if partition:
        over += "PARTITION BY " + ", ".join(partition)
    if orders:
        over += " ORDER BY " + order_by(tr, orders, child)
    items = [c.ref for c in child.columns]
    columns = list(child.columns)
    for alias in node.exprs("windowExpression"):
        if alias.cls != "Alias":
            raise Unsupported("a window expression without a name")
        window = alias.child
        if window.cls != "WindowExpression":
            raise Unsupported(f"a window column of {window.cls}")
        function, spec = window.children[0], window.children[1]
        kind: SparkType
        if function.cls in _RANKING:
            text, kind = _RANKING[function.cls]
            frame = ""
        elif function.cls == "AggregateExpression":
            agg = function.children[0]
            if function.get("isDistinct"):
                raise Unsupported("a distinct aggregate over a window")
            args = [compile_expression(a, scope) for a in agg.children]
            text, kind = _window_aggregate(agg.cls, args)
            frame = _frame(spec)
        else:
            raise Unsupported(f"the window function {function.cls}")
        col = Column(int(alias.get("exprId", {}).get("id", -1)), str(alias.get("name")), kind)
        items.append(f"CAST({text} OVER ({over}{frame}) AS {kind.duck}) AS {col.ref}")
        columns.append(col)
    return Rel(f"SELECT {', '.join(items)} FROM ({child.sql}) AS t", columns)


def _window_aggregate(name: str, args: list) -> tuple[str, SparkType]:  # type: ignore[type-arg]
    from hybrid_shuffle.sparkplan.operators.aggregate import _sum_type

    x = args[0].text if args else "1"
    if name == "Count":
        return (f"count({x})" if args else "count(*)"), LONG
    if name == "Sum":
        t = _sum_type(args[0].type)
        return f"sum(CAST({x} AS {t.duck}))", t
    if name in ("Min", "Max"):
        return f"{name.lower()}({x})", args[0].type
    if name == "Average" and not args[0].type.is_decimal:
        return f"avg(CAST({x} AS DOUBLE))", DOUBLE
    raise Unsupported(f"the window aggregate {name}")
