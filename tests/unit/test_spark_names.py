"""Unique internal names for a translated plan's columns, Spark's names kept for the end,
and day-time intervals back to Spark's Arrow type (no Spark: plain data and DuckDB)."""

from __future__ import annotations

import datetime

import duckdb
import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    DayTimeIntervalType,
    LongType,
    StructField,
    StructType,
)

from hybrid_shuffle.spark.bridge import spark_typed
from hybrid_shuffle.sparkplan.relation import Column, Rel, distinct, engine_names
from hybrid_shuffle.sparkplan.types import LONG


def test_distinct_names_a_repeated_attribute_apart() -> None:
    cols = [Column(7, "x", LONG), Column(8, "y", LONG), Column(7, "x", LONG)]
    assert [c.ref for c in distinct(cols)] == ["c7", "c8", "c7_1"]
    # a copy already named apart keeps its name; a new repeat takes the next free one
    again = distinct([*distinct(cols), Column(7, "x", LONG)])
    assert [c.ref for c in again] == ["c7", "c8", "c7_1", "c7_2"]


def test_a_relation_with_a_repeated_column_outputs_unique_names() -> None:
    columns = [Column(7, "x", LONG), Column(8, "y", LONG), Column(7, "x", LONG)]
    rel = Rel("SELECT 1 AS c7, 2 AS c8, 3 AS c7", columns)
    assert [c.ref for c in rel.columns] == ["c7", "c8", "c7_1"]
    out = duckdb.sql(rel.sql).arrow().read_all()
    assert out.column_names == ["c7", "c8", "c7_1"]
    assert out.to_pylist() == [{"c7": 1, "c8": 2, "c7_1": 3}]
    # an expression reads the first copy
    assert rel.scope().columns[7].text == "c7"


def test_engine_names_keep_unique_names_and_suffix_repeats() -> None:
    assert engine_names(["a", "b"]) == ["a", "b"]
    assert engine_names(["k", "v", "k", "w"]) == ["k", "v", "k_2", "w"]
    # as DuckDB compares them: ignoring case; never a name another column has
    assert engine_names(["x", "x", "X", "x_2"]) == ["x", "x_3", "X_4", "x_2"]
    assert engine_names(["count(1)", "count(1)"]) == ["count(1)", "count(1)_2"]


def test_day_time_intervals_come_back_as_duration() -> None:
    values = [datetime.timedelta(days=-365, microseconds=5), None, datetime.timedelta(hours=3)]
    connection = duckdb.connect()
    connection.register(
        "input", pa.table({"d": pa.array(values, pa.duration("us")), "n": [1, 2, 3]})
    )
    through = connection.execute("SELECT d, n FROM input").to_arrow_table()
    assert through.schema.field("d").type == pa.month_day_nano_interval()
    schema = StructType([StructField("d", DayTimeIntervalType(0, 3)), StructField("n", LongType())])
    back = spark_typed(through, schema)
    assert back.schema.field("d").type == pa.duration("us")
    assert back.column("d").to_pylist() == values
    sliced = spark_typed(through.slice(1), schema)
    assert sliced.column("d").to_pylist() == values[1:]


def test_day_time_intervals_nested_in_lists_and_structs_come_back_as_duration() -> None:
    """``approx_percentile`` of intervals is an array of them: DuckDB makes each element
    an ``INTERVAL`` too (the corpus found such rows differing from Spark's)."""
    hour, day = datetime.timedelta(hours=1), datetime.timedelta(days=2, microseconds=7)
    lists = pa.array([[hour, None, day], None, [], [day]], pa.list_(pa.duration("us")))
    structs = pa.array(
        [{"a": hour, "b": 1}, None, {"a": None, "b": 2}, {"a": day, "b": 3}],
        pa.struct([("a", pa.duration("us")), ("b", pa.int64())]),
    )
    connection = duckdb.connect()
    connection.register("input", pa.table({"l": lists, "s": structs}))
    through = connection.execute("SELECT l, s FROM input").to_arrow_table()
    assert through.schema.field("l").type == pa.list_(pa.month_day_nano_interval())
    interval = DayTimeIntervalType(0, 3)
    schema = StructType(
        [
            StructField("l", ArrayType(interval)),
            StructField(
                "s", StructType([StructField("a", interval), StructField("b", LongType())])
            ),
        ]
    )
    for table, start in ((through, 0), (through.slice(1), 1)):
        back = spark_typed(table, schema)
        assert back.schema.field("l").type == pa.list_(pa.duration("us"))
        assert back.column("l").to_pylist() == lists.to_pylist()[start:]
        assert back.column("s").to_pylist() == structs.to_pylist()[start:]
