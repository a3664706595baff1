"""Decimal ``+ - * / % div pmod`` in the engine against Spark, row for row, under both
``spark.sql.decimalOperations.allowPrecisionLoss`` settings.

A seeded generator gives 26 decimal columns of assorted precisions and scales (38
digits among them) and 16 rows: the largest and smallest values of each type, zeros
(zero divisors), ±1 ulp, HALF_UP ties (``...5``) and random digits.  Some 230 operator
and column pairs are projected in ONE query per setting, which runs fully in the
engine (no fallback) and must give Spark's rows and Spark's result types.  Pairs
whose ``div``/``%`` Spark itself cannot compute (an integral quotient of more than 38
digits: ``Division impossible``) are left out, as are the ``%``/``pmod`` pairs the
translation declines (an operand of more than 38 digits at the common scale).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from decimal import Context, Decimal
from typing import Any

import pyarrow as pa
import pytest

import hybrid_shuffle as hs

from .oracle import parquet_views, same_schema

pytestmark = pytest.mark.spark

SEED = 20261127
ROWS = 16
PAIRS = 230
_CONF = "spark.sql.decimalOperations.allowPrecisionLoss"
#: fixed types first (the corners), then random ones
_TYPES = [
    (38, 18), (38, 0), (38, 37), (38, 10), (38, 2), (38, 36), (10, 2), (20, 10),
    (28, 6), (19, 0), (5, 5), (7, 3), (15, 2), (30, 15), (36, 4), (12, 12),
    (2, 0), (1, 0), (25, 20), (33, 3),
]  # fmt: skip
_OPS = ["+", "-", "*", "/", "%", "div", "pmod"]


def _types(rng: random.Random) -> list[tuple[int, int]]:
    types = list(_TYPES)
    while len(types) < 26:
        p = rng.randint(1, 38)
        types.append((p, rng.randint(0, p)))
    return types


def _values(rng: random.Random, p: int, s: int) -> list[Decimal | None]:
    top = 10**p - 1
    corners: list[int | None] = [top, -top, 0, 1, -1, 10 ** (p - 1), -(5 * 10 ** (p - 1)), None]
    out: list[Decimal | None] = []
    for i in range(ROWS):
        u: int | None
        if i < len(corners) and rng.random() < 0.6:
            u = corners[i]
        elif rng.random() < 0.6:
            digits = rng.randint(1, p)
            u = rng.randint(-(10**digits - 1), 10**digits - 1)
        else:  # a HALF_UP tie: 1...15 of some length
            digits = rng.randint(1, p)
            u = min(top, int("1" * (digits - 1) + "5")) * rng.choice([1, -1])
        out.append(None if u is None else Decimal(u).scaleb(-s, Context(prec=100)))
    return out


def _translated(op: str, a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether Spark answers ``a op b`` for every value and the engine translates it."""
    (p1, s1), (_p2, s2) = a, b
    if op not in ("%", "div", "pmod"):
        return True
    if p1 - s1 + s2 > 38:  # Spark: "Division impossible" for some values
        return False
    scale = max(s1, s2)
    if op == "pmod":
        return all(p + scale - s <= 38 for p, s in (a, b))
    return True


def _expressions(types: list[tuple[int, int]], rng: random.Random) -> list[str]:
    found: list[str] = []
    while len(found) < PAIRS:
        op = _OPS[len(found) % len(_OPS)]
        i, j = rng.randrange(len(types)), rng.randrange(len(types))
        if _translated(op, types[i], types[j]):
            found.append(f"pmod(c{i}, c{j})" if op == "pmod" else f"c{i} {op} c{j}")
    return found


@pytest.fixture(scope="module")
def generated(
    session: hs.Session, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Any, list[str]]]:
    """The view ``dec`` (26 decimal columns and ``rid``) and the expressions over it."""
    rng = random.Random(SEED)
    types = _types(rng)
    fields = [pa.field(f"c{n}", pa.decimal128(p, s)) for n, (p, s) in enumerate(types)]
    arrays = [pa.array(_values(rng, p, s), f.type) for (p, s), f in zip(types, fields, strict=True)]
    table = pa.Table.from_arrays(
        [*arrays, pa.array(range(ROWS), pa.int32())],
        schema=pa.schema([*fields, ("rid", pa.int32())]),
    )
    spark = parquet_views(session.spark, tmp_path_factory.mktemp("decimals"), {"dec": table})
    yield spark, _expressions(types, rng)
    spark.conf.unset(_CONF)


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return [tuple(r.values()) for r in table.to_pylist()]


def _check(session: hs.Session, spark: Any, query: str, rows: int = ROWS) -> None:
    """The engine runs ``query`` with no fallback and gives Spark's ``rows`` rows and
    types (keyed by the first column)."""
    stream = session.sql(query)
    assert stream.explain_data()["spark_subtrees"] == []
    got = stream.to_arrow()
    df = spark.sql(query)
    want = pa.Table.from_batches(df._collect_as_arrow())
    assert got.column_names == df.columns
    same_schema(session, got, df)
    expected = {row[0]: row for row in _rows(want)}
    for row in _rows(got):
        spark_row = expected[row[0]]
        wrong = [
            (name, g, s) for name, g, s in zip(df.columns, row, spark_row, strict=True) if g != s
        ]
        assert not wrong, f"rid {row[0]}: (column, engine, spark) {wrong[:5]}"
    assert len(got) == len(want) == rows


