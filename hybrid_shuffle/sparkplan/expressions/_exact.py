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
import re

from hybrid_shuffle.sparkplan.expressions.core import Sql
from hybrid_shuffle.sparkplan.types import SparkType

__all__ = [
    "add",
    "average",
    "decimal_of",
    "divide",
    "let",
    "multiply",
    "quotient",
    "remainder",
    "unscaled",
    "wrap",
]

#: the largest HUGEINT
MAX_HUGEINT = 2**127 - 1
#: the most digits of a decimal (``DecimalType.MAX_PRECISION``)
DECIMAL_SCALE = 38

_names = itertools.count()


def let(bindings: dict[str, str], body: str) -> str:
    """``body`` with each name bound to its SQL, evaluated once (a one-element list mapped
    by a lambda).  ``body`` names a binding ``@.name``; the bindings' own ``@`` is left
    for an enclosing ``let``, so an operand's SQL (always a binding) is never rewritten.

    A binding that costs nothing to repeat (a column, a lambda's field, a typed constant:
    ``atomic``) is written into ``body`` in place instead: DuckDB builds the list and runs
    the lambda for every row, which made TPC-H Q22's ``substring(c_phone, 1, 2)`` filter
    four times as slow as the plain call.  With nothing left to bind, no list is built."""
    var = f"_v{next(_names)}"
    inline = {k: v for k, v in bindings.items() if atomic(v)}
    kept = {k: v for k, v in bindings.items() if k not in inline}

    def name(match: re.Match[str]) -> str:
        # one pass: an inlined binding's own ``@`` stays for the enclosing ``let``
        return inline[match[1]] if match[1] in inline else f"{var}.{match[1]}"

    text = _BOUND.sub(name, body)
    if not kept:
        return f"({text})"
    struct = ", ".join(f"'{k}': {v}" for k, v in kept.items())
    return f"list_transform([{{{struct}}}], lambda {var}: {text})[1]"


#: ``@.name`` in a ``let``'s body
_BOUND = re.compile(r"@\.([A-Za-z_][A-Za-z0-9_]*)")
#: a column (``c12``, ``"c_name"``), a lambda variable's field (``_v3.s``), an enclosing
#: ``let``'s binding (``@.x``)
_REFERENCE = re.compile(r'(@\.)?[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*|"(?:[^"]|"")+"')


def atomic(sql: str) -> bool:
    """Whether ``sql`` costs next to nothing to repeat and binds the same wherever it is
    written: a column or field reference, or a literal, cast to a type any number of
    times (``CAST(CAST(1 AS INTEGER) AS BIGINT)``, ``CAST("j" AS BIGINT)``; a cast to
    ``VARCHAR`` formats, which is not free).  Not a bare literal: DuckDB types ``1`` or
    ``'x'`` by where it stands, a list's field by its value."""
    sql, types = sql.strip(), []
    while (cast := _CAST.fullmatch(sql)) is not None:
        sql = cast[1]
        types.append(cast[2])
    if _LITERAL.fullmatch(sql):
        return bool(types)  # a constant, which DuckDB folds as it binds
    if sql.upper() in ("TRUE", "FALSE"):  # names, to the pattern below
        return False
    return _REFERENCE.fullmatch(sql) is not None and "VARCHAR" not in types


#: ``CAST(x AS type)``: x and the type's name
_CAST = re.compile(r"CAST\((.*) AS ([A-Z]+)(?:\([0-9, ]+\))?\)")
_LITERAL = re.compile(r"-?[0-9]+(?:\.[0-9]+)?|'(?:[^']|'')*'|NULL")


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
    unit = _power_literal(-to.scale)
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


