"""Timestamps in the engine against Spark itself, in UTC and in a zone with daylight saving
time: ``TimestampType`` and ``TimestampNTZType`` columns carried, compared, grouped,
joined and sorted, literals, casts, fields, ``date_trunc``, ``date_format``, and the
epoch conversions.  Each query gives Spark's rows and schema, and runs in the engine
(or falls back, where the translation cannot be exact).

The rows hold the corners: both sides of Los Angeles' spring gap and the repeated hour
of its autumn overlap, its 1883 switch from local mean time (an overlap of 7 minutes 2
seconds), instants before 1970 and before 1582, the years 1 and 9999, fractions of a
second, and nulls.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

import hybrid_shuffle as hs

from .oracle import parquet_views, ran_where, same_rows, same_schema, spark_table

pytestmark = pytest.mark.spark

ZONES = ["UTC", "America/Los_Angeles"]
_UTC = dt.UTC


def _ts(*parts: int) -> dt.datetime:
    return dt.datetime(*parts, tzinfo=_UTC)  # type: ignore[misc]


_STAMPS = [
    _ts(2024, 3, 10, 9, 59, 59, 999999),  # Los Angeles: 01:59:59.999999 PST, before the gap
    _ts(2024, 3, 10, 10, 0, 0),  # 03:00 PDT, after it
    _ts(2024, 11, 3, 8, 30, 0),  # 01:30 PDT, the first of the repeated hour
    _ts(2024, 11, 3, 9, 30, 0, 500000),  # 01:30:00.5 PST, the second
    None,
    _ts(1969, 12, 31, 23, 59, 59, 500000),
    _ts(1970, 1, 1),
    _ts(1900, 1, 1, 12, 0, 0),
    _ts(1883, 11, 18, 19, 59, 59),  # Los Angeles' switch from local mean time
    _ts(1500, 6, 15, 7, 8, 9, 123456),
    _ts(2300, 7, 1, 0, 0, 0, 1),
    _ts(9999, 12, 31, 23, 59, 59, 999999),
    _ts(2021, 2, 28, 23, 59, 59, 123000),
    _ts(2000, 2, 29, 13, 14, 15, 100),
    _ts(2024, 1, 7, 6, 7, 8, 90000),
    _ts(1, 1, 1, 0, 0, 0),
]
_LOCAL = [
    dt.datetime(2024, 3, 10, 2, 30, 0),  # in Los Angeles' gap
    dt.datetime(2024, 11, 3, 1, 30, 0, 250000),  # in its overlap
    dt.datetime(1883, 11, 18, 12, 0, 0),  # in its 1883 overlap
    None,
    dt.datetime(1969, 12, 31, 23, 59, 59, 999999),
    dt.datetime(1970, 1, 1),
    dt.datetime(2024, 2, 29, 23, 0, 1, 5),
    dt.datetime(1500, 6, 15, 7, 8, 9, 123456),
    dt.datetime(2300, 7, 1, 12, 0),
    dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
    dt.datetime(2024, 12, 31, 0, 0, 0),
    dt.datetime(2024, 3, 10, 3, 0, 0),
    dt.datetime(2020, 6, 30, 18, 45, 30, 120000),
    dt.datetime(1999, 1, 3, 4, 5, 6),
    dt.datetime(2024, 11, 3, 2, 0, 0),
    dt.datetime(2, 1, 1, 0, 0, 0),
]
_DAYS = [
    dt.date(2024, 3, 10),
    dt.date(2024, 11, 3),
    None,
    dt.date(1969, 12, 31),
    dt.date(1970, 1, 1),
    dt.date(1500, 1, 1),
    dt.date(9999, 12, 31),
    dt.date(2000, 2, 29),
    dt.date(2024, 1, 31),
    dt.date(1883, 11, 18),
    dt.date(2300, 7, 1),
    dt.date(2021, 1, 3),
    dt.date(2020, 12, 31),
    dt.date(1, 1, 1),
    dt.date(2024, 2, 29),
    dt.date(1999, 1, 4),
]
#: seconds since the epoch
_SECONDS = [0, 1710064800, -1, None, 253402300799, 1730622600, -2208988800, 86399]
_SECONDS += [10**12, -62135596800, 1, -86401, 10**9, 7, -7, 1730626200]
#: strings Spark's cast takes and refuses: zones, offsets, partial forms, invalid dates
_TEXTS = [
    "2024-03-10 02:30:00",
    "2024-11-03 01:30:00.5",
    "2024-01-01T12:00:00Z",
    " 2024-1-2 3:4:5 ",
    "2024-06-15 12:00:00 America/New_York",
    "2024-01-01 12:00:00.1234567+1:5",
    "2024-02-30 00:00:00",
    "2024-01-01 12:00:00 PST",
    None,
    "2024",
    "-0044-03-15 12:00:00",
    "2024-01-01 12:00:00 Foo/Bar",
    "1969-12-31 23:59:59.999999 UTC-01:30",
    "2024-01-01 12:30",
    "abc",
    "2024-01-01 12:00:00+18:01",
]
_DOUBLES = [1.5, -1.5, 0.001, math.nan, None, -0.0, 1e9, 0.1, 1 / 3, 1e7, 2.5, 100.0]
_DOUBLES += [1e-6, -1e9, 12.0, 7.25]


def _table() -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(len(_STAMPS)), pa.int32()),
            "ts": pa.array(_STAMPS, pa.timestamp("us", tz="UTC")),
            "ntz": pa.array(_LOCAL, pa.timestamp("us")),
            "day": pa.array(_DAYS, pa.date32()),
            "l": pa.array(_SECONDS, pa.int64()),
            "x": pa.array(_DOUBLES, pa.float64()),
            "txt": pa.array(_TEXTS, pa.string()),
        }
    )


@pytest.fixture(scope="module")
def spark(session: hs.Session, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Spark with the view ``tt``; dates before 1582 read as written (Arrow writes the
    proleptic Gregorian calendar, as Spark 3 and DuckDB read it)."""
    spark = session.spark
    key = "spark.sql.parquet.datetimeRebaseModeInRead"
    before = spark.conf.get(key)
    spark.conf.set(key, "CORRECTED")
    parquet_views(spark, tmp_path_factory.mktemp("timestamps"), {"tt": _table()})
    yield spark
    spark.conf.set(key, before)


