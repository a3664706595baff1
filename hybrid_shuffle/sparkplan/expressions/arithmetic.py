"""``+ - * / div %``, unary minus, ``abs``, ``round``, and the decimal rules of Spark.

Spark (3.5 and 4.x) types decimal arithmetic by each operator's
``resultDecimalType``, under ``spark.sql.decimalOperations.allowPrecisionLoss``
(``precision_loss``: the translation reads it from the session, as Spark's
analysis did, since the plan's JSON does not carry an expression's type), and
computes the result as ``Decimal`` does, rounded HALF_UP to that type, null on
overflow.  Where that type keeps the exact result's scale, DuckDB's own ``+ - *``
are exact (``TRY`` makes its overflow null); where Spark cut the scale, and for
every ``/`` and ``%`` (DuckDB computes those of decimals in floating point),
``_exact`` works on the unscaled integers, rounding twice where Spark does (a
product to 38 significant digits, a quotient to scale 38, then to the type).
Integer arithmetic wraps on overflow, as Java's does.  Division by zero is null,
as Spark's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from hybrid_shuffle.sparkplan.expressions import _exact
from hybrid_shuffle.sparkplan.expressions.core import (
    Scope,
    Sql,
    Support,
    Unsupported,
    cast,
    children,
    int_literal,
    register,
)
from hybrid_shuffle.sparkplan.tree import Node
from hybrid_shuffle.sparkplan.types import LONG, SparkType, decimal

__all__ = [
    "EVAL_MODE_FIELD",
    "adjusted",
    "bits",
    "bounded",
    "decimal_divide",
    "decimal_result",
    "precision_loss",
]

#: the field an ``Add``/``Subtract``/``Multiply`` of the plan's JSON gets its evaluation
#: mode in (``physical.mark_jvm_fields``; the JSON writes ``evalMode`` as null): ``TRY``
#: for ``try_add`` and the rest, which give null where integer arithmetic would wrap
EVAL_MODE_FIELD = "_evalMode"

MAX = 38
MIN_ADJUSTED_SCALE = 6

#: ``spark.sql.decimalOperations.allowPrecisionLoss`` of the plan being translated
_PRECISION_LOSS: ContextVar[bool] = ContextVar("allow_precision_loss", default=True)


@contextmanager
def precision_loss(allowed: bool) -> Iterator[None]:
    """Translate decimal arithmetic as Spark typed it under
    ``spark.sql.decimalOperations.allowPrecisionLoss = allowed`` (Spark's default is
    true), for the duration of the block."""
    token = _PRECISION_LOSS.set(allowed)
    try:
        yield
    finally:
        _PRECISION_LOSS.reset(token)


def bounded(precision: int, scale: int) -> SparkType:
    """``DecimalType.bounded``: each of precision and scale cut at 38."""
    return decimal(min(precision, MAX), min(scale, MAX))


def adjusted(precision: int, scale: int) -> SparkType:
    """``DecimalType.adjustPrecisionScale``: fit a result type into 38 digits, giving up
    scale (down to 6) before integer digits."""
    if precision <= MAX:
        return decimal(precision, scale)
    int_digits = precision - scale
    min_scale = min(scale, MIN_ADJUSTED_SCALE)
    return decimal(MAX, max(MAX - int_digits, min_scale))


def _as_decimal(t: SparkType) -> SparkType:
    """An integral operand's decimal twin (``DecimalType.forType``)."""
    if t.is_decimal:
        return t
    digits = {"byte": 3, "short": 5, "integer": 10, "long": 20}.get(t.name)
    if digits is None:
        raise Unsupported(f"decimal arithmetic with {t}")
    return decimal(digits, 0)


def _result(op: str, a: SparkType, b: SparkType) -> SparkType:
    """The result type of ``a op b`` (``resultDecimalType`` of Spark's ``Add``,
    ``Subtract``, ``Multiply``, ``Divide``, ``Remainder`` and ``Pmod``)."""
    p1, s1, p2, s2 = a.precision, a.scale, b.precision, b.scale
    if s1 < 0 or s2 < 0:
        raise Unsupported("decimal arithmetic on a negative scale")
    fit = adjusted if _PRECISION_LOSS.get() else bounded
    if op in ("+", "-"):
        scale = max(s1, s2)
        return fit(max(p1 - s1, p2 - s2) + scale + 1, scale)
    if op == "*":
        return fit(p1 + p2 + 1, s1 + s2)
    if op == "/":
        if _PRECISION_LOSS.get():
            scale = max(MIN_ADJUSTED_SCALE, s1 + p2 + 1)
            return adjusted(p1 - s1 + s2 + scale, scale)
        int_digits = min(MAX, p1 - s1 + s2)
        dec_digits = min(MAX, max(MIN_ADJUSTED_SCALE, s1 + p2 + 1))
        diff = int_digits + dec_digits - MAX
        if diff > 0:
            dec_digits -= diff // 2 + 1
            int_digits = MAX - dec_digits
        return bounded(int_digits + dec_digits, dec_digits)
    if op == "%":
        scale = max(s1, s2)
        return fit(min(p1 - s1, p2 - s2) + scale, scale)
    raise Unsupported(f"decimal {op}")


