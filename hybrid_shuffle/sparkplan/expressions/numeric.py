"""``pmod``, ``floor``/``ceil``, ``signum``, ``isnan`` and the double functions ``sqrt``,
``ln``, ``exp``, ``pow``, where Spark's answer differs from DuckDB's by design:
``sqrt`` of a negative is NaN and ``ln`` of a non-positive is null in Spark, while
DuckDB raises; ``floor``/``ceil`` of a double is a saturating ``bigint`` (NaN is 0);
``isnan(null)`` is false; ``signum`` is a double (NaN for NaN)."""

from __future__ import annotations

from hybrid_shuffle.sparkplan.expressions import _exact
from hybrid_shuffle.sparkplan.expressions.arithmetic import bits, decimal_result
from hybrid_shuffle.sparkplan.expressions.core import (
    Scope,
    Sql,
    Support,
    Unsupported,
    children,
    register,
)
from hybrid_shuffle.sparkplan.tree import Node
from hybrid_shuffle.sparkplan.types import BOOLEAN, DOUBLE, LONG, decimal

__all__: list[str] = []


@register(
    "Pmod", note="decimals: falls back where an operand at the larger scale needs over 38 digits"
)
def _pmod(node: Node, scope: Scope) -> Sql:
    """``r = a % n; r < 0 ? (r + n) % n : r``, null when ``n`` is 0."""
    a, n = children(node, scope)[:2]
    if a.type.is_decimal or n.type.is_decimal:
        return _decimal_pmod(a, n)
    wide = "CAST(@.a AS HUGEINT)" if a.type.is_integral else "@.a"
    body = (
        "CASE WHEN @.n = 0 THEN NULL WHEN @.n = -1 THEN 0 * @.a ELSE "
        f"CASE WHEN {wide} % @.n < 0 THEN ({wide} % @.n + @.n) % @.n ELSE {wide} % @.n END END"
    )
    if not a.type.is_integral:
        body = body.replace("WHEN @.n = -1 THEN 0 * @.a ", "")
    text = _exact.let({"a": a.text, "n": n.text}, body)
    if a.type.is_integral:
        text = f"CAST({_exact.wrap(text, bits(a.type))} AS {a.type.duck})"
    return Sql(text, a.type)


def _decimal_pmod(a: Sql, n: Sql) -> Sql:
    """``pmod`` of decimals, typed as ``%`` is (``Pmod.resultDecimalType``), exact."""
    if not (a.type.is_decimal and n.type.is_decimal):
        raise Unsupported("pmod of a decimal and another type")
    s = max(a.type.scale, n.type.scale)
    if any(t.precision + s - t.scale > 38 for t in (a.type, n.type)):
        raise Unsupported("pmod of decimals that need more than 38 digits at one scale")
    result = decimal_result("%", a.type, n.type)
    return Sql(_exact.remainder(a, n, result, positive=True), result)


def _rounding(fn: str) -> object:
    def translate(node: Node, scope: Scope) -> Sql:
        args = children(node, scope)
        if len(args) != 1:
            raise Unsupported(f"{fn} to a scale")
        (a,) = args
        t = a.type
        if t.is_decimal:
            out = decimal(min(t.precision - t.scale + 1, 38), 0)
            return Sql(f"CAST({fn}({a.text}) AS {out.duck})", out, a.nullable)
        if t.is_integral:
            return Sql(f"CAST({a.text} AS BIGINT)", LONG, a.nullable)
        body = (
            "CASE WHEN isnan(@.x) THEN 0 WHEN @.x >= 9223372036854775807 THEN "
            "9223372036854775807 WHEN @.x <= -9223372036854775808 THEN "
            f"-9223372036854775808 ELSE CAST({fn}(@.x) AS BIGINT) END"
        )
        return Sql(_exact.let({"x": f"CAST({a.text} AS DOUBLE)"}, body), LONG, a.nullable)

    return translate


register("Floor")(_rounding("floor"))  # type: ignore[arg-type]
register("Ceil")(_rounding("ceil"))  # type: ignore[arg-type]


@register("IsNaN")
def _isnan(node: Node, scope: Scope) -> Sql:
    (a,) = children(node, scope)[:1]
    return Sql(f"coalesce(isnan({a.text}), FALSE)", BOOLEAN, False)


@register("Signum")
def _signum(node: Node, scope: Scope) -> Sql:
    (a,) = children(node, scope)[:1]
    x = f"CAST({a.text} AS DOUBLE)"
    return Sql(f"(CASE WHEN isnan({x}) THEN {x} ELSE CAST(sign({x}) AS DOUBLE) END)", DOUBLE)


@register("Sqrt")
def _sqrt(node: Node, scope: Scope) -> Sql:
    (a,) = children(node, scope)[:1]
    x = f"CAST({a.text} AS DOUBLE)"
    return Sql(f"(CASE WHEN {x} < 0 THEN CAST('nan' AS DOUBLE) ELSE sqrt({x}) END)", DOUBLE)


@register("Log")
def _ln(node: Node, scope: Scope) -> Sql:
    (a,) = children(node, scope)[:1]
    x = f"CAST({a.text} AS DOUBLE)"
    return Sql(f"(CASE WHEN {x} <= 0 THEN NULL ELSE ln({x}) END)", DOUBLE)


@register("Exp", support=Support.PARTIAL, note="libm's exp, which may differ from Java's by 1 ulp")
def _exp(node: Node, scope: Scope) -> Sql:
    (a,) = children(node, scope)[:1]
    return Sql(f"exp(CAST({a.text} AS DOUBLE))", DOUBLE)


@register("Pow", support=Support.PARTIAL, note="libm's pow, which may differ from Java's by 1 ulp")
def _pow(node: Node, scope: Scope) -> Sql:
    a, b = children(node, scope)[:2]
    return Sql(f"pow(CAST({a.text} AS DOUBLE), CAST({b.text} AS DOUBLE))", DOUBLE)


@register("NormalizeNaNAndZero")
def _normalize(node: Node, scope: Scope) -> Sql:
    """What Spark puts around float and double grouping and join keys: ``-0.0`` becomes
    ``0.0`` (DuckDB would group them apart) and every NaN one NaN (as DuckDB's already)."""
    (a,) = children(node, scope)[:1]
    if not a.type.is_fractional:
        return a
    return Sql(f"(CASE WHEN {a.text} = 0 THEN CAST(0 AS {a.type.duck}) ELSE {a.text} END)", a.type)
