"""A short decimal that left Spark as its unscaled long arrives as the same decimal."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa

from hybrid_shuffle.spark.unscaled_decimals import rescaled

UNSCALED = [0, 1, -1, None, 999_999_999_999_999_999, -999_999_999_999_999_999, 12345, None]


def decimals(unscaled: list[int | None], scale: int) -> list[Decimal | None]:
    return [None if u is None else Decimal(u).scaleb(-scale) for u in unscaled]


def test_each_long_becomes_the_decimal_of_its_digits_nulls_kept() -> None:
    kind = pa.decimal128(18, 4)
    table = pa.table({"d": pa.array(UNSCALED, pa.int64())})
    got = rescaled(table, pa.schema([("d", kind)]))
    assert got.schema.field("d").type == kind
    assert got.column("d").to_pylist() == decimals(UNSCALED, 4)


def test_a_sliced_and_chunked_column_keeps_each_chunk_s_rows() -> None:
    """Arrow slices share their parent's buffers at an offset: each chunk is read from
    its own offset, its validity too."""
    kind = pa.decimal128(12, 2)
    whole = pa.array(UNSCALED * 3, pa.int64())
    column = pa.chunked_array([whole.slice(3, 7), whole.slice(11, 9), whole.slice(0, 0)])
    got = rescaled(pa.table({"x": column}), pa.schema([("x", kind)]))
    assert got.column("x").num_chunks == 3
    assert got.column("x").to_pylist() == decimals(column.to_pylist(), 2)


def test_only_int64_columns_the_schema_wants_as_decimals_change() -> None:
    """A real long, a long decimal (Spark exports it as a decimal) and a short one that
    is already a decimal are left as they are."""
    table = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "long_dec": pa.array([Decimal("1.5"), None], pa.decimal128(38, 1)),
            "short_dec": pa.array([Decimal("2.25"), None], pa.decimal128(5, 2)),
            "unscaled": pa.array([-5, 7], pa.int64()),
        }
    )
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("long_dec", pa.decimal128(38, 1)),
            ("short_dec", pa.decimal128(5, 2)),
            ("unscaled", pa.decimal128(3, 1)),
        ]
    )
    got = rescaled(table, schema)
    assert got.schema == schema
    assert got.column("id").to_pylist() == [1, 2]
    assert got.column("long_dec").equals(table.column("long_dec"))
    assert got.column("short_dec").equals(table.column("short_dec"))
    assert got.column("unscaled").to_pylist() == [Decimal("-0.5"), Decimal("0.7")]


def test_an_all_null_or_empty_chunk_stays_all_null_or_empty() -> None:
    kind = pa.decimal128(10, 3)
    column = pa.chunked_array([pa.nulls(3, pa.int64()), pa.array([], pa.int64())])
    got = rescaled(pa.table({"x": column}), pa.schema([("x", kind)]))
    assert got.column("x").type == kind
    assert got.column("x").to_pylist() == [None, None, None]