@pytest.fixture(params=ZONES)
def zone(request: pytest.FixtureRequest, spark: Any) -> Iterator[str]:
    key = "spark.sql.session.timeZone"
    before = spark.conf.get(key)
    spark.conf.set(key, request.param)
    yield request.param
    spark.conf.set(key, before)


def _column(c: pa.ChunkedArray) -> list[Any]:
    """A column's values; a timestamp as its microseconds (an instant's, or a local
    time's) and a date as its days, so instants compare whatever zone Arrow names and
    years outside Python's range compare too."""
    if pa.types.is_timestamp(c.type):
        kind = "instant" if c.type.tz is not None else "local"
        return [None if v is None else (kind, v) for v in c.cast(pa.int64()).to_pylist()]
    if pa.types.is_date32(c.type):
        return [None if v is None else ("date", v) for v in c.cast(pa.int32()).to_pylist()]
    return ["NaN" if isinstance(v, float) and math.isnan(v) else v for v in c.to_pylist()]


def _rows(table: pa.Table | None) -> list[tuple[Any, ...]]:
    return [] if table is None else list(zip(*[_column(c) for c in table.columns], strict=True))


def check(session: hs.Session, spark: Any, query: str, in_engine: bool = True) -> None:
    """``query`` gives Spark's rows (timestamps as instants, see ``_column``), names and
    schema, in the engine unless told."""
    stream = session.sql(query)
    got = stream.to_arrow()
    df = spark.sql(query)
    assert got.column_names == df.columns
    same_rows(_rows(got), _rows(spark_table(df)))
    same_schema(session, got, df)
    ran_where(stream, in_engine)


