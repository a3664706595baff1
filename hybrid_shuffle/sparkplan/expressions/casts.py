"""``cast`` in Spark 3.5's default (non-ANSI) mode, where DuckDB's ``TRY_CAST`` differs:

- string -> integral: Spark trims whitespace and ISO controls, takes an optional
  sign, digits and an optional ``.digits`` that it truncates (``'1.5'`` is 1);
  anything else (``'1e3'``, ``'abc'``) is null.  DuckDB would round ``'1.5'`` to 2.
- fraction -> integral: Java's ``(int)``/``(long)`` of a double: truncated, NaN is 0,
  out of range saturates; a byte or short wraps that int.
- decimal -> integral and integral -> narrower integral: truncated, then wrapped
  (``Decimal.toLong`` keeps the low 64 bits), never null.
- string -> boolean: Spark's words (``t true y yes 1`` / ``f false n no 0``), trimmed.
- decimal -> decimal rounds HALF_UP (DuckDB rounds half away from zero, the same)
  and is null on overflow.
"""

from __future__ import annotations

from hybrid_shuffle.sparkplan.expressions import _exact
from hybrid_shuffle.sparkplan.expressions.arithmetic import bits
from hybrid_shuffle.sparkplan.expressions.core import (
    Scope,
    Sql,
    Support,
    Unsupported,
    children,
    register,
    typed,
)
from hybrid_shuffle.sparkplan.expressions.timestamps import cast_timestamp
from hybrid_shuffle.sparkplan.tree import Node
from hybrid_shuffle.sparkplan.types import SparkType

__all__: list[str] = []

#: Spark's ``UTF8String.trimAll``: whitespace and ISO control characters, both ends
_TRIM = "'^[\\x00-\\x20]+|[\\x00-\\x20]+$'"


def _trimmed(text: str) -> str:
    return f"regexp_replace({text}, {_TRIM}, '', 'g')"


def _string_to_integral(a: Sql, to: SparkType) -> str:
    """``UTF8String.toLong``/``toInt``: the digits before a well-formed fraction."""
    form = "'^[+-]?[0-9]*(\\.[0-9]*)?$'"
    # a zero after the sign makes '-.5' and '.' parse (Spark gives 0 for them)
    digits = "regexp_replace(@.s, '^([+-]?)([0-9]*).*$', '\\10\\2')"
    body = (
        f"CASE WHEN regexp_matches(@.s, {form}) AND @.s NOT IN ('', '+', '-') "
        f"THEN TRY_CAST({digits} AS {to.duck}) END"
    )
    return _exact.let({"s": _trimmed(a.text)}, body)


def _fraction_to_integral(a: Sql, to: SparkType) -> str:
    """Java's ``(int) d``/``(long) d``: truncation, NaN 0, saturation; byte and short wrap
    the int (Scala's ``d.toByte`` is ``d.toInt.toByte``)."""
    wide = 64 if to.name == "long" else 32
    low, high = -(2 ** (wide - 1)), 2 ** (wide - 1) - 1
    body = (
        f"CASE WHEN isnan(@.x) THEN 0 WHEN @.x >= {high} THEN {high} "
        f"WHEN @.x <= {low} THEN {low} ELSE CAST(trunc(@.x) AS HUGEINT) END"
    )
    value = _exact.let({"x": f"CAST({a.text} AS DOUBLE)"}, body)
    if bits(to) < wide:
        value = _exact.wrap(value, bits(to))
    return f"CAST({value} AS {to.duck})"


def _string_to_boolean(a: Sql) -> str:
    s = f"lower({_trimmed(a.text)})"
    return (
        f"(CASE WHEN {s} IN ('t', 'true', 'y', 'yes', '1') THEN TRUE "
        f"WHEN {s} IN ('f', 'false', 'n', 'no', '0') THEN FALSE END)"
    )


@register(
    "Cast",
    support=Support.PARTIAL,
    note="string to double, decimal or date accepts what DuckDB parses (Spark also takes "
    "'1.5d', '2021-2-3', '2021-02'); string -> timestamp takes a zone name in the string "
    "when ICU and Python's tz database know it (Java's list may differ in a rare name); "
    "string -> timestamp_ntz, numbers -> timestamp and double -> string fall back",
)
def _cast(node: Node, scope: Scope) -> Sql:
    (a,) = children(node, scope)[:1]
    to = typed(node)
    source = a.type
    if source == to:
        return a
    if to.name in ("timestamp", "timestamp_ntz") or source.name in ("timestamp", "timestamp_ntz"):
        return cast_timestamp(a, to, node)
    if to.name == "string" and (source.is_fractional or source.name == "binary"):
        raise Unsupported(f"a cast from {source} to string (Spark's own number format)")
    if to.is_integral:
        if source.name == "string":
            return Sql(_string_to_integral(a, to), to)
        if source.is_fractional:
            return Sql(_fraction_to_integral(a, to), to, a.nullable)
        if source.is_decimal or (source.is_integral and bits(source) > bits(to)):
            whole = f"CAST(trunc({a.text}) AS HUGEINT)" if source.is_decimal else a.text
            return Sql(f"CAST({_exact.wrap(whole, bits(to))} AS {to.duck})", to, a.nullable)
    if to.name == "boolean" and source.name == "string":
        return Sql(_string_to_boolean(a), to)
    if to.name == "binary":  # a string's UTF-8 bytes (DuckDB's own cast reads \x escapes)
        if source.name != "string":
            raise Unsupported(f"a cast from {source} to binary")
        return Sql(f"encode({a.text})", to, a.nullable)
    if source.name == "string" and (to.is_numeric or to.name == "date"):
        return Sql(f"TRY_CAST({_trimmed(a.text)} AS {to.duck})", to)
    return Sql(f"TRY_CAST({a.text} AS {to.duck})", to)