def decimal_result(op: str, a: SparkType, b: SparkType) -> SparkType:
    """The type Spark gives ``a op b`` of two decimals (``+ - * / %``; ``pmod`` as ``%``)."""
    return _result(op, a, b)


def _unadjusted_precision(op: str, a: SparkType, b: SparkType) -> int:
    """The precision Spark's rule asks for before fitting it into 38 digits."""
    p1, s1, p2, s2 = a.precision, a.scale, b.precision, b.scale
    if op in ("+", "-"):
        return max(p1 - s1, p2 - s2) + max(s1, s2) + 1
    return p1 + p2 + 1


def _wide(sql: Sql) -> str:
    """A decimal operand at 38 digits, so DuckDB's own result type cannot overflow first."""
    return f"CAST({sql.text} AS DECIMAL(38,{sql.type.scale}))"


#: the width of each integral type, for Java's wrap-around
_BITS = {"byte": 8, "short": 16, "integer": 32, "long": 64}


def bits(t: SparkType) -> int:
    """How many bits an integral type wraps at."""
    return _BITS[t.name]


def _decimal(op: str, a: Sql, b: Sql) -> Sql:
    da, db = _as_decimal(a.type), _as_decimal(b.type)
    a, b = cast(a, da), cast(b, db)
    result = _result(op, da, db)
    exact_scale = max(da.scale, db.scale) if op in ("+", "-") else da.scale + db.scale
    if op == "/":
        return decimal_divide(a, b, result)
    if op == "%":
        if da.precision + max(0, db.scale - da.scale) > MAX:
            raise Unsupported("a decimal % whose dividend needs more than 38 digits")
        return Sql(_exact.remainder(a, b, result), result)
    exact = _decimal_exact(op, a, b, da, db, result, exact_scale)
    narrow_a, narrow_b = _narrow(a), _narrow(b)
    if (
        narrow_a is None
        or narrow_b is None
        or exact_scale != result.scale
        or exact_scale >= _NARROW
        or len(exact.text) > _NARROW_TEXT
    ):
        return exact
    if _duck_width(op, da, db) <= _NARROW and max(da.precision, db.precision) <= _NARROW:
        # DuckDB's own type holds every exact result: 64 bits, no overflow to catch
        return Sql(exact.text, result, narrow=f"({a.text} {op} {b.text})")
    # the exact value in 64 bits where it fits (DuckDB raises past 18 digits, ``TRY``
    # makes that null); the 128-bit form only for the rows where it does not.  A value
    # of at most 18 digits at the result's scale fits the result's type (19 digits or
    # more here), so the cast cannot overflow and the answer is Spark's either way.
    fast = f"TRY({narrow_a} {op} {narrow_b})"
    return Sql(f"COALESCE(CAST({fast} AS {result.duck}), {exact.text})", result, narrow=fast)


#: DuckDB's decimals of at most this many digits are 64-bit integers
_NARROW = 18
#: the text of an expression above which its 64-bit form is not added (each level of
#: arithmetic with one repeats its operands' text)
_NARROW_TEXT = 4000


def _narrow(sql: Sql) -> str | None:
    """``sql``'s value as a decimal of at most 18 digits (null where it needs more):
    its own text if its type is that narrow, else what its arithmetic computed."""
    if sql.type.is_decimal and sql.type.precision <= _NARROW:
        return sql.text
    return sql.narrow


def _duck_width(op: str, a: SparkType, b: SparkType) -> int:
    """The digits DuckDB's own ``a op b`` of two decimals asks for (a product's is the
    sum of the operands', one less than Spark's)."""
    if op == "*":
        return a.precision + b.precision
    return _unadjusted_precision(op, a, b)


