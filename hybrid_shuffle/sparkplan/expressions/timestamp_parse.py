"""A string cast to a timestamp, as Spark's ``stringToTimestamp`` parses it, in DuckDB SQL.

Spark trims whitespace and ISO controls and takes ``[+-]yyyy[yy][-[m]m[-[d]d[( |T)[h]h
[:[m]m[:[s]s[.fraction][zone]]]]]]``, or a time alone (``[h]h:[m]m[:[s]s...]``, or
``T[h]h...`` when the string starts with ``T``) on today's date in the zone; a fraction
beyond six digits is cut, an invalid date or time is null.  The zone after the seconds
is ``Z``, ``[+-]h[h][[:]mm[[:]ss]]`` (Spark first pads ``+1:`` to ``+01:`` and ``:5`` to
``:05``), ``UTC``/``GMT``/``UT`` optionally followed by such an offset, one of Java's
short ids (``SHORT_IDS``), or a region name; any other text is null, as Java's
``ZoneId.of`` refuses it.  A region name counts when ICU and Python's tz database both
know it: Java's own list may differ in a rare name, which is why ``Cast`` is partial.
Without a zone the local time is in the session time zone (``_zones.instant``).
"""

from __future__ import annotations

from hybrid_shuffle.sparkplan.expressions import _exact, _zones

__all__ = ["parse_local", "string_to_timestamp"]

#: Java's ``ZoneId.SHORT_IDS``
_SHORT_IDS = {
    "ACT": "Australia/Darwin",
    "AET": "Australia/Sydney",
    "AGT": "America/Argentina/Buenos_Aires",
    "ART": "Africa/Cairo",
    "AST": "America/Anchorage",
    "BET": "America/Sao_Paulo",
    "BST": "Asia/Dhaka",
    "CAT": "Africa/Harare",
    "CNT": "America/St_Johns",
    "CST": "America/Chicago",
    "CTT": "Asia/Shanghai",
    "EAT": "Africa/Addis_Ababa",
    "ECT": "Europe/Paris",
    "IET": "America/Indiana/Indianapolis",
    "IST": "Asia/Kolkata",
    "JST": "Asia/Tokyo",
    "MIT": "Pacific/Apia",
    "NET": "Asia/Yerevan",
    "NST": "Pacific/Auckland",
    "PLT": "Asia/Karachi",
    "PNT": "America/Phoenix",
    "PRT": "America/Puerto_Rico",
    "PST": "America/Los_Angeles",
    "SST": "Pacific/Guadalcanal",
    "VST": "Asia/Ho_Chi_Minh",
}
_SHORT_OFFSETS = {"EST": -5 * 3600, "MST": -7 * 3600, "HST": -10 * 3600}

_TRIM = "'^[\\x00-\\x20\\x7f]+|[\\x00-\\x20\\x7f]+$'"
_TIME = "(\\d{1,2})(?::(\\d{1,2})(?::(\\d{1,2})(?:\\.(\\d*))?(.*))?)?"
#: the date and time form; groups: sign, year, month, day, hour, minute, second,
#: fraction, zone
_DATE_TIME = "^([+-]?)(\\d{4,6})(?:-(\\d{1,2})(?:-(\\d{1,2})(?:[ T]" + _TIME + ")?)?)?$"
#: a time alone: its hour before a colon, or after a ``T`` the string starts with
_JUST_TIME = "^T?" + _TIME + "$"
_NAMES = ["sign", "year", "month", "day", "hour", "minute", "second", "fraction", "zone"]
_TIME_NAMES = ["hour", "minute", "second", "fraction", "zone"]


def _offset_seconds(text: str) -> str:
    """The seconds of a ``ZoneOffset.of`` text (``+h``, ``+hh``, ``+hh:mm``, ``+hhmm``,
    ``+hh:mm:ss``, ``+hhmmss``); null for any other form or beyond 18 hours."""
    form = "'^[+-](\\d{1,2}|\\d{2}:?\\d{2}|\\d{2}:\\d{2}:\\d{2}|\\d{6})$'"
    total = "(@.h * 3600 + @.m * 60 + @.s)"
    body = (
        f"CASE WHEN @.g IS NOT NULL AND @.m <= 59 AND @.s <= 59 AND {total} <= 64800 "
        f"THEN (CASE WHEN @.neg THEN -1 ELSE 1 END) * {total} END"
    )
    parts = {
        "g": "@.g",
        "neg": "@.neg",
        "h": "CAST(left(@.g, 2) AS INTEGER)",
        "m": "CAST(CASE WHEN length(@.g) >= 4 THEN substr(@.g, 3, 2) ELSE '0' END AS INTEGER)",
        "s": "CAST(CASE WHEN length(@.g) = 6 THEN substr(@.g, 5, 2) ELSE '0' END AS INTEGER)",
    }
    digits = (
        f"CASE WHEN regexp_matches({text}, {form}) THEN replace(substr({text}, 2), ':', '') END"
    )
    return _exact.let({"g": digits, "neg": f"starts_with({text}, '-')"}, _exact.let(parts, body))


