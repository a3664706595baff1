"""Spark's session time zone in DuckDB SQL: an instant's local time, and a local time's
instant with Java's rules.

A ``TimestampType`` value is an instant (DuckDB ``TIMESTAMPTZ``, microseconds since
the epoch); Spark reads its fields, formats it and truncates it in a zone: the
session's (``spark.sql.session.timeZone``), which each time-zone-aware expression
carries in its ``timeZoneId``, and in which a timestamp literal's text is written
(``mark_session_zone``).  The translation never relies on DuckDB's own ``TimeZone``
setting: every conversion names its zone (ICU's ``timezone(zone, x)``).

Going from a local time back to an instant, Java (``ZonedDateTime.of``) takes the
*earlier* offset in an overlap (the hour repeated when the clocks go back), and
shifts a time in a gap forward by the gap's length.  ICU does the latter too but
takes the later offset in an overlap, so ``instant`` checks the offset in force a
day before and takes it where it is also valid.  A zone is translated when it is
UTC (or a name for it) or a region name (``America/Los_Angeles``) that both ICU and
Python's tz database know; any other (an offset like ``+08:00``, a three-letter
short ID, which Java maps its own way) falls back.
"""

from __future__ import annotations

import functools
from typing import Any

from hybrid_shuffle.sparkplan.expressions import _exact
from hybrid_shuffle.sparkplan.expressions.core import Unsupported

__all__ = [
    "ZONE_FIELD",
    "instant",
    "instant_in",
    "instant_keeping",
    "known_zones",
    "local",
    "mark_session_zone",
    "zone_of",
]

#: the field ``mark_session_zone`` adds to a timestamp literal's JSON
ZONE_FIELD = "hsSessionTimeZone"
_UTC_NAMES = frozenset({"UTC", "GMT", "Z", "Etc/UTC", "Etc/GMT", "UCT", "Etc/UCT", "Zulu"})


def mark_session_zone(raw: Any, zone: str) -> None:
    """Record ``zone`` on every ``TimestampType`` literal of a plan's JSON (``raw``, as
    ``json.loads`` gives it): Spark writes such a literal as its local time in the
    session time zone (``Literal.toString``), which the JSON does not name."""
    if isinstance(raw, dict):
        if str(raw.get("class", "")).endswith(".Literal") and raw.get("dataType") == "timestamp":
            raw[ZONE_FIELD] = zone
        for value in raw.values():
            if isinstance(value, (dict, list)):
                mark_session_zone(value, zone)
    elif isinstance(raw, list):
        for value in raw:
            if isinstance(value, (dict, list)):
                mark_session_zone(value, zone)


@functools.cache
def known_zones() -> frozenset[str]:
    import zoneinfo

    import duckdb

    with duckdb.connect(":memory:") as con:
        icu = {str(r[0]) for r in con.execute("SELECT name FROM pg_timezone_names()").fetchall()}
    return frozenset(icu & zoneinfo.available_timezones())


def zone_of(zone: object) -> str:
    """The zone to name in SQL for a Spark zone id (``'UTC'`` for UTC's names);
    ``Unsupported`` for one the translation cannot follow exactly."""
    if not isinstance(zone, str) or not zone:
        raise Unsupported("a time-zone-aware expression without its time zone")
    if zone in _UTC_NAMES:
        return "UTC"
    if "/" in zone and zone in known_zones() and "'" not in zone:
        return zone
    raise Unsupported(f"the time zone {zone}")


def local(instant_sql: str, zone: str) -> str:
    """The local time (``TIMESTAMP``) in ``zone`` of an instant (``TIMESTAMPTZ``)."""
    return f"timezone('{zone}', {instant_sql})"


def _offset(instant_sql: str, zone: str) -> str:
    """The offset of ``zone`` (SQL text naming it) at an instant, in microseconds."""
    return f"(epoch_us(timezone({zone}, {instant_sql})) - epoch_us({instant_sql}))"


def instant(local_sql: str, zone: str) -> str:
    """The instant (``TIMESTAMPTZ``) of a local time (``TIMESTAMP``) in ``zone``, as Java's
    ``ZonedDateTime.of``: the earlier offset in an overlap, shifted forward in a gap."""
    if zone == "UTC":
        return f"timezone('UTC', {local_sql})"
    return instant_in(local_sql, f"'{zone}'")


def instant_in(local_sql: str, zone_sql: str) -> str:
    """``instant`` in a zone given as SQL (a column's value: a name ICU knows)."""
    # ICU's instant takes the later offset in an overlap; the offset a day earlier is
    # the one before the transition, taken where it is also valid for this local time
    earlier = _offset("(@.x - to_microseconds(86400000000))", "@.z")
    check = _offset("(@.x - to_microseconds(@.o - @.d))", "@.z")
    body = (
        f"CASE WHEN @.o > @.d AND {check} = @.o THEN @.x - to_microseconds(@.o - @.d) ELSE @.x END"
    )
    inner = _exact.let(
        {"x": "@.x", "z": "@.z", "d": "epoch_us(@.l) - epoch_us(@.x)", "o": earlier}, body
    )
    middle = _exact.let({"l": "@.l", "z": "@.z", "x": "timezone(@.z, @.l)"}, inner)
    return _exact.let({"l": local_sql, "z": zone_sql}, middle)


def instant_keeping(local_sql: str, zone: str, original_sql: str) -> str:
    """The instant of a local time derived from the instant ``original_sql`` (its
    truncation to the day, the hour or the minute), as ``ZonedDateTime.truncatedTo``
    resolves it: the original's offset where that is valid for the new local time,
    else ``instant``'s rule."""
    if zone == "UTC":
        return f"timezone('UTC', {local_sql})"
    kept = "(timezone('UTC', @.l) - to_microseconds(@.o))"
    quoted = f"'{zone}'"
    body = f"CASE WHEN {_offset(kept, quoted)} = @.o THEN {kept} ELSE {instant('@.l', zone)} END"
    return _exact.let({"l": local_sql, "o": _offset(original_sql, quoted)}, body)
