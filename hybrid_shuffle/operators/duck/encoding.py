"""How an input is handed to DuckDB so that its answer is pyarrow's, row for row.

DuckDB's semantics differ from pyarrow's on a few inputs; each batch is therefore
encoded before a query reads it (``Encoding.encode``: vectorized Arrow casts and
zero-copy views, one per column, no row loop), and every column of the query's
output is decoded on the way back (``decoded``, called by ``lowering.conform``,
which knows the planned type of each output column):

- **Float keys** (compared by equality: grouped, joined, a top-n's partitions).
  pyarrow groups and joins floats by their bits (``0.0`` apart from ``-0.0``,
  each NaN payload apart, a NaN matching the same NaN); DuckDB ties the zeros
  and every NaN.  Such a key is staged as its bit pattern, an integer of its
  width (``Array.view``), which DuckDB compares exactly as pyarrow does, and
  viewed back as the float.  A *sort* key stays a float: the order is the
  float's (``lowering.sort_key`` keeps NaN after every number in both
  directions, nulls last, as pyarrow does).
- **Types DuckDB does not give back as they came**: a duration and a timestamp
  with a time zone (DuckDB's keeps microseconds) are staged as their int64
  count, a ``month_day_nano`` interval as its 16 bytes, a half float as
  float32, a null-typed column as int8 nulls; each is cast or viewed back to its
  type.  The integers order and compare as the values do.  (Types DuckDB keeps
  up to a cast -- string and binary views, fixed-size binary, date64, times,
  lists, structs, dictionaries -- need nothing: ``conform`` casts them back.)
- **Names equal but for case**: DuckDB's identifiers ignore case, so such
  columns are staged under unique aliases (``__hs_<i>_<name>``); the query
  refers to every column by its staged name (``names``), and its output is
  renamed back by position (``conform``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["Encoding", "decoded"]

_INTERVAL_BYTES = pa.binary(16)


def _bits(t: pa.DataType) -> pa.DataType:
    """The integer type of float type ``t``'s width."""
    return {16: pa.int16(), 32: pa.int32(), 64: pa.int64()}[t.bit_width]


def _staged_type(t: pa.DataType, key: bool) -> pa.DataType:
    """The type a column of type ``t`` is staged as (``key``: compared by equality)."""
    if pa.types.is_floating(t):
        if key:
            return _bits(t)
        return pa.float32() if pa.types.is_float16(t) else t
    if pa.types.is_duration(t) or (pa.types.is_timestamp(t) and t.tz is not None):
        return pa.int64()
    if t == pa.month_day_nano_interval():
        return _INTERVAL_BYTES
    if pa.types.is_null(t):
        return pa.int8()
    return t


def _chunks(column: pa.ChunkedArray, t: pa.DataType) -> pa.ChunkedArray:
    """``column``'s buffers viewed as type ``t`` (same width, no copy)."""
    return pa.chunked_array([c.view(t) for c in column.chunks], t)


def _encode(column: pa.ChunkedArray, staged: pa.DataType) -> pa.ChunkedArray:
    t = column.type
    if staged == t:
        return column
    if pa.types.is_floating(t) and pa.types.is_integer(staged):
        return _chunks(column, staged)
    if t == pa.month_day_nano_interval():
        return _chunks(column, _INTERVAL_BYTES)
    if pa.types.is_null(t):
        return pa.chunked_array([pa.nulls(len(column), staged)], staged)
    return pc.cast(column, staged)


def decoded(column: pa.ChunkedArray | pa.Array, t: pa.DataType) -> pa.ChunkedArray | pa.Array:
    """``column`` (DuckDB's output) decoded to type ``t`` if it came back in the
    encoding of a ``t`` column (see the module docstring), else as it is."""
    c = column.type
    if c == t:
        return column
    if pa.types.is_null(t):
        return pa.nulls(len(column))
    if pa.types.is_floating(t) and pa.types.is_integer(c) and c.bit_width == t.bit_width:
        column = pc.cast(column, _bits(t))  # a bit pattern: the key, as it came
        if isinstance(column, pa.ChunkedArray):
            return _chunks(column, t)
        return column.view(t)
    if t == pa.month_day_nano_interval() and (pa.types.is_binary(c) or c == _INTERVAL_BYTES):
        fixed = pc.cast(column, _INTERVAL_BYTES)
        if isinstance(fixed, pa.ChunkedArray):
            return _chunks(fixed, t)
        return fixed.view(t)
    return column


class Encoding:
    """How the batches of an input of ``schema`` are staged, ``keys`` being the columns
    compared by equality (see the module docstring).  ``names`` maps every column to
    the name a query refers to it by; ``staged`` is the schema of an encoded batch."""

    def __init__(self, schema: pa.Schema, keys: Iterable[str] = ()) -> None:
        self.schema = schema
        keys = set(keys)
        lowered = Counter(n.lower() for n in schema.names)
        self.names = {
            n: n if lowered[n.lower()] == 1 else f"__hs_{i}_{n}" for i, n in enumerate(schema.names)
        }
        self.staged = pa.schema(
            [pa.field(self.names[f.name], _staged_type(f.type, f.name in keys)) for f in schema]
        )
        #: nothing to do: every batch is staged as it is
        self.identity = self.staged.equals(schema)

    def encode(self, table: pa.Table) -> pa.Table:
        """``table`` (of the input's schema) as DuckDB is to read it."""
        if self.identity:
            return table
        if not table.schema.equals(self.schema):
            table = pa.Table.from_arrays(table.columns, schema=self.schema)
        columns = [_encode(c, f.type) for c, f in zip(table.columns, self.staged, strict=True)]
        return pa.Table.from_arrays(columns, schema=self.staged)
