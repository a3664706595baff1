"""Bitwise ``& | ^ ~``, ``shiftleft``/``shiftright``/``shiftrightunsigned``, ``bit_count``
and ``bit_get``/``getbit`` on byte, short, int and long, as Java computes them (what
``grouping()`` compiles to: ``(spark_grouping_id >> n) & 1``).

Java masks a shift distance to the operand's width (``n & 31`` for an int, ``n & 63``
for a long) and wraps a left shift; ``bit_count`` counts the bits of the value widened
to a long (``bit_count(-1Y)`` is 64).  DuckDB's own shifts raise or differ on negative
values, so the shifts are computed on ``HUGEINT`` with powers of two and wrapped.
"""

from __future__ import annotations

from hybrid_shuffle.sparkplan.expressions import _exact
from hybrid_shuffle.sparkplan.expressions.arithmetic import bits
from hybrid_shuffle.sparkplan.expressions.core import Scope, Sql, Unsupported, children, register
from hybrid_shuffle.sparkplan.tree import Node
from hybrid_shuffle.sparkplan.types import INT, SparkType

__all__: list[str] = []


def _integral(*args: Sql) -> None:
    for a in args:
        if not a.type.is_integral:
            raise Unsupported(f"a bitwise operation on {a.type}")


def _bitwise(op: str) -> object:
    def translate(node: Node, scope: Scope) -> Sql:
        a, b = children(node, scope)[:2]
        _integral(a, b)
        text = f"xor({a.text}, {b.text})" if op == "^" else f"({a.text} {op} {b.text})"
        return Sql(f"CAST({text} AS {a.type.duck})", a.type, a.nullable or b.nullable)

    return translate


register("BitwiseAnd")(_bitwise("&"))  # type: ignore[arg-type]
register("BitwiseOr")(_bitwise("|"))  # type: ignore[arg-type]
register("BitwiseXor")(_bitwise("^"))  # type: ignore[arg-type]


@register("BitwiseNot")
def _not(node: Node, scope: Scope) -> Sql:
    (a,) = children(node, scope)[:1]
    _integral(a)
    return Sql(f"CAST((~{a.text}) AS {a.type.duck})", a.type, a.nullable)


def _power(a: Sql, n: Sql) -> tuple[SparkType, str]:
    """The left operand's type and ``2^(n & (width - 1))`` as HUGEINT (Java's masking)."""
    _integral(a, n)
    width = bits(a.type)
    return a.type, f"(CAST(1 AS HUGEINT) << CAST(({n.text}) & {width - 1} AS INTEGER))"


@register("ShiftLeft")
def _shift_left(node: Node, scope: Scope) -> Sql:
    a, n = children(node, scope)[:2]
    t, power = _power(a, n)
    wrapped = _exact.wrap(f"CAST({a.text} AS HUGEINT) * {power}", bits(t))
    return Sql(f"CAST({wrapped} AS {t.duck})", t)


@register("ShiftRight")
def _shift_right(node: Node, scope: Scope) -> Sql:
    """Arithmetic shift: the floor of ``a / 2^n``."""
    a, n = children(node, scope)[:2]
    t, power = _power(a, n)
    body = "CASE WHEN @.a >= 0 THEN @.a // @.p ELSE -((-@.a - 1) // @.p) - 1 END"
    text = _exact.let({"a": f"CAST({a.text} AS HUGEINT)", "p": power}, body)
    return Sql(f"CAST({text} AS {t.duck})", t)


@register("ShiftRightUnsigned")
def _shift_right_unsigned(node: Node, scope: Scope) -> Sql:
    """Logical shift: the value as an unsigned ``width``-bit number, divided, re-signed."""
    a, n = children(node, scope)[:2]
    t, power = _power(a, n)
    width = bits(t)
    unsigned = f"((CAST({a.text} AS HUGEINT) + {2**width}) % {2**width})"
    wrapped = _exact.wrap(f"{unsigned} // {power}", width)
    return Sql(f"CAST({wrapped} AS {t.duck})", t)


@register("BitwiseCount")
def _bit_count(node: Node, scope: Scope) -> Sql:
    (a,) = children(node, scope)[:1]
    if a.type.name == "boolean":
        return Sql(f"CAST({a.text} AS INTEGER)", INT, a.nullable)
    _integral(a)
    return Sql(f"CAST(bit_count(CAST({a.text} AS BIGINT)) AS INTEGER)", INT, a.nullable)


@register("BitwiseGet")
def _bit_get(node: Node, scope: Scope) -> Sql:
    """``bit_get(x, pos)``: bit ``pos`` of ``x`` as a byte (Spark raises for a position
    outside the type's width, so every row it answers has one inside)."""
    a, pos = children(node, scope)[:2]
    _integral(a, pos)
    byte = SparkType("byte")
    text = f"CAST((CAST({a.text} AS BIGINT) >> CAST({pos.text} AS BIGINT)) & 1 AS TINYINT)"
    return Sql(text, byte, a.nullable or pos.nullable)
