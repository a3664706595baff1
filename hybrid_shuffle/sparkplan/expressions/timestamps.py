"""Timestamps: literals, casts to and from dates, strings and numbers, ``hour``/``minute``/
``second``, ``date_trunc``, ``date_format``, ``from_unixtime``, ``unix_timestamp`` and
the ``unix_*``/``timestamp_*`` conversions.

A ``TimestampType`` value is an instant (``TIMESTAMPTZ``), a ``TimestampNTZType`` one a
local time (``TIMESTAMP``); Spark's fields, formats and truncations of an instant are
those of its local time in the session time zone, which every time-zone-aware
expression carries (``timeZoneId``) and ``_zones`` follows exactly (Java's rules in an
overlap) or refuses.  Results are computed on microseconds as Spark does (floor
division for seconds).  A string cast to a timestamp is not translated (Spark's parser
takes zone names and partial forms per row).
"""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo

from hybrid_shuffle.sparkplan.expressions import _exact, _zones, collections, datetime, misc
from hybrid_shuffle.sparkplan.expressions.arithmetic import bits
from hybrid_shuffle.sparkplan.expressions.core import (
    Scope,
    Sql,
    Unsupported,
    children,
    register,
)
from hybrid_shuffle.sparkplan.expressions.datetime_format import format_local, timestamp_text
from hybrid_shuffle.sparkplan.expressions.timestamp_parse import parse_local, string_to_timestamp
from hybrid_shuffle.sparkplan.tree import Node
from hybrid_shuffle.sparkplan.types import INT, LONG, STRING, SparkType, spark_type

__all__ = ["cast_timestamp"]

TIMESTAMP = SparkType("timestamp")
TIMESTAMP_NTZ = SparkType("timestamp_ntz")
DOUBLE = SparkType("double")
_TEXT = re.compile(r"(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?")


def _is_timestamp(t: SparkType) -> bool:
    return t.name in ("timestamp", "timestamp_ntz")


def _zone(node: Node) -> str:
    return _zones.zone_of(node.get("timeZoneId"))


def _local(a: Sql, node: Node) -> str:
    """The local time of a timestamp: an instant's in the expression's zone."""
    if a.type.name == "timestamp_ntz":
        return a.text
    if a.type.name != "timestamp":
        raise Unsupported(f"a timestamp function of {a.type}")
    return _zones.local(a.text, _zone(node))


# -- literals ------------------------------------------------------------------------------


@register("Literal")
def _literal(node: Node, scope: Scope) -> Sql:
    kind = node.get("dataType")
    value = node.get("value")
    if isinstance(kind, dict) and kind.get("type") == "array" and value is not None:
        return collections.array_literal(node, scope)
    if kind not in ("timestamp", "timestamp_ntz") or value is None:
        return misc.literal(value, kind)
    if kind == "timestamp_ntz":  # the JSON writes its microseconds
        return Sql(f"make_timestamp(CAST({int(str(value))} AS BIGINT))", TIMESTAMP_NTZ, False)
    zone = _zones.zone_of(node.get(_zones.ZONE_FIELD))
    text = str(value)
    match = _TEXT.fullmatch(text)
    if match is None:
        raise Unsupported(f"the timestamp literal {text}")
    if zone != "UTC":
        # the text is a local time: one that occurs twice (an overlap) names either
        try:
            y, mo, d, h, mi, s = (int(g) for g in match.groups()[:6])
            wall = dt.datetime(y, mo, d, h, mi, s, tzinfo=zoneinfo.ZoneInfo(zone))
            if wall.utcoffset() != wall.replace(fold=1).utcoffset():
                raise Unsupported(f"the timestamp literal {text} (twice a local time in {zone})")
        except ValueError as e:
            raise Unsupported(f"the timestamp literal {text}") from e
    return Sql(f"timezone('{zone}', TIMESTAMP '{text}')", TIMESTAMP, False)


# -- casts ---------------------------------------------------------------------------------


def _seconds(instant_sql: str) -> str:
    """Whole seconds since the epoch, rounded down (``Math.floorDiv``)."""
    return _exact.let(
        {"u": f"epoch_us({instant_sql})"},
        "(@.u - ((@.u % 1000000 + 1000000) % 1000000)) // 1000000",
    )


def _micros_of(a: Sql) -> str:
    """Microseconds since the epoch of an instant, or of a local time read as UTC."""
    return f"epoch_us({a.text})"