def divide(a: Sql, b: Sql, result: SparkType, small: bool = True) -> str:
    """``a / b`` (decimals) exactly, HALF_UP at ``result``'s scale, null when ``b`` is 0
    or the quotient overflows.  (Spark 3.5.1+ divides at scale 39 rounding DOWN, then
    rounds HALF_UP to the result's scale of at most 38: the same as one HALF_UP.)
    Where ``(n % d) * 10^shift`` needs more than 128 bits the digits past the integer
    quotient come one at a time (``_long_division``).  With ``small`` (the default) the
    rows with small operands take 64-bit integers instead (``_small_divide``)."""
    shift = result.scale - a.type.scale + b.type.scale
    if shift >= 0:
        # n * 10^shift / d = q0 * 10^shift + (r * 10^shift) / d, with r = n % d < d;
        up = _up("@.rho", "@.d")
        head = f"TRY(@.q0 * {10**shift})" if shift <= DECIMAL_SCALE else "0"
        if shift > DECIMAL_SCALE:  # any integer part overflows the result
            head = "CASE WHEN @.q0 = 0 THEN 0 END"
        rest = let({"qf": "@.tail.q", "rho": "@.tail.x", "d": "@.d"}, f"TRY(@.qf + {up})")
        tail = (
            f"CASE WHEN @.r <= {MAX_HUGEINT // 10**shift} THEN "
            f"{{'q': (@.r * {10**shift}) // @.d, 'x': (@.r * {10**shift}) % @.d}} "
            f"ELSE {_long_division('@.r', '@.d', shift)} END"
            if 10**shift <= MAX_HUGEINT
            else _long_division("@.r", "@.d", shift)
        )
        step = let(
            {"q0": "@.n // @.d", "r": "@.n % @.d", "d": "@.d"},
            let({"head": head, "tail": tail, "d": "@.d"}, f"TRY(@.head + {rest})"),
        )
    else:
        # n / (d * 10^j) = (n // d) // 10^j, rounded up when (n // d) % 10^j >= 10^j / 2
        j = -shift
        step = let(
            {"q": "@.n // @.d"},
            f"@.q // {10**j} + CASE WHEN @.q % {10**j} >= {5 * 10 ** (j - 1)} THEN 1 ELSE 0 END",
        )
    inner = f"CASE WHEN @.d = 0 THEN NULL ELSE {step} END"
    exact = decimal_of(_signed(a, b, inner), result)
    if not small or not 0 <= shift <= _FAST_SHIFT or max(a.type.scale, b.type.scale) > 9:
        return exact  # a scale past 9 leaves a 64-bit unscaled value no room
    return _small_divide(a, b, shift, result, exact)


#: the largest scale shift the 64-bit division takes (``n * 10^shift`` below 10^18
#: leaves ``n`` a digit at least)
_FAST_SHIFT = 17


def _small_divide(a: Sql, b: Sql, shift: int, result: SparkType, exact: str) -> str:
    """``divide`` in 64-bit integers for the rows whose operands are small, ``exact`` for
    the others.  The exact kernel binds its values with ``let`` (a list and a lambda a
    row) and divides 128-bit integers: 10 microseconds a row.  Where the unscaled
    ``n = |a| * 10^sa`` and ``d = |b| * 10^sb`` fit a ``decimal(18, s)`` and
    ``n * 10^shift`` stays below 10^18, ``(2 * n * 10^shift + d) // (2 * d)`` is the
    HALF_UP quotient within 64 bits.  DuckDB's ``CASE`` evaluates each branch on its
    own rows only."""
    sa, sb = a.type.scale, b.type.scale
    n, d = _unscaled_magnitude(a), _unscaled_magnitude(b)
    negative = f"(({a.text} < 0) <> ({b.text} < 0))"
    quotient = f"(2 * {n} * {10**shift} + {d}) // (2 * {d})"
    signed = decimal_of(f"CASE WHEN {negative} THEN -{quotient} ELSE {quotient} END", result)
    small = (
        f"abs({a.text}) < {_power_literal(18 - sa - max(shift, sa))} "
        f"AND abs({b.text}) < {_power_literal(18 - 2 * sb)}"
    )
    return f"(CASE WHEN {b.text} = 0 THEN NULL WHEN {small} THEN {signed} ELSE {exact} END)"


def average(total: Sql, count: str, division: SparkType, out: SparkType, exact: str) -> str:
    """Spark's decimal ``avg`` from its ``total`` (a decimal) and ``count`` (a positive
    bigint): ``total / count`` HALF_UP at ``division``'s scale, then HALF_UP at
    ``out``'s (``exact`` computes it so, in 128-bit decimals: DuckDB's narrowing cast
    of a 38-digit decimal alone costs 3 microseconds a row), in 64-bit integers for
    the rows where that fits.

    With ``n`` the unscaled total, ``A = n * 10^k1`` (at ``out``'s scale) and ``k2`` the
    digits ``division`` has beyond ``out``: ``A = u * d + v``, the quotient at
    ``division``'s scale is ``u * 10^k2 + w`` with ``w`` the HALF_UP of
    ``v * 10^k2 / d`` (at most ``10^k2``), and at ``out``'s scale it is ``u``, one more
    when ``w >= 10^k2 / 2``: the same two roundings, with no value past 10^18."""
    s = total.type.scale
    k1 = out.scale - s
    k2 = division.scale - out.scale
    if k1 < 0 or k2 < 1 or k2 > 17 or s > 9:
        return exact
    n = _unscaled_magnitude(total)
    d = f"CAST({count} AS BIGINT)"
    a = f"({n} * {10**k1})"
    w = f"((2 * ({a} % {d}) * {10**k2} + {d}) // (2 * {d}))"
    rounded = f"({a} // {d} + CASE WHEN {w} >= {5 * 10 ** (k2 - 1)} THEN 1 ELSE 0 END)"
    signed = f"CASE WHEN {total.text} < 0 THEN -{rounded} ELSE {rounded} END"
    small = (
        f"abs({total.text}) < {_power_literal(18 - s - max(s, k1))} "
        f"AND {count} > 0 AND {count} < {10 ** (18 - k2)}"
    )
    return f"(CASE WHEN {small} THEN {decimal_of(signed, out)} ELSE {exact} END)"


