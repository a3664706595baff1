"""How the corpus benchmarks (``spark_corpus``, ``tpcds_sql``) judge an engine answer
against Spark's: the column names, the Spark types of the columns, then the rows.

**Contract**: ``verdict(got, want, want_types, ordered)`` is ``None`` when ``got`` (the
engine's Arrow table) has ``want``'s column names, the Spark types ``want_types``
(``simpleString``s, as ``df.schema`` gives them) and its rows (in order when
``ordered``, else as multisets); otherwise a ``(kind, phrase)`` pair, ``kind`` one of

* ``"rows"``: a value or a row count differs (the worst bug: a wrong answer);
* ``"order"``: the same rows in another order, under a top-level ORDER BY (ties in
  the sort keys can make this legitimate; listed apart for a human to judge);
* ``"array order"``: equal once every array's elements are sorted (``collect_list``
  and ``collect_set`` keep no defined order across partitions);
* ``"names"`` / ``"types"``: the rows are right but a column's name or type is not.

Values are compared exactly: decimals by value (their scale is in the type), doubles
to 12 significant digits with NaN equal to NaN, timestamps as instants.
"""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from typing import Any

import pyarrow as pa

__all__ = ["REL", "rows_of", "same", "spark_rows", "spark_type", "verdict"]

#: doubles agree to this relative difference (about 12 significant digits)
REL = 1e-12


def spark_type(t: pa.DataType) -> str:
    """The ``simpleString`` Spark gives the type an Arrow column of type ``t`` holds."""
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return "binary"
    if pa.types.is_timestamp(t):
        return "timestamp" if t.tz else "timestamp_ntz"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t):
        return f"array<{spark_type(t.value_type)}>"
    if pa.types.is_map(t):
        return f"map<{spark_type(t.key_type)},{spark_type(t.item_type)}>"
    if pa.types.is_struct(t):
        fields = ",".join(f"{f.name}:{spark_type(f.type)}" for f in t)
        return f"struct<{fields}>"
    if pa.types.is_duration(t):
        return "interval day to second"
    names = {
        pa.bool_(): "boolean",
        pa.int8(): "tinyint",
        pa.int16(): "smallint",
        pa.int32(): "int",
        pa.int64(): "bigint",
        pa.float32(): "float",
        pa.float64(): "double",
        pa.date32(): "date",
        pa.null(): "void",
    }
    return names.get(t, str(t))


def rows_of(table: pa.Table) -> list[tuple[Any, ...]]:
    """The table's rows as tuples of plain Python values (``_plain``)."""
    columns = [[_plain(v) for v in c.to_pylist()] for c in table.columns]
    return list(zip(*columns, strict=True)) if columns else [() for _ in range(table.num_rows)]


def _plain(v: Any) -> Any:
    """One value made comparable: structs and maps as tuples, bytes as bytes, aware
    timestamps as UTC instants (naive ones as they are)."""
    if type(v).__name__ == "MonthDayNano" and v.months == 0:  # a day-time interval as Arrow's
        return dt.timedelta(days=v.days, microseconds=v.nanoseconds // 1000)
    if isinstance(v, dict):
        return tuple((k, _plain(x)) for k, x in v.items())
    if isinstance(v, list | tuple):
        return tuple(_plain(x) for x in v)
    if isinstance(v, bytearray | memoryview):
        return bytes(v)
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return ("instant", v.astimezone(dt.UTC).replace(tzinfo=None))
    return v


def _key(v: Any) -> tuple[Any, ...]:
    """A total order over mixed values, for sorting rows without an ORDER BY."""
    if v is None:
        return (0,)
    if isinstance(v, bool):
        return (1, int(v))
    if isinstance(v, int | Decimal):
        return (2, float(v), str(v))
    if isinstance(v, float):
        return (2, 0.0, "NaN") if math.isnan(v) else (2, float(f"{v:.10g}"), "")
    if isinstance(v, tuple):
        return (4, tuple(_key(x) for x in v))
    return (3, type(v).__name__, str(v))


def _row_key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(_key(v) for v in row)


def same(a: Any, b: Any) -> bool:
    """Whether two plain values are equal as the corpus counts it."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b or math.isclose(a, b, rel_tol=REL, abs_tol=0.0)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is not type(b) and not (_number(a) and _number(b)):
        return False
    return bool(a == b)


def _number(v: Any) -> bool:
    return isinstance(v, int | Decimal) and not isinstance(v, bool)


def _rows_problem(a: list[tuple[Any, ...]], b: list[tuple[Any, ...]], where: str) -> str | None:
    if len(a) != len(b):
        return f"{len(a)} rows, Spark has {len(b)}"
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if not same(x, y):
            return f"{where} {i}: {x!r}, Spark has {y!r}"
    return None


def _sorted_arrays(v: Any) -> Any:
    if isinstance(v, tuple):
        inner = tuple(_sorted_arrays(x) for x in v)
        return tuple(sorted(inner, key=_key))
    return v


def spark_rows(rows: list[Any]) -> list[tuple[Any, ...]]:
    """Spark's ``Row``s (``df.collect()``, where Spark cannot give Arrow) as ``rows_of``
    gives an Arrow table's: structs as (field, value) pairs, naive timestamps (PySpark
    gives them in the local time zone) as instants."""
    return [tuple(_row_value(v) for v in r) for r in rows]


def _row_value(v: Any) -> Any:
    if isinstance(v, tuple) and hasattr(v, "__fields__"):
        return tuple((k, _row_value(x)) for k, x in zip(v.__fields__, v, strict=True))
    if isinstance(v, dict):
        return tuple((_row_value(k), _row_value(x)) for k, x in v.items())
    if isinstance(v, list | tuple):
        return tuple(_row_value(x) for x in v)
    if isinstance(v, dt.datetime) and v.tzinfo is None:
        return ("instant", v.astimezone(dt.UTC).replace(tzinfo=None))
    return _plain(v)


def verdict(
    got: pa.Table,
    want_names: list[str],
    want_rows: list[tuple[Any, ...]],
    want_types: list[str],
    ordered: bool,
) -> tuple[str, str] | None:
    """None if the engine's ``got`` is Spark's answer (``want_names``, ``want_rows`` as
    ``rows_of`` gives them, ``want_types``); else (kind, what differs)."""
    a, b = rows_of(got), want_rows
    if got.num_columns != len(want_names):
        return ("rows", f"{got.num_columns} columns, Spark has {len(want_names)}")
    unordered = _rows_problem(sorted(a, key=_row_key), sorted(b, key=_row_key), "sorted row")
    if unordered is not None:
        fixed = [tuple(_sorted_arrays(v) for v in r) for r in a]
        wanted = [tuple(_sorted_arrays(v) for v in r) for r in b]
        if _rows_problem(sorted(fixed, key=_row_key), sorted(wanted, key=_row_key), "") is None:
            return ("array order", unordered)
        return ("rows", unordered)
    if ordered and (problem := _rows_problem(a, b, "row")) is not None:
        return ("order", problem)
    if got.column_names != want_names:
        return ("names", f"columns {got.column_names}, Spark has {want_names}")
    have = [spark_type(f.type) for f in got.schema]
    for name, t, w in zip(want_names, have, want_types, strict=True):
        if t == "interval day to second" and w.startswith("interval "):
            continue  # Arrow's duration does not keep which day-time fields Spark's type has
        if t != w:
            return ("types", f"column {name} is {t}, Spark's is {w}")
    return None
