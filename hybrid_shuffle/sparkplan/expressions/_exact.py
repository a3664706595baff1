"""Exact decimal and integer kernels in DuckDB SQL, for the corners DuckDB computes otherwise.

Spark computes decimal arithmetic exactly (``BigDecimal``), rounds HALF_UP to the
result type and gives null on overflow; it wraps integer overflow (Java ``int``
and ``long``).  DuckDB raises on a decimal whose exact value needs more than 38
digits, divides and takes remainders of decimals in floating point, and raises
on integer overflow.  So the kernels here work on the unscaled integers as
``HUGEINT`` (128 bits, up to 1.7e38: one 38-digit decimal fits), bound once each
with ``let`` so an operand's SQL is not repeated, and wrap everything that may
still overflow in ``TRY`` (null), which is Spark's answer whenever the result
itself overflows.
"""

from __future__ import annotations

import itertools

from hybrid_shuffle.sparkplan.expressions.core import Sql
from hybrid_shuffle.sparkplan.types import SparkType

__all__ = ["add", "decimal_of", "divide", "let", "multiply", "remainder", "unscaled", "wrap"]

#: the largest HUGEINT
MAX_HUGEINT = 2**127 - 1

_names = itertools.count()


def let(bindings: dict[str, str], body: str) -> str:
    """``body`` with each name bound to its SQL, evaluated once (a one-element list mapped
    by a lambda).  ``body`` names a binding ``@.name``; the bindings' own ``@`` is left
    for an enclosing ``let``, so an operand's SQL (always a binding) is never rewritten."""
    var = f"_v{next(_names)}"
    struct = ", ".join(f"'{k}': {v}" for k, v in bindings.items())
    return f"list_transform([{{{struct}}}], lambda {var}: {body.replace('@.', var + '.')})[1]"


def unscaled(sql: Sql) -> str:
    """The unscaled integer of a decimal as HUGEINT: the integer part scaled up plus the
    fraction's digits (no intermediate decimal can overflow)."""
    s = sql.type.scale
    if s == 0:
        return f"CAST({sql.text} AS HUGEINT)"
    if s > 18:  # fraction * 10^s would overflow DECIMAL(38, s): read the digits instead
        return f"CAST(replace(CAST({sql.text} AS VARCHAR), '.', '') AS HUGEINT)"
    return let(
        {"x": sql.text},
        f"CAST(trunc(@.x) AS HUGEINT) * {10**s} + CAST((@.x - trunc(@.x)) * {10**s} AS HUGEINT)",
    )


def decimal_of(unscaled_text: str, to: SparkType) -> str:
    """The decimal ``to`` whose unscaled integer is ``unscaled_text``; null when it
    overflows ``to`` (or is null)."""
    unit = "1" if to.scale == 0 else "0." + "0" * (to.scale - 1) + "1"
    return (
        f"TRY_CAST(TRY_CAST({unscaled_text} AS DECIMAL(38,0)) * "
        f"CAST({unit} AS DECIMAL(38,{to.scale})) AS {to.duck})"
    )


def _up(remainder: str, divisor: str) -> str:
    """1 when a non-negative ``remainder`` against ``divisor`` is half or more (HALF_UP),
    compared as ``r >= d - r`` so nothing is doubled past 128 bits."""
    return f"(CASE WHEN {remainder} >= {divisor} - {remainder} THEN 1 ELSE 0 END)"


def _signed(a: Sql, b: Sql, magnitude: str) -> str:
    """``let`` of the unscaled operands as ``@.sa``/``@.sb`` and their magnitudes as
    ``@.n``/``@.d``; ``magnitude`` (over n and d) gets the sign of ``sa * sb``."""
    inner = let(
        {"n": "abs(@.sa)", "d": "abs(@.sb)", "neg": "(@.sa < 0) <> (@.sb < 0)"},
        f"CASE WHEN @.neg THEN -1 ELSE 1 END * TRY({magnitude})",
    )
    return let({"sa": unscaled(a), "sb": unscaled(b)}, inner)


def divide(a: Sql, b: Sql, result: SparkType) -> str:
    """``a / b`` (decimals) exactly, HALF_UP at ``result``; null for a zero divisor or an
    overflow, and in one corner (``Divide``'s note): when ``n * 10^shift`` does not
    fit 128 bits and neither does the remainder ``(n % d) * 10^shift``."""
    shift = result.scale - a.type.scale + b.type.scale
    if shift >= 0:
        # n * 10^shift / d = q0 * 10^shift + (r * 10^shift) / d, with r = n % d < d
        step = let(
            {"q0": "@.n // @.d", "r": f"TRY((@.n % @.d) * {10**shift})", "d": "@.d"},
            f"@.q0 * {10**shift} + @.r // @.d + " + _up("@.r % @.d", "@.d"),
        )
    else:
        # n / (d * 10^k) = (n // d) // 10^k, rounded up when (n // d) % 10^k >= 10^k / 2
        k = -shift
        step = let(
            {"q": "@.n // @.d"},
            f"@.q // {10**k} + CASE WHEN @.q % {10**k} >= {5 * 10 ** (k - 1)} THEN 1 ELSE 0 END",
        )
    inner = f"CASE WHEN @.d = 0 THEN NULL ELSE {step} END"
    return decimal_of(_signed(a, b, inner), result)


