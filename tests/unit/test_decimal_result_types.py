"""Spark's decimal result types (``resultDecimalType`` of ``+ - * / %``) under both
``spark.sql.decimalOperations.allowPrecisionLoss`` settings; the values were read from
Spark 3.5's ``df.schema`` (``tests/spark/test_sql_decimal_arithmetic.py`` checks them
against Spark itself)."""

from __future__ import annotations

import pytest

from hybrid_shuffle.sparkplan.expressions.arithmetic import decimal_result, precision_loss
from hybrid_shuffle.sparkplan.types import decimal

CASES = [
    # op, left, right, allowPrecisionLoss=true, allowPrecisionLoss=false
    ("/", (38, 18), (2, 0), (38, 18), (38, 19)),  # issue 33's b / 10
    ("/", (38, 18), (38, 18), (38, 6), (38, 18)),
    ("/", (10, 2), (5, 1), (17, 8), (17, 8)),
    ("*", (38, 18), (38, 18), (38, 6), (38, 36)),
    ("*", (38, 17), (38, 17), (38, 6), (38, 34)),
    ("*", (10, 2), (12, 3), (23, 5), (23, 5)),
    ("+", (38, 18), (38, 2), (38, 6), (38, 18)),
    ("-", (7, 3), (38, 2), (38, 3), (38, 3)),
    ("%", (38, 18), (38, 0), (38, 18), (38, 18)),
    ("%", (19, 18), (3, 0), (19, 18), (19, 18)),
]


@pytest.mark.parametrize(("op", "a", "b", "lossy", "exact"), CASES)
def test_result_type(
    op: str,
    a: tuple[int, int],
    b: tuple[int, int],
    lossy: tuple[int, int],
    exact: tuple[int, int],
) -> None:
    left, right = decimal(*a), decimal(*b)
    assert decimal_result(op, left, right) == decimal(*lossy)  # Spark's default
    with precision_loss(False):
        assert decimal_result(op, left, right) == decimal(*exact)
    with precision_loss(True):
        assert decimal_result(op, left, right) == decimal(*lossy)