def _unscaled_magnitude(sql: Sql) -> str:
    """``|x| * 10^s`` of a decimal ``x`` of scale ``s`` as a BIGINT, for rows whose ``|x|``
    fits a ``decimal(18, s)`` with its unscaled value (the callers' bounds): the 64-bit
    twin of ``unscaled``."""
    s = sql.type.scale
    return f"CAST(CAST(abs({sql.text}) AS DECIMAL(18,{s})) * {10**s} AS BIGINT)"


def _power_literal(exponent: int) -> str:
    """10^exponent as an exact decimal literal (a negative exponent: 0.0..01)."""
    if exponent >= 0:
        return str(10**exponent)
    return "0." + "0" * (-exponent - 1) + "1"


def _long_division(r: str, d: str, digits: int) -> str:
    """``{q, x}``: ``r * 10^digits`` divided by ``d`` (``0 <= r < d``), quotient and
    remainder, one digit at a time (``list_reduce``) where ``r * 10^digits`` needs more
    than 128 bits.  A remainder ``x >= 10^37`` is multiplied by 10 against ``d // 10``
    (the digit is ``x // (d // 10)`` or one less), so nothing leaves 128 bits; slow
    (tens of microseconds a row), so only the rows that need it take it."""
    zero = "CAST(0 AS HUGEINT)"
    small = "{'q': TRY(acc.q * 10 + acc.x * 10 // acc.d), 'x': acc.x * 10 % acc.d, 'd': acc.d}"
    te = "least(9, acc.x // (acc.d // 10))"
    rem = f"(10 * (acc.x - {te} * (acc.d // 10)) - {te} * (acc.d % 10))"
    large = (
        f"{{'q': TRY(acc.q * 10 + CASE WHEN {rem} < 0 THEN {te} - 1 ELSE {te} END), "
        f"'x': CASE WHEN {rem} < 0 THEN {rem} + acc.d ELSE {rem} END, 'd': acc.d}}"
    )
    step = f"CASE WHEN acc.x < {10**37} THEN {small} ELSE {large} END"
    blank = f"{{'q': {zero}, 'x': {zero}, 'd': {zero}}}"
    items = "[" + ", ".join([blank] * digits) + "]"
    start = f"{{'q': {zero}, 'x': CAST({r} AS HUGEINT), 'd': CAST({d} AS HUGEINT)}}"
    return f"list_reduce({items}, lambda acc, _e: {step}, {start})"


def multiply(a: Sql, b: Sql, result: SparkType) -> str:
    """``a * b`` (decimals) exactly, HALF_UP at ``result``'s scale, ``k`` digits below the
    exact product's; null on overflow.  (Spark 3.5.1+ multiplies to 39 significant
    digits rounding DOWN first, which changes no result that fits 38 digits.)  The
    product of the unscaled magnitudes (up to 76 digits) is held as
    ``hi * 10^38 + lo`` from four 19-digit partial products, each within 128 bits."""
    k = a.type.scale + b.type.scale - result.scale
    base = 10**19
    halves = {"a1": f"@.n // {base}", "a0": f"@.n % {base}"}
    halves |= {"b1": f"@.d // {base}", "b0": f"@.d % {base}"}
    products = {"z": "@.a0 * @.b0", "x": "@.a1 * @.b0", "y": "@.a0 * @.b1", "w": "@.a1 * @.b1"}
    carried = {"c1": f"@.z // {base} + @.x % {base} + @.y % {base}"}
    carried |= {name: f"@.{name}" for name in ("z", "x", "y", "w")}
    hi = f"@.w + @.x // {base} + @.y // {base} + @.c1 // {base}"
    lo = f"(@.c1 % {base}) * {base} + @.z % {base}"
    limbs = let(halves, let(products, let(carried, _round_product(hi, lo, k))))
    return decimal_of(_signed(a, b, limbs), result)