def cast_timestamp(a: Sql, to: SparkType, node: Node) -> Sql:
    """``cast`` where the source or the target is a timestamp (``casts._cast``)."""
    source = a.type
    if source.name == "timestamp":
        if to.name == "timestamp_ntz":
            return Sql(_local(a, node), to, a.nullable)
        if to.name == "date":
            return Sql(f"CAST({_local(a, node)} AS DATE)", to, a.nullable)
        if to.name == "string":
            return Sql(timestamp_text(_local(a, node)), to, a.nullable)
        if to.name == "double":
            return Sql(f"CAST(epoch_us({a.text}) AS DOUBLE) / 1000000.0", to, a.nullable)
        if to.is_integral:
            seconds = _seconds(a.text)
            if bits(to) < 64:
                seconds = _exact.wrap(seconds, bits(to))
            return Sql(f"CAST({seconds} AS {to.duck})", to, a.nullable)
    if source.name == "timestamp_ntz":
        if to.name == "timestamp":
            return Sql(_zones.instant(a.text, _zone(node)), to, a.nullable)
        if to.name == "date":
            return Sql(f"CAST({a.text} AS DATE)", to, a.nullable)
        if to.name == "string":
            return Sql(timestamp_text(a.text), to, a.nullable)
    if source.name == "string" and to.name == "timestamp":
        return Sql(string_to_timestamp(a.text, _zone(node)), to)
    if source.name == "date":
        if to.name == "timestamp_ntz":
            return Sql(f"CAST({a.text} AS TIMESTAMP)", to, a.nullable)
        if to.name == "timestamp":
            local = f"CAST({a.text} AS TIMESTAMP)"
            return Sql(_zones.instant(local, _zone(node)), to, a.nullable)
    raise Unsupported(f"a cast from {source} to {to}")


# -- fields and truncation -----------------------------------------------------------------


def _field(part: str) -> object:
    def translate(node: Node, scope: Scope) -> Sql:
        (a,) = children(node, scope)[:1]
        return Sql(f"CAST({part}({_local(a, node)}) AS INTEGER)", INT, a.nullable)

    return translate


for _cls, _part in (("Hour", "hour"), ("Minute", "minute"), ("Second", "second")):
    register(_cls)(_field(_part))  # type: ignore[arg-type]

#: ``date_trunc``'s formats (``DateTimeUtils.parseTruncLevel``) -> DuckDB's part: a
#: date's levels and the day's and time's
_TRUNC = {
    **datetime.TRUNC_LEVELS,
    "day": "day",
    "dd": "day",
    "hour": "hour",
    "minute": "minute",
    "second": "second",
    "millisecond": "millisecond",
    "microsecond": "microsecond",
}


@register("TruncTimestamp")
def _trunc_timestamp(node: Node, scope: Scope) -> Sql:
    fmt, a = node.children[0], compile_child(node, scope, 1)
    if fmt.cls != "Literal":
        raise Unsupported("date_trunc to a format that is not a literal")
    part = _TRUNC.get(str(fmt.get("value") or "").lower())
    kind = a.type
    if part is None:  # Spark: null for any other format
        return Sql(f"CAST(NULL AS {kind.duck})", kind)
    if kind.name == "timestamp_ntz":
        return Sql(f"date_trunc('{part}', {a.text})", kind, a.nullable)
    zone = _zone(node)
    # ``DateTimeUtils.truncTimestamp``: below a minute on the instant itself; a day, an
    # hour or a minute keeps the instant's offset where it can; longer from a day's start
    unit = {"second": 1000000, "millisecond": 1000, "microsecond": 1}.get(part)
    if unit is not None:
        floor = f"to_microseconds((epoch_us(@.t) % {unit} + {unit}) % {unit})"
        return Sql(_exact.let({"t": a.text}, f"@.t - {floor}"), kind, a.nullable)
    if part in ("day", "hour", "minute"):
        local = f"date_trunc('{part}', {_zones.local('@.t', zone)})"
        truncated = _exact.let({"t": a.text}, _zones.instant_keeping(local, zone, "@.t"))
        return Sql(truncated, kind, a.nullable)
    day = f"CAST(date_trunc('{part}', {_zones.local(a.text, zone)}) AS DATE)"
    return Sql(_zones.instant(f"CAST({day} AS TIMESTAMP)", zone), kind, a.nullable)


def compile_child(node: Node, scope: Scope, index: int) -> Sql:
    from hybrid_shuffle.sparkplan.expressions.core import compile_expression

    return compile_expression(node.children[index], scope)


# -- formatting and the epoch --------------------------------------------------------------


def _pattern(node: Node) -> object:
    fmt = node.children[1]
    if fmt.cls != "Literal":
        raise Unsupported("a datetime pattern that is not a literal")
    return fmt.get("value")