QUERIES = {
    "carried": "SELECT id, ts, ntz FROM tt",
    "literals": "SELECT id FROM tt WHERE ts > TIMESTAMP'2024-01-01 00:00:00' "
    "OR ts <= '1900-01-01 12:00:00' OR ts = TIMESTAMP'2024-03-10 03:00:00' "
    "OR ntz = TIMESTAMP_NTZ'2024-11-03 01:30:00.25'",
    "coalesce": "SELECT id, coalesce(ts, TIMESTAMP'2000-01-01 10:00:00.5') AS c FROM tt",
    "min max": "SELECT min(ts) AS a, max(ts) AS b, min(ntz) AS c, max(ntz) AS d FROM tt",
    "group by": "SELECT ts, count(*) AS n FROM tt GROUP BY ts",
    "join": "SELECT a.id AS i, b.id AS j FROM tt a JOIN tt b "
    "ON CAST(a.ts AS TIMESTAMP_NTZ) = b.ntz OR CAST(a.ts AS DATE) = b.day",
    "sort": "SELECT id, ts, ntz FROM tt ORDER BY ts DESC NULLS FIRST, ntz",
    "casts": "SELECT id, CAST(ts AS DATE) AS a, CAST(ts AS TIMESTAMP_NTZ) AS b, "
    "CAST(ts AS STRING) AS c, CAST(ts AS DOUBLE) AS d, CAST(ts AS BIGINT) AS e, "
    "CAST(ts AS INT) AS f, CAST(ntz AS TIMESTAMP) AS g, CAST(ntz AS DATE) AS h, "
    "CAST(ntz AS STRING) AS i, CAST(day AS TIMESTAMP) AS j, CAST(day AS TIMESTAMP_NTZ) AS k, "
    "to_date(ts) AS m, CAST(txt AS TIMESTAMP) AS n, to_timestamp(txt) AS o FROM tt",
    "fields": "SELECT id, hour(ts) AS a, minute(ts) AS b, second(ts) AS c, year(ts) AS d, "
    "month(ts) AS e, dayofmonth(ts) AS f, dayofweek(ts) AS g, dayofyear(ts) AS h, "
    "quarter(ts) AS i, hour(ntz) AS j, extract(HOUR FROM ts) AS k, date_part('minute', ntz) AS m "
    "FROM tt",
    "date_trunc": "SELECT id, date_trunc('year', ts) AS a, date_trunc('quarter', ts) AS b, "
    "date_trunc('month', ts) AS c, date_trunc('week', ts) AS d, date_trunc('day', ts) AS e, "
    "date_trunc('hour', ts) AS f, date_trunc('minute', ts) AS g, date_trunc('second', ts) AS h, "
    "date_trunc('millisecond', ts) AS i, date_trunc('HOUR', ntz) AS j, "
    "date_trunc('nope', ts) AS k FROM tt",
    "date_format": "SELECT id, date_format(ts, 'yyyy-MM-dd') AS a, "
    "date_format(ts, 'yyyy-MM-dd HH:mm:ss') AS b, date_format(ts, 'MM/dd/yyyy') AS c, "
    "date_format(ts, 'yyyyMMdd') AS d, date_format(ts, 'HH:mm') AS e, "
    "date_format(ts, 'EEE, MMM d yy') AS f, date_format(ts, 'EEEE MMMM h:m:s a SSS D') AS g, "
    "date_format(ntz, 'yyyy-MM-dd HH:mm:ss.SSSSSS') AS h, date_format(day, 'dd.MM.yyyy') AS i, "
    "date_format(ts, \"yyyy-MM-dd'T'HH:mm''\") AS j FROM tt",
    "epoch": "SELECT id, from_unixtime(l) AS a, from_unixtime(l, 'yyyy-MM-dd HH') AS b, "
    "unix_timestamp(ts) AS c, unix_timestamp(day) AS d, unix_timestamp(ntz) AS e, "
    "unix_seconds(ts) AS f, unix_millis(ts) AS g, unix_micros(ts) AS h, "
    "timestamp_seconds(l) AS i, timestamp_millis(l) AS j, timestamp_micros(l) AS k FROM tt",
    "parse": "SELECT id, to_timestamp(t, 'yyyy-MM-dd HH:mm:ss') AS a, "
    "to_date(d, 'MM/dd/yyyy') AS b, unix_timestamp(t, 'yyyy-MM-dd HH:mm:ss') AS c, "
    "to_timestamp(t2, 'yyyyMMddHHmmss.SSS') AS e FROM "
    "(SELECT id, date_format(ts, 'yyyy-MM-dd HH:mm:ss') AS t, "
    "date_format(ntz, 'MM/dd/yyyy') AS d, date_format(ts, 'yyyyMMddHHmmss.SSS') AS t2 FROM tt) "
    "WHERE id NOT IN (11, 15)",
    "make_timestamp": "SELECT id, make_timestamp(year(ntz), month(ntz), day(ntz), hour(ntz), "
    "minute(ntz), second(ntz) + 0.25) AS a, make_timestamp(2024, month(day), dayofmonth(day), "
    "1, 30, 60) AS b, make_timestamp_ntz(year(day), 2, dayofmonth(day), 2, 30, 59.5) AS c "
    "FROM tt WHERE id NOT IN (13, 15)",
    "intervals": "SELECT id, ts + INTERVAL 1 DAY AS a, "
    "ts - INTERVAL '1 02:03:04.5' DAY TO SECOND AS b, "
    "ts + INTERVAL '1-2' YEAR TO MONTH AS c, ntz + INTERVAL 36 HOURS AS d, "
    "ntz - INTERVAL 13 MONTHS AS e, date_add(ts, 1) AS f, add_months(ts, 1) AS g, "
    "datediff(ts, day) AS h FROM tt WHERE id <> 11",
}

#: what falls back, with Spark's result all the same
FALLBACKS = {
    "string to timestamp_ntz": "SELECT id, CAST(txt AS TIMESTAMP_NTZ) AS a FROM tt",
    "a zone pattern": "SELECT id, date_format(ts, 'yyyy-MM-dd z') AS a FROM tt",
    "a literal in the repeated hour": "SELECT id FROM tt WHERE ts = TIMESTAMP'2024-11-03 01:30:00'",
}


@pytest.mark.parametrize("name", list(QUERIES))
def test_in_the_engine(name: str, session: hs.Session, spark: Any, zone: str) -> None:
    check(session, spark, QUERIES[name])


@pytest.mark.parametrize("name", list(FALLBACKS))
def test_falls_back(name: str, session: hs.Session, spark: Any) -> None:
    key = "spark.sql.session.timeZone"
    before = spark.conf.get(key)
    spark.conf.set(key, "America/Los_Angeles")
    try:
        check(session, spark, FALLBACKS[name], in_engine=False)
    finally:
        spark.conf.set(key, before)


def test_an_offset_zone_falls_back(session: hs.Session, spark: Any) -> None:
    key = "spark.sql.session.timeZone"
    before = spark.conf.get(key)
    spark.conf.set(key, "+08:00")
    try:
        check(session, spark, "SELECT id, hour(ts) AS h FROM tt", in_engine=False)
    finally:
        spark.conf.set(key, before)