def _decimal_exact(
    op: str, a: Sql, b: Sql, da: SparkType, db: SparkType, result: SparkType, exact_scale: int
) -> Sql:
    """``a op b`` (``+ - *``) exactly as Spark computes it, on any operands."""
    if _unadjusted_precision(op, da, db) <= MAX:
        # the exact result fits Spark's type, and DuckDB's exact decimal arithmetic on the
        # operands' own types cannot overflow before it: no 38-digit widening, no TRY
        # (each costs DuckDB its fixed-width fast path; 4x on TPC-H's Q1)
        if _duck_width(op, da, db) > _NARROW >= max(da.precision, db.precision):
            # DuckDB computes two decimals of up to 18 digits in 64 bits and raises past
            # 18 digits: one operand at 19 digits takes its 128-bit arithmetic
            a = Sql(f"CAST({a.text} AS DECIMAL(19,{da.scale}))", decimal(19, da.scale))
        return Sql(f"CAST(({a.text} {op} {b.text}) AS {result.duck})", result)
    fits = all(t.precision + result.scale - t.scale <= MAX for t in (da, db))
    if exact_scale == result.scale and (op == "*" or fits):
        return Sql(f"TRY_CAST(TRY({_wide(a)} {op} {_wide(b)}) AS {result.duck})", result)
    if op == "*":
        return Sql(_exact.multiply(a, b, result), result)
    return Sql(_exact.add(a, b, result, negate_b=op == "-"), result)


def decimal_divide(a: Sql, b: Sql, result: SparkType) -> Sql:
    """``a / b`` exactly, HALF_UP at ``result``'s scale, null when ``b`` is 0 or the
    quotient overflows ``result`` (Spark's non-ANSI division; ``avg`` uses it too)."""
    return Sql(_exact.divide(a, b, result), result)


def _binary(op: str) -> object:
    def translate(node: Node, scope: Scope) -> Sql:
        a, b = children(node, scope)[:2]
        if a.type.is_decimal or b.type.is_decimal:
            return _decimal(op, a, b)
        if op == "/":  # Spark's Divide is on doubles (or decimals) only
            return Sql(
                f"(CASE WHEN {b.text} = 0 THEN NULL ELSE CAST({a.text} AS DOUBLE) / {b.text} END)",
                a.type,
            )
        if op == "%":
            if a.type.is_integral:  # MIN % -1 is 0 in Java; DuckDB's % may overflow there
                text = f"CASE WHEN {b.text} = -1 THEN 0 ELSE {a.text} % {b.text} END"
            else:
                text = f"{a.text} % {b.text}"
            return Sql(f"(CASE WHEN {b.text} = 0 THEN NULL ELSE {text} END)", a.type)
        if a.type.is_integral and node.get(EVAL_MODE_FIELD) == "TRY":
            # ``try_add``, ``try_subtract``, ``try_multiply``: null where ``+`` would wrap
            exact = f"CAST({a.text} AS HUGEINT) {op} {b.text}"
            return Sql(f"TRY_CAST({exact} AS {a.type.duck})", a.type, True)
        if a.type.is_integral:
            wrapped = _exact.wrap(f"CAST({a.text} AS HUGEINT) {op} {b.text}", bits(a.type))
            return Sql(f"CAST({wrapped} AS {a.type.duck})", a.type, a.nullable or b.nullable)
        return Sql(f"({a.text} {op} {b.text})", a.type, a.nullable or b.nullable)

    return translate


register("Add")(_binary("+"))  # type: ignore[arg-type]
register("Subtract")(_binary("-"))  # type: ignore[arg-type]
register("Multiply")(_binary("*"))  # type: ignore[arg-type]
register(
    "Divide",
    note="decimals: exact at any scale (a quotient past 128 bits is found digit by digit)",
)(_binary("/"))  # type: ignore[arg-type]
register(
    "Remainder",
    note="decimals: falls back where the dividend at the larger scale needs over 38 digits",
)(_binary("%"))  # type: ignore[arg-type]


@register(
    "IntegralDivide",
    note="decimals: falls back where the dividend at the divisor's scale needs over 38 digits",
)
def _div(node: Node, scope: Scope) -> Sql:
    a, b = children(node, scope)[:2]
    if a.type.is_decimal or b.type.is_decimal:
        return _decimal_div(a, b)
    # DuckDB's // truncates toward zero, as Java's; MIN div -1 wraps to MIN
    q = _exact.wrap(f"CAST({a.text} AS HUGEINT) // {b.text}", 64)
    return Sql(f"(CASE WHEN {b.text} = 0 THEN NULL ELSE CAST({q} AS BIGINT) END)", LONG)


