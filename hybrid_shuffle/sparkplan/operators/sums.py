"""Spark's ``sum`` and ``avg`` at their edges: the types they sum in, and what an
overflow gives under Spark's non-ANSI evaluation.

- A sum of integers is a ``bigint`` that wraps around (Java's ``long`` addition), so
  ``sum`` of ``9223372036854775807`` and ``1`` is ``-9223372036854775808``.  DuckDB
  sums integers exactly (into a ``hugeint``); ``wrap_long`` takes that sum modulo
  2^64, which is the wrapped one whatever the order of the additions.
- A sum of decimals is a ``decimal(p + 10, s)`` (at most 38 digits), null once the sum
  has more integer digits than that (the buffer of the running sum cannot hold it).
  DuckDB sums decimals into a 128-bit ``decimal(38, s)`` that may silently hold more
  than 38 digits; ``fit_decimal`` makes a value that does not fit null.
- ``avg`` of anything but a decimal sums in a ``double``.
"""

from __future__ import annotations

from hybrid_shuffle.sparkplan.expressions import Unsupported
from hybrid_shuffle.sparkplan.types import DOUBLE, LONG, SparkType, decimal

__all__ = ["average_sum_type", "fit_decimal", "sum_of", "sum_type", "wrap_long"]

_TWO_64 = 2**64
_TWO_63 = 2**63


def _bounded(precision: int, scale: int) -> SparkType:
    return decimal(min(precision, 38), min(scale, 38))


def sum_type(t: SparkType) -> SparkType:
    """The type of Spark's ``sum`` of a ``t`` (also its buffer's)."""
    if t.is_decimal:
        return _bounded(t.precision + 10, t.scale)
    if t.is_integral:
        return LONG
    if t.is_fractional:
        return DOUBLE
    raise Unsupported(f"sum of {t}")


def average_sum_type(t: SparkType) -> SparkType:
    """The type of the sum Spark's ``avg`` of a ``t`` keeps: a decimal's ``sum_type``,
    else ``double``."""
    if t.is_decimal:
        return sum_type(t)
    if t.is_integral or t.is_fractional:
        return DOUBLE
    raise Unsupported(f"avg of {t}")


def wrap_long(total: str) -> str:
    """An exact integer sum (SQL of an integer type) as the ``bigint`` Java's wrapping
    addition gives: the value modulo 2^64, in [-2^63, 2^63)."""
    return f"CAST((({total} % {_TWO_64}) + {_TWO_64 + _TWO_63}) % {_TWO_64} - {_TWO_63} AS BIGINT)"


def fit_decimal(total: str, t: SparkType) -> str:
    """A decimal sum (SQL of DuckDB's ``decimal(38, s)``) as the decimal ``t``, null if
    it has more integer digits than ``t`` holds.  Below 38 digits the narrowing cast
    checks.  At 38 DuckDB casts to its own type unchecked (its 128-bit integer may hold
    more than 38 digits), so the sum is compared with the largest value of 38 digits:
    exact, two 128-bit integers.  (The check this replaced, a cast to text and back,
    cost 12 us a value in DuckDB 1.5: half of a TPC-H Q15 scan stage's time, and a
    minute for a window sum over 3M rows.)"""
    if t.precision < 38:
        return f"TRY_CAST({total} AS {t.duck})"
    # ``total`` is written twice: DuckDB computes an aggregate or window repeated in one
    # query once (a window sum over 3M rows: 0.21 s, 0.17 s unchecked), where ``_exact.let``
    # would build a list per row; the constant is folded once
    most = f"CAST('{_largest(t)}' AS {t.duck})"
    return f"(CASE WHEN {total} BETWEEN -{most} AND {most} THEN CAST({total} AS {t.duck}) END)"


def _largest(t: SparkType) -> str:
    """The largest value of the decimal ``t``, as text: its every digit a nine."""
    whole = "9" * (t.precision - t.scale)
    return f"{whole}.{'9' * t.scale}" if t.scale else whole


def sum_of(x: str, t: SparkType, distinct: str = "", over: str = "") -> str:
    """Spark's ``sum`` of the values ``x`` of type ``t`` (``distinct``: ``"DISTINCT "``;
    ``over``: a window's ``OVER (..)``), as SQL of ``sum_type(t)``."""
    out = sum_type(t)
    if out.is_decimal:
        # DuckDB sums any decimal(p, s) into a 128-bit decimal(38, s) itself, the same
        # exact sum at the scale ``sum_type`` keeps: a cast of every value to
        # decimal(38, s) first costs it 10x below 19 digits, and a third of a TPC-H scan
        # stage's time above (Q15's revenue)
        return fit_decimal(f"sum({distinct}{x}){over}", out)
    if out.is_integral:
        return wrap_long(f"sum({distinct}CAST({x} AS BIGINT)){over}")
    return f"CAST(sum({distinct}CAST({x} AS DOUBLE)){over} AS DOUBLE)"
