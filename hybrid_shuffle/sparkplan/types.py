"""Spark SQL types as the plan's JSON writes them, and their DuckDB and Arrow twins.

Spark has already resolved every type in the plan (Comet's rule: take what
Spark decided, never re-derive it), so this module only names types: the JSON
name (``long``, ``decimal(38,4)``), Spark's ``simpleString`` (``bigint``), the
DuckDB type a translated query casts to, and the Arrow type of a result column.
A type outside this table (arrays, maps, structs, intervals, and Spark 4's
strings under a collation other than the default ``UTF8_BINARY``, named ``string
collate UTF8_LCASE``) is ``UnsupportedType`` in an expression, which makes its
operator fall back to Spark.  A *column* of such a type (``column_type``) is opaque:
the engine carries it through (it arrives from Spark as Arrow), but no expression
may read it, since its comparisons and functions are Spark's (a collation compares
``'A'`` and ``'a'`` equal).  Arrays and structs of readable types are opaque the same
way, but have a DuckDB twin (``LIST``, ``STRUCT``): the collection and struct
functions read them (``expressions.collections``), and a projection carries them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from hybrid_shuffle.operators.duck.lowering import quote

__all__ = [
    "SparkType",
    "UnsupportedType",
    "array_of",
    "column_type",
    "spark_type",
    "struct_of",
]

_DECIMAL = re.compile(r"decimal\((\d+),\s*(-?\d+)\)")

#: JSON name -> (simpleString, DuckDB type, Arrow type)
_SIMPLE: dict[str, tuple[str, str, pa.DataType]] = {
    "boolean": ("boolean", "BOOLEAN", pa.bool_()),
    "byte": ("tinyint", "TINYINT", pa.int8()),
    "short": ("smallint", "SMALLINT", pa.int16()),
    "integer": ("int", "INTEGER", pa.int32()),
    "long": ("bigint", "BIGINT", pa.int64()),
    "float": ("float", "FLOAT", pa.float32()),
    "double": ("double", "DOUBLE", pa.float64()),
    "string": ("string", "VARCHAR", pa.string()),
    "binary": ("binary", "BLOB", pa.binary()),
    "date": ("date", "DATE", pa.date32()),
    "timestamp": ("timestamp", "TIMESTAMPTZ", pa.timestamp("us", tz="UTC")),
    "timestamp_ntz": ("timestamp_ntz", "TIMESTAMP", pa.timestamp("us")),
    # void (``SELECT NULL``; Spark 3.5 writes it "void"): a typed null in DuckDB, and
    # Arrow's null type when the result leaves (``spark.bridge.spark_typed``)
    "null": ("void", "INTEGER", pa.null()),
    "void": ("void", "INTEGER", pa.null()),
}


class UnsupportedType(Exception):
    """A Spark type the engine does not translate (the operator falls back)."""


@dataclass(frozen=True)
class SparkType:
    """One resolved Spark type."""

    name: str  # the JSON name: ``long``, ``decimal(38,4)``
    precision: int = 0
    scale: int = 0
    #: a column's type the engine has no twin of (``column_type``): carried, never read
    opaque: bool = False
    #: an array column's element type: still opaque (no comparison, sort or group reads
    #: it), but ``sparkplan.expressions.collections`` reads its elements (a DuckDB LIST)
    element: SparkType | None = None
    #: a struct column's fields, by Spark's names (``struct_of``): opaque as an array is
    #: (Spark orders and compares structs its own way), read by ``GetStructField``
    fields: tuple[tuple[str, SparkType], ...] | None = None

    @property
    def is_decimal(self) -> bool:
        return self.name.startswith("decimal")

    @property
    def is_integral(self) -> bool:
        return self.name in ("byte", "short", "integer", "long")

    @property
    def is_fractional(self) -> bool:
        return self.name in ("float", "double")

    @property
    def is_numeric(self) -> bool:
        return self.is_integral or self.is_fractional or self.is_decimal

    @property
    def readable(self) -> bool:
        """Whether some translation reads a value of this type: any but an opaque type
        with no DuckDB twin (a map, an interval, a collated string)."""
        return not self.opaque or self.element is not None or self.fields is not None

    @property
    def simple(self) -> str:
        """Spark's ``simpleString``: what ``df.schema.simpleString()`` prints."""
        if self.opaque:
            return self.name
        if self.is_decimal:
            return f"decimal({self.precision},{self.scale})"
        return _SIMPLE[self.name][0]

    @property
    def duck(self) -> str:
        self._check()
        if self.is_decimal:
            return f"DECIMAL({self.precision},{self.scale})"
        if self.element is not None:
            return f"{self.element.duck}[]"
        if self.fields is not None:
            return f"STRUCT({', '.join(f'{quote(n)} {t.duck}' for n, t in self.fields)})"
        return _SIMPLE[self.name][1]

    @property
    def arrow(self) -> pa.DataType:
        self._check()
        if self.is_decimal:
            return pa.decimal128(self.precision, self.scale)
        if self.element is not None:
            return pa.list_(self.element.arrow)
        if self.fields is not None:
            return pa.struct([pa.field(n, t.arrow) for n, t in self.fields])
        return _SIMPLE[self.name][2]

    def _check(self) -> None:
        if not self.readable:
            raise UnsupportedType(f"the type {self.name}")

    def __str__(self) -> str:
        return self.simple


