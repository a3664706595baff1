"""``WindowExec``: ranking, offset and value functions, and aggregates over frames, as
SQL windows.

Spark resolves every window to an explicit frame (``SpecifiedWindowFrame``: with an
ORDER BY, ``RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW`` by default, the whole
partition without), which is given to DuckDB as it is for the functions that read a
frame (aggregates, ``first``/``last``, ``nth_value``).  The ranking functions
(``rank``, ``ntile``, ``percent_rank``, ``cume_dist``, ...) and the offset functions
(``lag``, ``lead``: Spark gives them a frame of one row, their offset) read none, and
DuckDB's have the same definitions as Spark's.
"""

from __future__ import annotations

import dataclasses
import decimal
from collections.abc import Callable
from typing import TYPE_CHECKING

from hybrid_shuffle.sparkplan.expressions import Scope, Sql, Unsupported, compile_expression
from hybrid_shuffle.sparkplan.operators.basic import order_by
from hybrid_shuffle.sparkplan.operators.registry import register_operator
from hybrid_shuffle.sparkplan.operators.sums import sum_of, sum_type
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
    "PercentRank": ("percent_rank()", DOUBLE),
    "CumeDist": ("cume_dist()", DOUBLE),
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
        kind = str(node.get("dataType"))
        # a RANGE frame over a decimal key has a decimal bound (exact, as in Spark); a
        # double's is left to Spark (NaN and infinities as bounds)
        if kind not in ("byte", "short", "integer", "long") and not kind.startswith("decimal"):
            raise Unsupported(f"a window frame bound of type {kind}")
        value = decimal.Decimal(str(node.get("value")))
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


def _over_clause(tr: Translator, node: Node, child: Rel) -> str:
    """``PARTITION BY .. ORDER BY ..`` of a window operator's specification."""
    scope = child.scope(tr.subquery_of_stage)
    partition = [compile_expression(p, scope).text for p in node.exprs("partitionSpec")]
    orders = node.exprs("orderSpec")
    over = ""
    if partition:
        over += "PARTITION BY " + ", ".join(partition)
    if orders:
        over += " ORDER BY " + order_by(tr, orders, child)
    return over


@register_operator(
    "WindowGroupLimitExec",
    support="partial",
    note=("of rank, dense_rank or row_number; of any other function falls back"),
)
def _window_group_limit(tr: Translator, node: Node, stage: Stage) -> Rel:
    """Spark 3.5's top-n per group under a ranking filter (``WHERE rn <= n``), before its
    exchange (``Partial``) and after it (``Final``): the rows whose rank in their
    partition is at most ``limit``.  Exact in both places, as a row ranked within ``n``
    among all rows also is among fewer; the window and the filter above still run."""
    child = tr.rel(node.child, stage)
    function = node.expr("rankLikeFunction")
    ranking = _RANKING.get(function.cls if function is not None else "")
    if ranking is None or ranking[1] != INT:
        raise Unsupported("a window group limit of a function other than a rank")
    limit = int(str(node.get("limit")))
    over = _over_clause(tr, node, child)
    return Rel(
        f"SELECT {child.select_list()} FROM ({child.sql}) AS t "
        f"QUALIFY {ranking[0]} OVER ({over}) <= {limit}",
        child.columns,
    )


@register_operator(
    "WindowExec",
    support="partial",
    note=(
        "rank, dense_rank, row_number, percent_rank, cume_dist, ntile, lag, lead, "
        "nth_value, first/last, and count, sum, min, max, avg over frames (RANGE bounds "
        "of integers or decimals); any other window function, a distinct aggregate over "
        "a window and a RANGE bound of a double fall back"
    ),
)
def _window(tr: Translator, node: Node, stage: Stage) -> Rel:
    child = tr.rel(node.child, stage)
    scope = child.scope(tr.subquery_of_stage)
    over = _over_clause(tr, node, child)
    items = [c.ref for c in child.columns]
    columns = list(child.columns)
    for alias in node.exprs("windowExpression"):
        if alias.cls != "Alias":
            raise Unsupported("a window expression without a name")
        # the optimizer may wrap a window in an expression (``DecimalAggregates``:
        # ``CAST(avg(UnscaledValue(d)) OVER w / 100.0 AS decimal)``): each window is
        # compiled on its own, then the expression around it over a column standing for it
        windows: dict[int, Sql] = {}
        body = _substitute(alias.child, windows, lambda w: _over(w, scope, over))
        sql = compile_expression(body, dataclasses.replace(scope, columns=scope.columns | windows))
        col = Column(alias.expr_id, str(alias.get("name")), sql.type)
        items.append(f"CAST({sql.text} AS {sql.type.duck}) AS {col.ref}")
        columns.append(col)
    return Rel(f"SELECT {', '.join(items)} FROM ({child.sql}) AS t", columns)


def _substitute(expr: Node, windows: dict[int, Sql], over: Callable[[Node], Sql]) -> Node:
    """``expr`` with each ``WindowExpression`` replaced by a reference to a column of
    ``windows`` (a negative id) holding its SQL."""
    if expr.cls == "WindowExpression":
        key = -1 - len(windows)
        windows[key] = over(expr)
        fields = {"exprId": {"id": key}, "name": f"window{-key}", "dataType": "null"}
        return Node("AttributeReference", fields)
    children = [_substitute(c, windows, over) for c in expr.children]
    return Node(expr.cls, expr.fields, children, expr.op_id)


