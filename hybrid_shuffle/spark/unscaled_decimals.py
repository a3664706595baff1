"""Decimals of up to 18 digits cross from Spark to the engine as their unscaled 64-bit integers.

Spark's Arrow writer turns every decimal value into a Java ``BigDecimal`` and then
into the bytes of a 128-bit integer, one value at a time: exporting a
``decimal(12,2)`` column cost about twice as much as a ``bigint`` column of the
same rows (7.5M rows: 1.77 s against 0.88 s; the main job's three columns through
the driver 1.64 s against 1.23 s with both JIT compilers, BENCHMARKS.md, issue 34).  A decimal
of up to 18 digits is already a ``long`` inside Spark (its unscaled value), so the
export asks Spark for that ``long`` (Catalyst's ``UnscaledValue``, which the
optimizer itself uses for such sums) and the receiving side rebuilds the
``decimal128(p, s)`` column from it with NumPy, without touching a value twice.

``unscaled(df)`` is what Spark exports; ``rescaled(table, schema)`` turns a table of
that export back into the DataFrame's own Arrow types.  The value crosses exactly:
Spark's ``CheckOverflow`` first brings it to the column's precision and scale, and
yields null where it cannot, which is what the Arrow writer does itself.  Only
top-level columns are changed (a decimal inside a struct, list or map still goes
through the Arrow writer).  When the JVM cannot build the projection (a Spark whose
classes differ), the DataFrame is exported as it is: slower, never different.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["MAX_LONG_DIGITS", "UNSCALED_FROM_BYTES", "rescaled", "unscaled"]

log = logging.getLogger(__name__)

#: the most digits Spark keeps in a ``long`` (``Decimal.MAX_LONG_DIGITS``)
MAX_LONG_DIGITS = 18
#: Spark's size estimate from which the projection pays: building it is a few py4j
#: calls a column and a new Dataset (30-70 ms here); at 4 MiB of rows (about 250k
#: values of a decimal column) the Arrow writer's ``BigDecimal`` costs about as much
UNSCALED_FROM_BYTES = 4 << 20


def unscaled(df: Any) -> Any:
    """``df`` with each top-level ``decimal(p, s)`` column of ``p <= 18`` as its unscaled
    ``bigint`` (same name, same position); ``df`` itself when it has none, or when the
    JVM cannot build the projection, or two of its columns have one name."""
    fields = df.schema.fields
    short = [(i, f) for i, f in enumerate(fields) if _compact(f.dataType)]
    if not short or len({f.name.lower() for f in fields}) < len(fields):
        # ``withColumns`` replaces every column its name resolves to, and Spark's names
        # resolve without regard to case: two such columns would both get one's values
        return df
    try:
        spark = df.sparkSession
        jvm = spark._jvm
        # each JVM name looked up once: a py4j round trip is about a millisecond
        expressions = jvm.org.apache.spark.sql.catalyst.expressions
        decimal, check, unscaled_value = (
            jvm.org.apache.spark.sql.types.DecimalType,
            expressions.CheckOverflow,
            expressions.UnscaledValue,
        )
        output = df._jdf.queryExecution().analyzed().output()
        columns = {}
        for i, field in short:
            kind = decimal(field.dataType.precision, field.dataType.scale)
            # brought to the type's scale first: the value crosses as its digits
            checked = check(output.apply(i), kind, True)
            columns[field.name] = _column(spark, unscaled_value(checked))
        return df.withColumns(columns)  # in place, by name: the other columns untouched
    except Exception as e:  # a Spark whose classes differ: the plain export is right
        log.debug("decimals exported through Spark's Arrow writer: %s", e)
        return df


def rescaled(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` (an export of ``unscaled(df)``) with each ``int64`` column that
    ``schema`` (the DataFrame's Arrow schema) has as a ``decimal128`` turned back into
    that decimal; other columns untouched."""
    if table.num_columns != len(schema):
        return table
    for i, field in enumerate(schema):
        column = table.column(i)
        if pa.types.is_decimal128(field.type) and pa.types.is_int64(column.type):
            chunks = [_decimal_of(chunk, field.type) for chunk in column.chunks]
            table = table.set_column(
                i,
                table.schema.field(i).with_type(field.type),
                pa.chunked_array(chunks, field.type),
            )
    return table


def _compact(kind: Any) -> bool:
    """Whether ``kind`` (a Spark type) is a decimal Spark keeps in a ``long``."""
    from pyspark.sql.types import DecimalType

    return isinstance(kind, DecimalType) and kind.precision <= MAX_LONG_DIGITS


def _column(spark: Any, expression: Any) -> Any:
    """A PySpark ``Column`` of the Catalyst ``expression`` (Spark 4 wraps an expression
    in a column node first)."""
    jvm = spark._jvm
    if int(str(spark.version).split(".")[0]) >= 4:
        node = jvm.org.apache.spark.sql.classic.ExpressionColumnNode.apply(expression)
        from pyspark.sql.classic.column import Column  # type: ignore[import-not-found,unused-ignore]

        return Column(jvm.org.apache.spark.sql.Column(node))
    from pyspark.sql.column import Column

    return Column(jvm.org.apache.spark.sql.Column(expression))


def _decimal_of(array: pa.Array, kind: pa.Decimal128Type) -> pa.Array:
    """The ``decimal128`` array whose unscaled values are ``array``'s integers: each
    value sign-extended to 128 bits (little-endian: the low word first)."""
    data = array.buffers()[1]
    if data is None or len(array) == array.null_count:  # no values to read
        return pa.nulls(len(array), kind)
    low = np.frombuffer(data, np.int64, len(array), array.offset * 8)
    words = np.empty((len(array), 2), np.int64)
    words[:, 0] = low
    words[:, 1] = low >> 63
    validity = pc.is_valid(array).buffers()[1] if array.null_count else None
    return pa.Array.from_buffers(
        kind, len(array), [validity, pa.py_buffer(words)], array.null_count
    )