def decimal(precision: int, scale: int) -> SparkType:
    return SparkType(f"decimal({precision},{scale})", precision, scale)


def spark_type(raw: Any) -> SparkType:
    """The type of a JSON ``dataType`` value; ``UnsupportedType`` for any other."""
    if isinstance(raw, str):
        match = _DECIMAL.fullmatch(raw)
        if match:
            return decimal(int(match.group(1)), int(match.group(2)))
        if raw in _SIMPLE:
            return SparkType(raw)
    kind = raw.get("type", raw) if isinstance(raw, dict) else raw
    raise UnsupportedType(f"the type {kind}")


def column_type(raw: Any) -> SparkType:
    """The type of a column an operator outputs: ``spark_type``, or an opaque type (named
    as Spark names it) the engine carries but no expression reads."""
    try:
        return spark_type(raw)
    except UnsupportedType:
        kind = raw.get("type", raw) if isinstance(raw, dict) else raw
        if isinstance(raw, dict) and kind == "array":
            element = column_type(raw.get("elementType"))
            if not element.opaque:
                return array_of(element)
        if isinstance(raw, dict) and kind == "struct":
            fields = [(str(f.get("name")), column_type(f.get("type"))) for f in raw["fields"]]
            if fields and all(t.readable for _, t in fields):
                try:
                    return struct_of(fields)
                except UnsupportedType:
                    pass
        return SparkType(str(kind), opaque=True)


def array_of(element: SparkType) -> SparkType:
    """The (opaque) array type of ``element``s, as ``column_type`` gives it."""
    return SparkType("array", opaque=True, element=element)


def struct_of(fields: list[tuple[str, SparkType]]) -> SparkType:
    """The (opaque) struct type of ``fields`` (Spark's names, in order), as ``column_type``
    gives it.  ``UnsupportedType`` for two names equal but for case: a DuckDB ``STRUCT``
    cannot hold them (Spark's can), so such a struct stays Spark's."""
    seen: set[str] = set()
    for name, _ in fields:
        if name.lower() in seen:
            raise UnsupportedType(f"a struct with two fields named {name!r}")
        seen.add(name.lower())
    return SparkType("struct", opaque=True, fields=tuple(fields))


BOOLEAN = SparkType("boolean")
INT = SparkType("integer")
LONG = SparkType("long")
DOUBLE = SparkType("double")
STRING = SparkType("string")
DATE = SparkType("date")