def string_to_timestamp(text: str, session_zone: str) -> str:
    """SQL of ``CAST(text AS TIMESTAMP)`` (a ``TIMESTAMPTZ``, null where Spark's is)."""
    trimmed = f"regexp_replace({text}, {_TRIM}, '', 'g')"
    date_time = f"regexp_extract(@.t, '{_DATE_TIME}', {_NAMES})"
    just_time = f"regexp_extract(@.t, '{_JUST_TIME}', {_TIME_NAMES})"
    # the fields of the form that matched: a time alone has no year (``just``)
    fields = (
        f"CASE WHEN ({date_time}).year <> '' THEN {date_time} "
        f"WHEN ({just_time}).hour <> '' AND NOT starts_with(@.t, '+') "
        "AND NOT starts_with(@.t, '-') AND (starts_with(@.raw, 'T') OR "
        "(NOT starts_with(@.t, 'T') AND contains(@.t, ':'))) THEN "
        f"{{'sign': '', 'year': '', 'month': '', 'day': '', 'hour': ({just_time}).hour, "
        f"'minute': ({just_time}).minute, 'second': ({just_time}).second, "
        f"'fraction': ({just_time}).fraction, 'zone': ({just_time}).zone}} END"
    )
    number = "CAST(nullif(@.f.{0}, '') AS INTEGER)"
    normalized = (
        "regexp_replace(regexp_replace(trim(@.f.zone), '([+-])(\\d):', '\\10\\2:'), "
        "'([+-]\\d\\d):(\\d)$', '\\1:0\\2')"
    )
    parts = {
        "y": f"(CASE WHEN @.f.sign = '-' THEN -1 ELSE 1 END) * {number.format('year')}",
        "mo": f"coalesce({number.format('month')}, 1)",
        "d": f"coalesce({number.format('day')}, 1)",
        "h": f"coalesce({number.format('hour')}, 0)",
        "mi": f"coalesce({number.format('minute')}, 0)",
        "s": f"coalesce({number.format('second')}, 0)",
        "us": "coalesce(CAST(nullif(rpad(left(@.f.fraction, 6), 6, '0'), '') AS BIGINT), 0)",
        "just": "@.f.year = ''",
        "z": f"coalesce({normalized}, '')",
        "ok": "@.f IS NOT NULL",
    }
    fixed = ", ".join(f"'{k}': {v}" for k, v in _SHORT_OFFSETS.items())
    regions = ", ".join(f"'{k}': '{v}'" for k, v in _SHORT_IDS.items())
    names = ", ".join(f"'{n}'" for n in sorted(_zones.known_zones()))
    utc_prefixed = "regexp_replace(@.z, '^(UTC|GMT|UT)', '')"
    zone = {
        "off": "CASE WHEN @.z IN ('Z', 'UTC', 'GMT', 'UT') THEN 0 "
        f"WHEN regexp_matches(@.z, '^(UTC|GMT|UT)[+-]') THEN {_offset_seconds(utc_prefixed)} "
        "WHEN starts_with(@.z, '+') OR starts_with(@.z, '-') THEN "
        f"{_offset_seconds('@.z')} ELSE MAP {{{fixed}}}[@.z] END",
        "region": f"coalesce(MAP {{{regions}}}[@.z], "
        f"CASE WHEN list_contains([{names}], @.z) THEN @.z END)",
    }
    keep = {k: f"@.{k}" for k in ("y", "mo", "d", "h", "mi", "s", "us", "just", "z", "ok")}
    # a time alone is on today's date in its zone (``LocalDate.now(zone)``)
    today = (
        f"CASE WHEN @.z = '' THEN CAST({_zones.local('now()', session_zone)} AS DATE) "
        "WHEN @.off IS NOT NULL THEN CAST(timezone('UTC', now()) + to_seconds(@.off) AS DATE) "
        "WHEN @.region IS NOT NULL THEN CAST(timezone(@.region, now()) AS DATE) END"
    )
    valid = (
        "@.ok AND @.mo BETWEEN 1 AND 12 AND @.d >= 1 "
        "AND @.d <= day(last_day(TRY(make_date(@.y, @.mo, 1)))) "
        "AND @.h <= 23 AND @.mi <= 59 AND @.s <= 59"
    )
    day = f"CASE WHEN @.just THEN {today} WHEN {valid} THEN TRY(make_date(@.y, @.mo, @.d)) END"
    clock = "to_microseconds(((CAST(@.h AS BIGINT) * 60 + @.mi) * 60 + @.s) * 1000000 + @.us)"
    local = f"(CAST(@.day AS TIMESTAMP) + {clock})"
    instant = (
        f"CASE WHEN @.day IS NULL OR @.h > 23 OR @.mi > 59 OR @.s > 59 THEN NULL "
        f"WHEN @.z = '' THEN {_zones.instant(local, session_zone)} "
        f"WHEN @.off IS NOT NULL THEN timezone('UTC', {local}) - to_seconds(@.off) "
        f"WHEN @.region IS NOT NULL THEN {_zones.instant_in(local, '@.region')} END"
    )
    with_day = _exact.let(
        {**{k: f"@.{k}" for k in ("h", "mi", "s", "us", "z", "off", "region")}, "day": day},
        instant,
    )
    with_zone = _exact.let({**keep, **zone}, with_day)
    with_parts = _exact.let(parts, with_zone)
    with_fields = _exact.let({"f": fields}, with_parts)
    # a year DuckDB's dates take but its timestamps do not is null, as in Spark
    return f"TRY({_exact.let({'t': trimmed, 'raw': text}, with_fields)})"