def _over(window: Node, scope: Scope, over: str) -> Sql:
    """One ``WindowExpression`` as SQL: its function ``OVER`` the node's window."""
    function, spec = window.children[0], window.children[1]
    if function.cls in _RANKING:
        text, kind = _RANKING[function.cls]
        return Sql(f"CAST({text} OVER ({over}) AS {kind.duck})", kind)
    if function.cls == "NTile":
        buckets = _literal_int(function.children[0], "ntile's bucket count")
        if buckets <= 0:
            raise Unsupported("ntile of a bucket count below 1")
        return Sql(f"CAST(ntile({buckets}) OVER ({over}) AS INTEGER)", INT)
    if function.cls in ("Lag", "Lead"):
        return _offset(function, scope, over)
    if function.cls == "NthValue":
        x = compile_expression(function.children[0], scope)
        n = _literal_int(function.children[1], "nth_value's offset")
        if n <= 0:
            raise Unsupported("nth_value of an offset below 1")
        nulls = " IGNORE NULLS" if _flag(function, "ignoreNulls") else ""
        text = f"nth_value({x.text}, {n}{nulls}) OVER ({over}{_frame(spec)})"
        return Sql(f"CAST({text} AS {x.type.duck})", x.type)
    if function.cls == "AggregateExpression":
        agg = function.children[0]
        if function.get("isDistinct"):
            raise Unsupported("a distinct aggregate over a window")
        if agg.cls in ("First", "Last"):
            # ``first(x)`` over a frame is its first row's value (``first_value``), also
            # with ``ignoreNulls``, and null over an empty frame, as in Spark
            x = compile_expression(agg.children[0], scope)
            nulls = " IGNORE NULLS" if _flag(agg, "ignoreNulls") else ""
            fn = "first_value" if agg.cls == "First" else "last_value"
            text = f"{fn}({x.text}{nulls}) OVER ({over}{_frame(spec)})"
            return Sql(f"CAST({text} AS {x.type.duck})", x.type)
        args = [compile_expression(a, scope) for a in agg.children]
        text, kind = _window_aggregate(agg.cls, args, f"OVER ({over}{_frame(spec)})")
        return Sql(f"CAST({text} AS {kind.duck})", kind)
    raise Unsupported(f"the window function {function.cls}")


def _offset(function: Node, scope: Scope, over: str) -> Sql:
    """``lag``/``lead``: the value ``offset`` rows before/after in the partition (counting
    only non-null values with ``ignoreNulls``), ``default`` (evaluated on the current
    row) past its edge.  Spark's ``Lag`` holds the offset the user wrote; its frame is
    the signed one (``lag(x, -1)`` is ``lead(x, 1)``)."""
    x = compile_expression(function.children[0], scope)
    n = _literal_int(function.children[1], f"{function.cls.lower()}'s offset")
    if function.cls == "Lag":
        n = -n
    default = function.children[2] if len(function.children) > 2 else None
    fallback = ""
    if default is not None and not (default.cls == "Literal" and default.get("value") is None):
        fallback = f", CAST({compile_expression(default, scope).text} AS {x.type.duck})"
    nulls = " IGNORE NULLS" if _flag(function, "ignoreNulls") else ""
    fn = "lead" if n > 0 else "lag"
    text = f"{fn}({x.text}, {abs(n)}{fallback}{nulls}) OVER ({over})"
    return Sql(f"CAST({text} AS {x.type.duck})", x.type)


def _literal_int(node: Node, what: str) -> int:
    """The value of an integer literal (Spark requires these arguments to be constant,
    and folds them into literals)."""
    if node.cls != "Literal" or node.get("dataType") not in ("byte", "short", "integer", "long"):
        raise Unsupported(f"{what} that is not an integer literal")
    if node.get("value") is None:
        raise Unsupported(f"a null {what}")
    return int(str(node.get("value")))


def _flag(node: Node, name: str) -> bool:
    """A boolean field of a Spark expression (``ignoreNulls``)."""
    value = node.get(name)
    return value is True or str(value).lower() == "true"


def _window_aggregate(name: str, args: list[Sql], over: str) -> tuple[str, SparkType]:
    """The aggregate ``name`` of ``args`` over the window ``over`` (``OVER (...)``)."""
    from hybrid_shuffle.sparkplan.operators.aggregate import decimal_average

    x = args[0].text if args else "1"
    if name == "Count":
        if len(args) > 1:  # count(a, b): rows where none is null
            test = " AND ".join(f"{a.text} IS NOT NULL" for a in args)
            return f"count(CASE WHEN {test} THEN 1 END) {over}", LONG
        return (f"count({x}) {over}" if args else f"count(*) {over}"), LONG
    if name == "Sum":
        return sum_of(x, args[0].type, over=f" {over}"), sum_type(args[0].type)
    if name in ("Min", "Max"):
        return f"{name.lower()}({x}) {over}", args[0].type
    if name == "Average" and args[0].type.is_decimal:
        total = sum_of(x, args[0].type, over=f" {over}")
        return decimal_average(total, f"count({x}) {over}", args[0].type)
    if name == "Average":
        return f"avg(CAST({x} AS DOUBLE)) {over}", DOUBLE
    raise Unsupported(f"the window aggregate {name}")
