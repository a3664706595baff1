"""The 64-bit fast paths of decimal division and ``avg`` equal Spark's exact answer, and
a decimal sum past 38 digits is null, as in Spark.

``_exact.divide`` and ``_exact.average`` compute small operands in 64-bit integers and
the rest in the exact 128-bit kernel; both are DuckDB SQL.  Here each runs in DuckDB
over random and boundary operands (ties at every scale, signs, zero, values just
inside and outside the fast path's bounds), against Python's ``Decimal`` with Spark's
rounding: HALF_UP at the division's scale, then (``avg``) HALF_UP at the result's.
"""

from __future__ import annotations

import random
from decimal import ROUND_HALF_UP, Decimal, localcontext

import duckdb
import pytest

from hybrid_shuffle.sparkplan.expressions import Sql
from hybrid_shuffle.sparkplan.expressions._exact import divide
from hybrid_shuffle.sparkplan.expressions.arithmetic import _result
from hybrid_shuffle.sparkplan.operators.aggregate import decimal_average
from hybrid_shuffle.sparkplan.operators.sums import fit_decimal, sum_type
from hybrid_shuffle.sparkplan.types import LONG, SparkType, decimal


def _half_up(x: Decimal, scale: int) -> Decimal:
    with localcontext() as ctx:
        ctx.prec = 120
        return x.quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP)


def _fits(x: Decimal, t: SparkType) -> Decimal | None:
    return x if abs(x) < Decimal(10) ** (t.precision - t.scale) else None


def _scaled(unscaled: int, scale: int) -> Decimal:
    """The decimal ``unscaled * 10^-scale``, exactly (arithmetic would round to the
    context's 28 digits)."""
    return Decimal(f"{unscaled}E-{scale}")


def _values(t: SparkType, rng: random.Random, count: int) -> list[Decimal]:
    unit = Decimal(1).scaleb(-t.scale)
    top = 10 ** min(t.precision, 30) - 1
    out = [
        Decimal(0),
        unit,
        -unit,
        _scaled(top, t.scale),
        _scaled(-top, t.scale),
    ]
    for digits in range(1, min(t.precision, 30) + 1):
        out.append(_scaled(rng.randrange(10 ** (digits - 1), 10**digits), t.scale))
    while len(out) < count:
        digits = rng.randint(1, min(t.precision, 30))
        v = rng.randrange(10**digits)
        out.append(_scaled(-v if rng.random() < 0.5 else v, t.scale))
    return out


def _run(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    rows: list[tuple[Decimal, ...]],
    types: list[SparkType],
) -> list[Decimal | None]:
    columns = ", ".join(f"c{i} {t.duck}" for i, t in enumerate(types))
    con.execute(f"CREATE OR REPLACE TABLE t (i BIGINT, {columns})")
    con.executemany(
        f"INSERT INTO t VALUES (?, {', '.join('?' for _ in types)})",
        [
            (i, *(str(v) if isinstance(v, Decimal) else v for v in row))
            for i, row in enumerate(rows)
        ],
    )
    return [r[0] for r in con.execute(f"SELECT {sql} FROM t ORDER BY i").fetchall()]


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (decimal(25, 2), decimal(20, 0)),
        (decimal(15, 2), decimal(15, 2)),
        (decimal(12, 4), decimal(7, 3)),
        (decimal(10, 0), decimal(3, 1)),
        (decimal(38, 10), decimal(18, 6)),
        (decimal(38, 20), decimal(38, 19)),
        (decimal(30, 12), decimal(5, 2)),
    ],
)
def test_division_equals_the_exact_half_up_quotient(a: SparkType, b: SparkType) -> None:
    rng = random.Random(f"{a}/{b}")
    result = _result("/", a, b)
    nums, dens = _values(a, rng, 120), _values(b, rng, 120)
    rows = [(n, d) for n, d in zip(nums, dens, strict=False)] + [
        (n, d) for n in nums[:12] for d in dens[:12]
    ]
    sql = divide(Sql("c0", a), Sql("c1", b), result)
    got = _run(duckdb.connect(config={"threads": 1}), sql, rows, [a, b])
    for (n, d), value in zip(rows, got, strict=True):
        want = None
        if d != 0:  # Spark's division by zero is null
            with localcontext() as ctx:
                ctx.prec = 120
                want = _fits(_half_up(n / d, result.scale), result)
        assert value == want, f"{n} / {d}"