@register(
    "DateFormatClass",
    note="patterns of y, M, d, H, h, m, s, S, a, E, D and punctuation or quoted text; "
    "any other letter (a zone, a week field) falls back",
)
def _date_format(node: Node, scope: Scope) -> Sql:
    a = compile_child(node, scope, 0)
    pattern = _pattern(node)
    if pattern is None:
        return Sql("CAST(NULL AS VARCHAR)", STRING)
    return Sql(format_local(_local(a, node), pattern), STRING, a.nullable)


def _from_micros(micros_sql: str) -> str:
    """The instant ``micros_sql`` microseconds after the epoch."""
    return f"timezone('UTC', make_timestamp({micros_sql}))"


@register("FromUnixTime")
def _from_unixtime(node: Node, scope: Scope) -> Sql:
    sec = compile_child(node, scope, 0)
    pattern = _pattern(node)
    if pattern is None:
        return Sql("CAST(NULL AS VARCHAR)", STRING)
    if not sec.type.is_integral:
        raise Unsupported(f"from_unixtime of {sec.type}")
    micros = _exact.wrap(f"CAST({sec.text} AS HUGEINT) * 1000000", 64)
    instant = _from_micros(f"CAST({micros} AS BIGINT)")
    local = _zones.local(instant, _zone(node))
    return Sql(format_local(local, pattern), STRING, sec.nullable)


@register(
    "UnixTimestamp",
    "ToUnixTimestamp",
    note="of a string: the patterns of GetTimestamp; any other falls back",
)
def _unix_timestamp(node: Node, scope: Scope) -> Sql:
    a = compile_child(node, scope, 0)
    # Java's division: truncated towards zero (a cast to bigint rounds down instead)
    if a.type.name in ("timestamp", "timestamp_ntz"):  # an ntz's local time read as UTC
        return Sql(f"(epoch_us({a.text}) // 1000000)", LONG, a.nullable)
    if a.type.name == "date":
        local = f"CAST({a.text} AS TIMESTAMP)"
        return Sql(f"(epoch_us({_zones.instant(local, _zone(node))}) // 1000000)", LONG, a.nullable)
    if a.type.name == "string":
        instant = _zones.instant(parse_local(a.text, _pattern(node)), _zone(node))
        return Sql(f"(epoch_us({instant}) // 1000000)", LONG)
    raise Unsupported(f"unix_timestamp of {a.type}")


def _unix(scale: int) -> object:
    def translate(node: Node, scope: Scope) -> Sql:
        (a,) = children(node, scope)[:1]
        if a.type.name != "timestamp":
            raise Unsupported(f"a unix_* function of {a.type}")
        if scale == 1:
            return Sql(f"epoch_us({a.text})", LONG, a.nullable)
        text = _exact.let(
            {"u": f"epoch_us({a.text})"},
            f"(@.u - ((@.u % {scale} + {scale}) % {scale})) // {scale}",
        )
        return Sql(text, LONG, a.nullable)

    return translate


register("UnixSeconds")(_unix(1000000))  # type: ignore[arg-type]
register("UnixMillis")(_unix(1000))  # type: ignore[arg-type]
register("UnixMicros")(_unix(1))  # type: ignore[arg-type]


def _to_timestamp(scale: int) -> object:
    """``timestamp_seconds``/``_millis``/``_micros`` of an integer; null where the
    microseconds leave DuckDB's range, which is also past Spark's (it raises)."""

    def translate(node: Node, scope: Scope) -> Sql:
        (a,) = children(node, scope)[:1]
        if not a.type.is_integral:
            raise Unsupported(f"a timestamp_* function of {a.type}")
        micros = f"TRY_CAST(CAST({a.text} AS HUGEINT) * {scale} AS BIGINT)"
        return Sql(_from_micros(micros), TIMESTAMP)

    return translate


register("SecondsToTimestamp")(_to_timestamp(1000000))  # type: ignore[arg-type]
register("MillisToTimestamp")(_to_timestamp(1000))  # type: ignore[arg-type]
register("MicrosToTimestamp")(_to_timestamp(1))  # type: ignore[arg-type]


# -- interval arithmetic -------------------------------------------------------------------


def _interval_literal(node: Node, year_month: bool) -> int:
    """The value of an ANSI interval literal: microseconds (a day-time interval) or months
    (a year-month one); ``Unsupported`` for any other interval."""
    kind = str(node.get("dataType"))
    wanted = ("year", "month") if year_month else ("day", "hour", "minute", "second")
    fields = kind.removeprefix("interval ").split(" to ")
    if node.cls != "Literal" or not kind.startswith("interval ") or fields[0] not in wanted:
        raise Unsupported(f"timestamp arithmetic with the {kind} {node.cls.lower()}")
    value = node.get("value")
    if value is None:
        raise Unsupported("timestamp arithmetic with a null interval")
    return int(str(value))


