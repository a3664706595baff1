"""A row-at-a-time ``@udf``'s values: its arguments as Spark's worker receives them,
and its results as Spark keeps them.

Spark sends such a function pickled rows (``BatchEvalPythonExec``) and turns what
it returns into its declared type with ``EvaluatePython.makeFromJava``, which is
lenient in a way users meet: a value of another Python type than the declared one
becomes null (a ``float`` returned for a ``long``, an ``int`` for a ``double``), an
``int`` is narrowed with wrap-around for ``byte``/``short``/``int``, and anything
becomes its Java ``toString`` for a ``string``.  ``spark_array`` applies those rules,
``python_values`` the argument side (dates, timestamps as PySpark's ``fromInternal``
makes them, binary as ``bytearray``).  Per value by nature: the user's function is
called per row, and these run beside it.  Struct arguments and struct results are
not here: the translation leaves such a function to Spark.
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Callable
from typing import Any

import pyarrow as pa

__all__ = ["java_string", "python_values", "spark_array", "supported_type"]

_INT64 = (-(1 << 63), (1 << 63) - 1)


def supported_type(data_type: Any) -> bool:
    """Whether ``spark_array`` and ``python_values`` handle ``data_type`` (PySpark's)."""
    from pyspark.sql import types as t

    if isinstance(data_type, (t.ArrayType,)):
        return supported_type(data_type.elementType) and not _temporal(data_type.elementType)
    if isinstance(data_type, t.MapType):
        return all(
            supported_type(x) and not _temporal(x) for x in (data_type.keyType, data_type.valueType)
        )
    return isinstance(
        data_type,
        (
            t.BooleanType, t.ByteType, t.ShortType, t.IntegerType, t.LongType, t.FloatType,
            t.DoubleType, t.DecimalType, t.StringType, t.BinaryType, t.DateType,
            t.TimestampType, t.TimestampNTZType, t.NullType,
        ),
    )  # fmt: skip


def _temporal(data_type: Any) -> bool:
    from pyspark.sql import types as t

    return isinstance(data_type, (t.DateType, t.TimestampType, t.TimestampNTZType))


def python_values(column: pa.ChunkedArray | pa.Array, data_type: Any) -> list[Any]:
    """``column``'s values as a row-at-a-time function receives them from Spark."""
    from pyspark.sql import types as t

    if isinstance(data_type, (t.TimestampType, t.TimestampNTZType)):
        micros = column.cast(pa.int64()).to_pylist()
        return [None if v is None else data_type.fromInternal(v) for v in micros]
    values: list[Any] = column.to_pylist()
    if isinstance(data_type, t.BinaryType):
        return [None if v is None else bytearray(v) for v in values]
    return values


def spark_array(values: list[Any], data_type: Any) -> pa.Array:
    """The results of a row-at-a-time function (already ``toInternal``) as Spark keeps
    them in ``data_type``: ``EvaluatePython.makeFromJava``'s rules (module docstring)."""
    from pyspark.sql.pandas.types import to_arrow_type

    arrow = to_arrow_type(data_type)
    fast = _as_is(values, data_type, arrow)
    if fast is not None:
        return fast
    convert = _converter(data_type)
    return pa.array([None if v is None else convert(v) for v in values], arrow)


def _as_is(values: list[Any], data_type: Any, arrow: pa.DataType) -> pa.Array | None:
    """``values`` converted by Arrow at once where every one of them is of the Python
    type Spark keeps as it is for ``data_type`` (the common case: a ``float`` for a
    double), so the per-value rules change nothing; else None."""
    from pyspark.sql import types as t

    kinds = set(map(type, values))
    kinds.discard(type(None))
    exact = {
        t.DoubleType: float,
        t.FloatType: float,
        t.StringType: str,
        t.BooleanType: bool,
        t.LongType: int,
        t.IntegerType: int,
        t.ShortType: int,
        t.ByteType: int,
    }.get(type(data_type))
    if exact is None or not kinds <= {exact}:
        return None
    if exact is not int:
        return pa.array(values, arrow)
    try:
        wide = pa.array(values, pa.int64())
    except (OverflowError, pa.ArrowInvalid):  # beyond a long: the per-value rules
        return None
    if arrow == pa.int64():
        return wide
    try:
        return wide.cast(arrow)  # safe: fails where Java would wrap
    except pa.ArrowInvalid:
        return None


def _converter(data_type: Any) -> Callable[[Any], Any]:
    from pyspark.sql import types as t

    if isinstance(data_type, t.BooleanType):
        return lambda v: v if isinstance(v, bool) else None
    if isinstance(data_type, (t.ByteType, t.ShortType, t.IntegerType)):
        bits = {t.ByteType: 8, t.ShortType: 16, t.IntegerType: 32}[type(data_type)]
        return lambda v: _wrapped(v, bits) if _java_integral(v) else None
    if isinstance(data_type, t.LongType):
        return lambda v: v if _java_integral(v) else None
    if isinstance(data_type, (t.FloatType, t.DoubleType)):
        return lambda v: v if isinstance(v, float) else None
    if isinstance(data_type, t.DecimalType):
        return lambda v: _decimal(v, data_type) if isinstance(v, decimal.Decimal) else None
    if isinstance(data_type, t.StringType):
        return java_string
    if isinstance(data_type, t.BinaryType):
        return _binary
    if isinstance(data_type, t.DateType):
        return lambda v: v if _java_integral(v) and -(1 << 31) <= v < 1 << 31 else None
    if isinstance(data_type, (t.TimestampType, t.TimestampNTZType)):
        return lambda v: v if _java_integral(v) else None
    if isinstance(data_type, t.NullType):
        return lambda v: None
    if isinstance(data_type, t.ArrayType):
        element = _converter(data_type.elementType)
        return lambda v: (
            [None if x is None else element(x) for x in v] if isinstance(v, (list, tuple)) else None
        )
    if isinstance(data_type, t.MapType):
        key, value = _converter(data_type.keyType), _converter(data_type.valueType)
        return lambda v: (
            [(key(k), None if x is None else value(x)) for k, x in v.items()]
            if isinstance(v, dict)
            else None
        )
    raise TypeError(f"no conversion to Spark's {data_type.simpleString()}")


def _java_integral(value: Any) -> bool:
    """A Python int that reaches the JVM as an Integer or a Long (not a bool, not a
    BigInteger)."""
    return (
        isinstance(value, int) and not isinstance(value, bool) and _INT64[0] <= value <= _INT64[1]
    )


def _wrapped(value: int, bits: int) -> int:
    """Java's narrowing of a long to ``bits``: the low bits, two's complement."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def _decimal(value: decimal.Decimal, data_type: Any) -> decimal.Decimal | None:
    """Spark's ``Decimal(value, precision, scale)``: rounded half-up to the scale; a
    value then too wide for the precision is an error, as in Spark."""
    if not value.is_finite():
        return None
    quantum = decimal.Decimal(1).scaleb(-data_type.scale)
    with decimal.localcontext() as context:
        context.prec = 80
        rounded = value.quantize(quantum, rounding=decimal.ROUND_HALF_UP)
    digits = len(rounded.as_tuple().digits)
    if digits > data_type.precision and rounded != 0:
        raise ArithmeticError(
            f"the value {value} returned for {data_type.simpleString()} needs more than "
            f"{data_type.precision} digits"
        )
    return rounded


def _binary(value: Any) -> bytes | None:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    return None


def java_string(value: Any) -> str:
    """What Java's ``toString`` prints for the object Spark unpickles ``value`` as."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _java_double(value)
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join("null" if x is None else java_string(x) for x in value) + "]"
    if isinstance(value, dict):
        items = (
            f"{java_string(k)}={'null' if x is None else java_string(x)}" for k, x in value.items()
        )
        return "{" + ", ".join(items) + "}"
    return str(value)


def _java_double(value: float) -> str:
    """``Double.toString``: plain between 1e-3 and 1e7, else ``d.dddE±n``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    if 1e-3 <= abs(value) < 1e7:
        text = repr(value)
        return text if "e" not in text else format(value, "f")
    exact = decimal.Decimal(repr(value))  # the shortest digits that read back as it
    sign, digits, exponent = exact.as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    power = len(digits) - 1 + int(exponent)
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{power}"