@pytest.mark.parametrize("allow", ["true", "false"])
def test_generated_pairs_match_spark(
    session: hs.Session, generated: tuple[Any, list[str]], allow: str
) -> None:
    spark, expressions = generated
    spark.conf.set(_CONF, allow)
    try:
        columns = ", ".join(f"{e} AS r{n}" for n, e in enumerate(expressions))
        _check(session, spark, f"SELECT rid, {columns} FROM dec")
    finally:
        spark.conf.unset(_CONF)


@pytest.mark.parametrize("allow", ["true", "false"])
def test_literal_divisor_keeps_spark_scale(
    session: hs.Session, generated: tuple[Any, list[str]], allow: str
) -> None:
    """The issue's wrong result: ``decimal(38, 18) / 10`` is ``decimal(38, 19)`` without
    precision loss (0.1123456789123456789), ``decimal(38, 18)`` with it."""
    spark, _ = generated
    spark.conf.set(_CONF, allow)
    try:
        _check(
            session,
            spark,
            "SELECT rid, c0 / 10 AS q, c0 * 10 AS m, c0 / 3 AS third, c0 * c0 AS sq, "
            "-c0 AS neg, abs(c0) AS a, c3 + 1.123456789123456789 AS s FROM dec",
        )
    finally:
        spark.conf.unset(_CONF)


@pytest.mark.parametrize("allow", ["true", "false"])
def test_chained_arithmetic_and_sums(
    session: hs.Session, generated: tuple[Any, list[str]], allow: str
) -> None:
    """Arithmetic over arithmetic and sums of it, as TPC-H's Q1 computes them
    (``price * (1 - discount) * (1 + tax)``): the 64-bit form of each step, used where
    the value fits 18 digits, and the 128-bit one where it does not (the types' largest
    values overflow 64 bits), give Spark's values either way."""
    spark, _ = generated
    spark.conf.set(_CONF, allow)
    try:
        # c12 decimal(15,2), c6 (10,2), c11 (7,3), c10 (5,5), c17 (1,0)
        _check(
            session,
            spark,
            "SELECT rid, c12 * (1 - c6) * (1 + c12) AS q1, (c12 * c6) * c11 AS three, "
            "c6 * c6 * c6 * c6 AS four, (c12 + c6) * c12 - c11 AS mixed, "
            "c10 * c17 * c11 AS small, c12 * c12 + c6 AS sum_of_product FROM dec",
        )
        _check(
            session,
            spark,
            "SELECT rid % 3 AS g, sum(c12 * (1 - c6) * (1 + c11)) AS charge, "
            "sum(c12) AS total, avg(c6) AS mean, sum(c6 * c11) AS narrow, "
            "count(c12 * c6) AS n FROM dec GROUP BY rid % 3",
            rows=3,
        )
    finally:
        spark.conf.unset(_CONF)


def test_a_sum_of_products_split_at_64_bits_gives_sparks_sums(
    session: hs.Session, tmp_path: Any
) -> None:
    """A partial ``sum`` of a product of two decimals of at most 18 digits adds the
    products that fit 64 bits and the others apart, then their totals: groups whose
    products all fit, none fit, some fit, only nulls, and totals just under and just
    past 38 digits (Spark's null), of the wide part alone and of both, give Spark's
    sums, and an all-null group's sum is null, not 0."""
    giga, near, top = Decimal(10**9), Decimal(9 * 10**15), Decimal(10**16 - 1)
    rows = [
        (0, Decimal("1.50"), Decimal("2.25")),  # every product fits 64 bits
        (0, Decimal("-3.10"), Decimal("7.00")),
        (1, giga, giga),  # no product does (22 digits at the product's scale, 4)
        (1, -giga, giga - 7),
        (2, giga, giga),  # some do, one does not, and a null
        (2, Decimal("12.34"), Decimal("-5.00")),
        (2, None, Decimal("1.00")),
        (3, None, None),  # only nulls
        *[(4, near, top)] * 100,  # 9.0e33 in all: 38 digits at scale 4
        *[(5, near, top)] * 120,  # 1.08e34: one digit too many, null
        *[(6, near, top)] * 120,  # the same with a product that fits 64 bits
        (6, Decimal("1.00"), Decimal("1.00")),
    ]
    schema = pa.schema(
        [("g", pa.int32()), ("x", pa.decimal128(18, 2)), ("y", pa.decimal128(18, 2))]
    )
    table = pa.Table.from_pylist([{"g": g, "x": x, "y": y} for g, x, y in rows], schema=schema)
    spark = parquet_views(session.spark, tmp_path, {"parts": table})
    _check(
        session,
        spark,
        "SELECT g, sum(x * y) AS products, sum(x + y) AS sums, count(x * y) AS n "
        "FROM parts GROUP BY g",
        rows=7,
    )