def multiply(a: Sql, b: Sql, result: SparkType) -> str:
    """``a * b`` (decimals) exactly, HALF_UP at ``result``'s scale, ``k`` digits below the
    exact product's: with ``n = nh * 10^k + nl`` and ``d = dh * 10^k + dl``,
    ``n * d / 10^k = nh * d + nl * dh + nl * dl / 10^k``, each term within 128 bits
    unless the result overflows (``k`` is at most 19, so ``nl * dl`` fits)."""
    k = a.type.scale + b.type.scale - result.scale
    unit = 10**k
    parts = {"nh": f"@.n // {unit}", "nl": f"@.n % {unit}", "d": "@.d"}
    parts |= {"dh": f"@.d // {unit}", "dl": f"@.d % {unit}"}
    product = let(
        parts,
        f"@.nh * @.d + @.nl * @.dh + (@.nl * @.dl) // {unit} + "
        + _up(f"((@.nl * @.dl) % {unit})", str(unit)),
    )
    return decimal_of(_signed(a, b, product), result)


def add(a: Sql, b: Sql, result: SparkType, negate_b: bool = False) -> str:
    """``a + b`` (or ``a - b``) exactly, HALF_UP at ``result``'s scale, ``k`` digits below
    an operand's: each operand splits into its integer at that scale and a fraction
    of ``k`` digits; the integers add in 128 bits (an overflow there is the
    result's), the fraction sum ``f`` (``|f| < 2 * 10^k``) takes the integer sum's
    sign, then carries and rounds half away from zero."""
    s = result.scale
    k = max(a.type.scale, b.type.scale) - s
    unit = 10**k

    def split(sql: Sql, name: str) -> tuple[str, str]:
        d = sql.type.scale - s
        if d <= 0:
            return f"@.{name} * {10 ** (-d)}", "0"
        return f"@.{name} // {10**d}", f"(@.{name} % {10**d}) * {10 ** (k - d)}"

    ai, af = split(a, "sa")
    bi, bf = split(b, "sb")
    op = "-" if negate_b else "+"
    agree = let(
        {
            "i": "CASE WHEN @.i0 > 0 AND @.f0 < 0 THEN @.i0 - 1 "
            "WHEN @.i0 < 0 AND @.f0 > 0 THEN @.i0 + 1 ELSE @.i0 END",
            "f": f"CASE WHEN @.i0 > 0 AND @.f0 < 0 THEN @.f0 + {unit} "
            f"WHEN @.i0 < 0 AND @.f0 > 0 THEN @.f0 - {unit} ELSE @.f0 END",
        },
        f"TRY(@.i + @.f // {unit} + sign(@.f) * "
        f"(CASE WHEN abs(@.f) % {unit} >= {unit - unit // 2} THEN 1 ELSE 0 END))",
    )
    sums = let({"i0": f"TRY({ai} {op} {bi})", "f0": f"{af} {op} ({bf})"}, agree)
    return decimal_of(let({"sa": unscaled(a), "sb": unscaled(b)}, sums), result)


def remainder(a: Sql, b: Sql, result: SparkType) -> str:
    """``a % b`` (decimals) exactly: both unscaled at the larger scale, where ``%``
    truncates as Java's ``BigDecimal.remainder``; null for a zero divisor, and when an
    operand needs more than 38 digits at that scale (``Remainder``'s note)."""
    s = max(a.type.scale, b.type.scale)
    x = f"TRY(@.sa * {10 ** (s - a.type.scale)})"
    y = f"TRY(@.sb * {10 ** (s - b.type.scale)})"
    body = f"CASE WHEN @.sb = 0 THEN NULL ELSE {x} % {y} END"
    return decimal_of(let({"sa": unscaled(a), "sb": unscaled(b)}, body), result)


def wrap(text: str, bits: int) -> str:
    """An integer (HUGEINT-wide) wrapped into ``bits`` two's complement bits, as Java's
    ``int`` and ``long`` arithmetic overflows."""
    m = 2**bits
    h = 2 ** (bits - 1)
    return f"((((CAST({text} AS HUGEINT) + {h}) % {m}) + {m}) % {m} - {h})"