#: a pattern's numeric runs Spark parses as fixed-width digits (``DateTimeFormatter`` in
#: strict resolution: ``yyyy`` takes four digits without a sign, the others their width)
_FIXED = {"yyyy": "year", "MM": "month", "dd": "day", "HH": "hour", "mm": "minute", "ss": "second"}


def _pattern_regex(pattern: str) -> tuple[str, list[str]]:
    """A regular expression for the strings ``pattern`` parses, and its groups' fields;
    ``Unsupported`` for a pattern with any other letter."""
    from hybrid_shuffle.sparkplan.expressions.core import Unsupported
    from hybrid_shuffle.sparkplan.expressions.datetime_format import pattern_runs

    parts, fields = ["^"], []
    for kind, text in pattern_runs(pattern):
        if kind == "text":
            if any(c.isalpha() for c in text):
                raise Unsupported(f"parsing the pattern {pattern!r} (letters in its text)")
            parts.append("".join("\\" + c if not c.isalnum() else c for c in text))
        elif text in _FIXED:
            field = _FIXED[text]
            if field in fields:
                raise Unsupported(f"parsing the pattern {pattern!r} (a field twice)")
            parts.append(f"(\\d{{{len(text)}}})")
            fields.append(field)
        elif set(text) == {"S"} and len(text) <= 6 and "fraction" not in fields:
            parts.append(f"(\\d{{{len(text)}}})")
            fields.append("fraction")
        else:
            raise Unsupported(f"parsing the datetime pattern letters {text!r}")
    parts.append("$")
    return "".join(parts), fields


def parse_local(text: str, pattern: object) -> str:
    """SQL of the local time (``TIMESTAMP``) a string gives with a Spark pattern (a
    literal), as ``to_timestamp(s, pattern)`` reads it: missing fields are 1970-01-01
    00:00:00, an invalid date or time is null (where Spark is null or raises that the
    legacy parser would differ)."""
    from hybrid_shuffle.sparkplan.expressions.core import Unsupported

    if not isinstance(pattern, str):
        raise Unsupported("parsing with a pattern that is not a literal")
    regex, fields = _pattern_regex(pattern)
    if "'" in regex:
        raise Unsupported(f"parsing the pattern {pattern!r}")
    names = [f"g{i}" for i in range(len(fields))]

    def field(name: str, default: str) -> str:
        if name not in fields:
            return default
        return f"TRY_CAST(nullif(@.m.g{fields.index(name)}, '') AS INTEGER)"

    parts = {
        "ok": "@.m.g0 <> ''" if fields else f"@.s = '{pattern}'",
        "y": field("year", "1970"),
        "mo": field("month", "1"),
        "d": field("day", "1"),
        "h": field("hour", "0"),
        "mi": field("minute", "0"),
        "s": field("second", "0"),
        "us": f"TRY_CAST(rpad(@.m.g{fields.index('fraction')}, 6, '0') AS BIGINT)"
        if "fraction" in fields
        else "0",
    }
    valid = (
        "@.ok AND @.mo BETWEEN 1 AND 12 AND @.d >= 1 "
        "AND @.d <= day(last_day(TRY(make_date(@.y, @.mo, 1)))) "
        "AND @.h <= 23 AND @.mi <= 59 AND @.s <= 59"
    )
    clock = "to_microseconds(((CAST(@.h AS BIGINT) * 60 + @.mi) * 60 + @.s) * 1000000 + @.us)"
    body = f"CASE WHEN {valid} THEN TRY(CAST(make_date(@.y, @.mo, @.d) AS TIMESTAMP) + {clock}) END"
    match = f"regexp_extract(@.s, '{regex}', {names})" if fields else "NULL"
    inner = _exact.let(parts, body)
    return _exact.let({"s": text}, _exact.let({"s": "@.s", "m": match}, inner))