@register("TimeAdd")
def _time_add(node: Node, scope: Scope) -> Sql:
    """``ts + INTERVAL '1' DAY`` (a day-time interval, in microseconds)."""
    a = compile_child(node, scope, 0)
    micros = _interval_literal(node.children[1], year_month=False)
    if a.type.name == "timestamp":
        # ``timestampAddDayTime``: whole days on the local date (``plusDays``, keeping the
        # offset where it can), the rest on the instant
        days = abs(micros) // 86400000000 * (1 if micros >= 0 else -1)
        rest = micros - days * 86400000000
        moved = a.text
        if days:
            zone = _zone(node)
            local = f"({_zones.local('@.t', zone)} + to_days({days}))"
            moved = _exact.let({"t": a.text}, _zones.instant_keeping(local, zone, "@.t"))
        return Sql(_from_micros(f"epoch_us({moved}) + {rest}"), a.type, a.nullable)
    if a.type.name == "timestamp_ntz":
        return Sql(f"make_timestamp(epoch_us({a.text}) + {micros})", a.type, a.nullable)
    raise Unsupported(f"interval arithmetic on {a.type}")


@register("TimestampAddYMInterval")
def _add_year_month(node: Node, scope: Scope) -> Sql:
    """``ts + INTERVAL '1-2' YEAR TO MONTH``: the local time's months moved (clamped to
    the month's end, as ``plusMonths``), back in the zone keeping the offset it can."""
    a = compile_child(node, scope, 0)
    months = _interval_literal(node.children[1], year_month=True)
    if a.type.name == "timestamp_ntz":
        return Sql(f"({a.text} + to_months({months}))", a.type, a.nullable)
    if a.type.name != "timestamp":
        raise Unsupported(f"interval arithmetic on {a.type}")
    zone = _zone(node)
    local = f"({_zones.local('@.t', zone)} + to_months({months}))"
    text = _exact.let({"t": a.text}, _zones.instant_keeping(local, zone, "@.t"))
    return Sql(text, a.type, a.nullable)


@register(
    "GetTimestamp",
    note="patterns of yyyy, MM, dd, HH, mm, ss, S.. and punctuation; any other falls back",
)
def _get_timestamp(node: Node, scope: Scope) -> Sql:
    """``to_timestamp(s, pattern)`` (and ``to_date(s, pattern)``, its cast to a date)."""
    a = compile_child(node, scope, 0)
    kind = spark_type(node.get("dataType"))
    if a.type.name != "string" or kind.name not in ("timestamp", "timestamp_ntz"):
        raise Unsupported(f"to_timestamp of {a.type} as {kind}")
    local = parse_local(a.text, _pattern(node))
    if kind.name == "timestamp_ntz":
        return Sql(local, kind)
    return Sql(_zones.instant(local, _zone(node)), kind)


@register("MakeTimestamp")
def _make_timestamp(node: Node, scope: Scope) -> Sql:
    """``make_timestamp(y, mo, d, h, mi, sec)``: null for an invalid field (non-ANSI); a
    second of 60 with no fraction is the next minute."""
    args = children(node, scope)
    if len(args) != 6:
        raise Unsupported("make_timestamp with a time zone argument")
    kind = spark_type(node.get("dataType"))
    y, mo, d, h, mi, sec = args
    if not sec.type.is_decimal or sec.type.scale != 6:
        raise Unsupported(f"make_timestamp of seconds as {sec.type}")
    valid = (
        "@.mo BETWEEN 1 AND 12 AND @.d >= 1 AND @.d <= day(last_day(TRY(make_date(@.y, @.mo, 1)))) "
        "AND @.h BETWEEN 0 AND 23 AND @.mi BETWEEN 0 AND 59 AND @.us >= 0 "
        "AND @.us <= 60000000"
    )
    clock = "to_microseconds(((CAST(@.h AS BIGINT) * 60 + @.mi) * 60) * 1000000 + @.us)"
    local = (
        f"CASE WHEN {valid} THEN TRY(CAST(make_date(@.y, @.mo, @.d) AS TIMESTAMP) + {clock}) END"
    )
    bindings = {
        "y": f"CAST({y.text} AS INTEGER)",
        "mo": f"CAST({mo.text} AS INTEGER)",
        "d": f"CAST({d.text} AS INTEGER)",
        "h": f"CAST({h.text} AS INTEGER)",
        "mi": f"CAST({mi.text} AS INTEGER)",
        "us": f"CAST({sec.text} * 1000000 AS BIGINT)",
    }
    text = _exact.let(bindings, local)
    if kind.name == "timestamp_ntz":
        return Sql(text, kind)
    if kind.name != "timestamp":
        raise Unsupported(f"make_timestamp as {kind}")
    return Sql(_zones.instant(text, _zone(node)), kind)