def _round_product(hi: str, lo: str, k: int) -> str:
    """``P = hi * 10^38 + lo`` (``0 <= lo < 10^38``) HALF_UP ``k`` digits off."""
    if k == 0:
        return let({"hi": hi, "lo": lo}, "CASE WHEN @.hi = 0 THEN @.lo END")
    if k <= 38:
        body = (
            f"TRY(@.hi * {10 ** (38 - k)} + @.lo // {10**k}) + "
            f"CASE WHEN @.lo % {10**k} >= {5 * 10 ** (k - 1)} THEN 1 ELSE 0 END"
        )
    else:
        body = (
            f"@.hi // {10 ** (k - 38)} + "
            f"CASE WHEN @.hi % {10 ** (k - 38)} >= {5 * 10 ** (k - 39)} THEN 1 ELSE 0 END"
        )
    return let({"hi": hi, "lo": lo}, body)


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
    integers = f"TRY({ai} {op} {bi})"
    # an operand scaled up may leave 128 bits where the sum does not: x * 10^e + y is
    # (x + y // 10^e) * 10^e + y % 10^e
    for scaled, other, name in ((a, bi, "sa"), (b, ai, "sb")):
        e = s - scaled.type.scale
        if e > 0:
            high = (
                f"@.{name} {op} ({other}) // {10**e}"
                if name == "sa"
                else (f"({other}) // {10**e} {op} @.{name}")
            )
            low = f"({other}) % {10**e}"
            sign = op if name == "sa" else "+"
            integers = f"TRY(({high}) * {10**e} {sign} {low})"
    sums = let({"i0": integers, "f0": f"{af} {op} ({bf})"}, agree)
    return decimal_of(let({"sa": unscaled(a), "sb": unscaled(b)}, sums), result)


def remainder(a: Sql, b: Sql, result: SparkType, positive: bool = False) -> str:
    """``a % b`` (decimals) exactly: both unscaled at the larger scale, where ``%``
    truncates as Java's ``BigDecimal.remainder``; with ``positive``, Spark's ``pmod``
    (``r < 0 ? (r + b) % b : r``).  Null for a zero divisor, and when an operand needs
    more than 38 digits at that scale (``Remainder``'s note)."""
    s = max(a.type.scale, b.type.scale)
    x = f"TRY(@.sa * {10 ** (s - a.type.scale)})"
    # a divisor beyond 128 bits at that scale is larger than the dividend: x % y = x
    y = f"TRY(@.sb * {10 ** (s - b.type.scale)})"
    rest = "CASE WHEN @.y IS NULL THEN @.x ELSE @.x % @.y END"
    if positive:
        rest = let(
            {"r": rest, "y": "@.y"},
            "CASE WHEN @.r < 0 AND @.y IS NULL THEN NULL "
            "WHEN @.r < 0 THEN TRY((@.r + @.y) % @.y) ELSE @.r END",
        )
    body = (
        "CASE WHEN @.sa IS NULL OR @.sb IS NULL OR @.sb = 0 THEN NULL "
        f"ELSE {let({'x': x, 'y': y}, rest)} END"
    )
    return decimal_of(let({"sa": unscaled(a), "sb": unscaled(b)}, body), result)


def quotient(a: Sql, b: Sql, digits: int) -> str:
    """``a div b`` (decimals): the quotient truncated toward zero as a HUGEINT, null for a
    zero divisor or a quotient of more than ``digits`` digits (Spark's check against
    ``decimal(digits, 0)``).  The caller makes sure ``a`` at ``b``'s larger scale fits
    128 bits; ``b`` at ``a``'s larger scale that does not is larger than ``a``: 0."""
    s = max(a.type.scale, b.type.scale)
    x = f"@.sa * {10 ** (s - a.type.scale)}"
    y = f"TRY(@.sb * {10 ** (s - b.type.scale)})"
    body = let(
        {"x": x, "y": y, "sb": "@.sb"},
        f"CASE WHEN @.sb = 0 THEN NULL WHEN @.y IS NULL THEN 0 ELSE "
        f"(CASE WHEN abs(@.x // @.y) < {10**digits} THEN @.x // @.y END) END",
    )
    guarded = f"CASE WHEN @.sa IS NULL OR @.sb IS NULL THEN NULL ELSE {body} END"
    return let({"sa": unscaled(a), "sb": unscaled(b)}, guarded)


def wrap(text: str, bits: int) -> str:
    """An integer (HUGEINT-wide) wrapped into ``bits`` two's complement bits, as Java's
    ``int`` and ``long`` arithmetic overflows."""
    m = 2**bits
    h = 2 ** (bits - 1)
    return f"((((CAST({text} AS HUGEINT) + {h}) % {m}) + {m}) % {m} - {h})"