def _decimal_div(a: Sql, b: Sql) -> Sql:
    """Spark's ``div`` of decimals: the quotient truncated toward zero, null when it
    overflows ``decimal(p1 - s1 + s2, 0)`` (at least 1 digit, at most 38), then as a
    ``long`` (``BigDecimal.longValue``: the low 64 bits)."""
    da, db = _as_decimal(a.type), _as_decimal(b.type)
    a, b = cast(a, da), cast(b, db)
    if db.scale > da.scale and da.precision + db.scale - da.scale > MAX:
        raise Unsupported("div of decimals whose dividend needs more than 38 digits")
    digits = min(MAX, max(1, da.precision - da.scale + db.scale))
    q = _exact.quotient(a, b, digits)
    return Sql(f"CAST({_exact.wrap(q, 64)} AS BIGINT)", LONG)


def _integral_or_same(a: Sql, text: str) -> Sql:
    """``text`` (over ``a``) of ``a``'s type, wrapped as Java wraps ``-MIN`` and ``abs(MIN)``."""
    if a.type.is_integral:
        text = f"CAST({_exact.wrap(text, bits(a.type))} AS {a.type.duck})"
    return Sql(text, a.type, a.nullable)


@register("UnaryMinus")
def _negate(node: Node, scope: Scope) -> Sql:
    (a,) = children(node, scope)[:1]
    if a.type.is_integral:
        return _integral_or_same(a, f"-CAST({a.text} AS HUGEINT)")
    return Sql(f"(-{a.text})", a.type, a.nullable)


@register("UnaryPositive")
def _positive(node: Node, scope: Scope) -> Sql:
    return children(node, scope)[0]


@register("Abs")
def _abs(node: Node, scope: Scope) -> Sql:
    (a,) = children(node, scope)[:1]
    if a.type.is_integral:
        return _integral_or_same(a, f"abs(CAST({a.text} AS HUGEINT))")
    return Sql(f"abs({a.text})", a.type, a.nullable)


def _scale(node: Node) -> int:
    scale = int_literal(node)
    if scale is None:
        raise Unsupported("round to a scale that is not a literal")
    return scale


@register(
    "Round",
    support=Support.PARTIAL,
    note="doubles round their Double.toString digits as DuckDB prints them (shortest form)",
)
def _round(node: Node, scope: Scope) -> Sql:
    """Spark rounds HALF_UP; a decimal's result type has one integer digit more
    (``RoundBase.dataType``); a double is rounded as ``BigDecimal(d.toString)``."""
    a = children(node, scope)[0]
    d = _scale(node.children[1])
    t = a.type
    if t.is_decimal:
        p, s = t.precision, t.scale
        if d < 0:
            out = decimal(min(max(p - s + 1, -d + 1), MAX), 0)
        else:
            out = decimal(min(p - s + 1 + min(s, d), MAX), min(s, d))
        return Sql(f"TRY_CAST(round({_wide(a)}, {d}) AS {out.duck})", out, a.nullable)
    if t.is_integral:
        if d >= 0:
            return a
        return Sql(
            f"CAST({_exact.wrap(f'round(CAST({a.text} AS HUGEINT), {d})', bits(t))} AS {t.duck})", t
        )
    if t.name != "double" or d < 0 or d > 15:
        raise Unsupported(f"round of {t} to {d} digits")
    # |x| >= 1e17 has no fraction digits; NaN and infinities are themselves
    exact = f"TRY_CAST(CAST({a.text} AS VARCHAR) AS DECIMAL(38,20))"
    return Sql(
        f"(CASE WHEN isfinite({a.text}) AND abs({a.text}) < 1e17 "
        f"THEN CAST(round({exact}, {d}) AS DOUBLE) ELSE {a.text} END)",
        t,
        a.nullable,
    )


@register("UnscaledValue")
def _unscaled(node: Node, scope: Scope) -> Sql:
    (a,) = children(node, scope)[:1]
    return Sql(f"CAST({_exact.unscaled(a)} AS BIGINT)", LONG, a.nullable)


@register("MakeDecimal")
def _make_decimal(node: Node, scope: Scope) -> Sql:
    (a,) = children(node, scope)[:1]
    t = decimal(int(node.get("precision")), int(node.get("scale")))
    return Sql(_exact.decimal_of(a.text, t), t)