@pytest.mark.parametrize(
    "kind", [decimal(15, 2), decimal(10, 0), decimal(12, 4), decimal(7, 3), decimal(30, 20)]
)
def test_average_equals_spark_s_two_roundings(kind: SparkType) -> None:
    rng = random.Random(str(kind))
    total_type = sum_type(kind)
    totals = _values(total_type, rng, 200)
    counts = [1, 2, 3, 6, 7, 9, 11, 3 * 10**8, 10**9 - 1, 10**9, 10**12 + 7]
    rows = [(t, rng.choice(counts) if i % 3 else rng.randint(1, 70)) for i, t in enumerate(totals)]
    # ties: totals that are exactly k.5 units of the result's scale apart over the count
    unit = Decimal(1).scaleb(-total_type.scale)
    rows += [(Decimal(2 * k + 1) * unit, 2) for k in range(40)]
    rows += [(-Decimal(2 * k + 1) * unit, 2) for k in range(40)]
    sql, out = decimal_average("c0", "c1", kind)
    got = _run(duckdb.connect(config={"threads": 1}), sql, rows, [total_type, LONG])
    division = _result("/", total_type, decimal(20, 0))
    for (total, count), value in zip(rows, got, strict=True):
        with localcontext() as ctx:
            ctx.prec = 120
            first = _fits(_half_up(total / count, division.scale), division)
        want = None if first is None else _fits(_half_up(first, out.scale), out)
        assert value == want, f"avg of {total} over {count}"


@pytest.mark.parametrize("scale", [0, 4, 18, 38])
def test_a_38_digit_sum_is_kept_to_its_last_digit_and_null_one_unit_past(scale: int) -> None:
    """DuckDB sums ``decimal(p, s)`` into a 128-bit ``decimal(38, s)`` that may hold more
    than 38 digits; ``fit_decimal`` keeps what Spark's ``decimal(38, s)`` holds and
    nulls the rest, at the boundary, for both signs, in a sum and a window sum."""
    t = decimal(38, scale)
    largest, one = _scaled(10**38 - 1, scale), _scaled(1, scale)
    values = [largest, _scaled(1 - 10**38, scale), _scaled(10**38 - 2, scale), Decimal(0)]
    con = duckdb.connect()
    con.execute(f"CREATE TABLE v (g INTEGER, x {t.duck})")
    # group g sums to values[g]; group 10 + g to one unit past it (away from zero)
    rows = []
    for g, value in enumerate(values):
        rows.append((g, value))
        step = one if value >= 0 else -one
        rows += [(10 + g, value), (10 + g, step)] if value != 0 else [(10 + g, one)]
    con.executemany("INSERT INTO v VALUES (?, ?)", rows)
    got = dict(con.execute(f"SELECT g, {fit_decimal('sum(x)', t)} FROM v GROUP BY g").fetchall())
    with localcontext() as ctx:
        ctx.prec = 120  # the default context rounds to 28 digits
        for g, value in enumerate(values):
            assert got[g] == value
            past = value + (one if value >= 0 else -one) if value != 0 else one
            assert got[10 + g] == _fits(past, t)
    windowed = con.execute(
        f"SELECT g, {fit_decimal('sum(x) OVER (PARTITION BY g)', t)} FROM v ORDER BY g"
    ).fetchall()
    assert [s for g, s in windowed if g < 10] == values
    assert [s for g, s in windowed if g == 10] == [None, None]  # largest + one
