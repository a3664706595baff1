"""Date arithmetic and fields: ``date_add``, ``date_sub``, ``datediff``, ``add_months``
(clamped to the month's end, as Spark's), ``last_day``, ``trunc``, ``year``, ``month``,
``dayofmonth``, ``quarter``, ``dayofweek``, ``dayofyear``, ``extract``.  Timestamps are not
translated (their time zone rules differ); an expression over one falls back."""

from __future__ import annotations

from hybrid_shuffle.sparkplan.expressions.core import (
    Scope,
    Sql,
    Unsupported,
    children,
    register,
)
from hybrid_shuffle.sparkplan.tree import Node
from hybrid_shuffle.sparkplan.types import DATE, INT

__all__ = ["TRUNC_LEVELS"]


def _date(sql: Sql, what: str) -> Sql:
    if sql.type.name != "date":
        raise Unsupported(f"{what} of {sql.type}")
    return sql


def _field(part: str, what: str) -> object:
    def translate(node: Node, scope: Scope) -> Sql:
        (a,) = children(node, scope)[:1]
        _date(a, what)
        return Sql(f"CAST(date_part('{part}', {a.text}) AS INTEGER)", INT, a.nullable)

    return translate


for _cls, _part in (
    ("Year", "year"),
    ("Month", "month"),
    ("DayOfMonth", "day"),
    ("Quarter", "quarter"),
    ("DayOfYear", "doy"),
):
    register(_cls)(_field(_part, _cls))  # type: ignore[arg-type]


@register("DayOfWeek")
def _day_of_week(node: Node, scope: Scope) -> Sql:
    (a,) = children(node, scope)[:1]
    _date(a, "dayofweek")
    # Spark: 1 = Sunday .. 7 = Saturday; DuckDB's dayofweek: 0 = Sunday
    return Sql(f"CAST(dayofweek({a.text}) + 1 AS INTEGER)", INT)


@register("DateAdd")
def _date_add(node: Node, scope: Scope) -> Sql:
    a, days = children(node, scope)[:2]
    _date(a, "date_add")
    return Sql(f"CAST({a.text} + CAST({days.text} AS INTEGER) AS DATE)", DATE)


@register("DateSub")
def _date_sub(node: Node, scope: Scope) -> Sql:
    a, days = children(node, scope)[:2]
    _date(a, "date_sub")
    return Sql(f"CAST({a.text} - CAST({days.text} AS INTEGER) AS DATE)", DATE)


@register("DateDiff")
def _date_diff(node: Node, scope: Scope) -> Sql:
    end, start = children(node, scope)[:2]
    _date(end, "datediff")
    _date(start, "datediff")
    return Sql(f"CAST({end.text} - {start.text} AS INTEGER)", INT)


@register("AddMonths")
def _add_months(node: Node, scope: Scope) -> Sql:
    a, months = children(node, scope)[:2]
    _date(a, "add_months")
    return Sql(f"CAST({a.text} + to_months(CAST({months.text} AS INTEGER)) AS DATE)", DATE)


@register("Extract", "ExtractANSIIntervalYears")
def _extract(node: Node, scope: Scope) -> Sql:
    # ``extract(YEAR FROM d)`` is a RuntimeReplaceable: the plan holds its replacement
    return children(node, scope)[-1]


@register("LastDay")
def _last_day(node: Node, scope: Scope) -> Sql:
    (a,) = children(node, scope)[:1]
    _date(a, "last_day")
    return Sql(f"last_day({a.text})", DATE)


#: ``trunc(d, fmt)``'s formats (``DateTimeUtils.parseTruncLevel``) -> DuckDB's part
TRUNC_LEVELS = {
    "year": "year",
    "yyyy": "year",
    "yy": "year",
    "quarter": "quarter",
    "month": "month",
    "mon": "month",
    "mm": "month",
    "week": "week",
}


@register("TruncDate")
def _trunc_date(node: Node, scope: Scope) -> Sql:
    a = children(node, scope)[0]
    _date(a, "trunc")
    fmt = node.children[1]
    if fmt.cls != "Literal":
        raise Unsupported("trunc to a format that is not a literal")
    part = TRUNC_LEVELS.get(str(fmt.get("value") or "").lower())
    if part is None:  # Spark: null for any other format
        return Sql("CAST(NULL AS DATE)", DATE)
    return Sql(f"CAST(date_trunc('{part}', {a.text}) AS DATE)", DATE)
