"""Python UDFs of a PySpark job run in the engine's tasks (issue 35), each against Spark.

Every form Spark evaluates in Python workers -- ``@udf``, ``@pandas_udf`` (scalar,
iterator, grouped aggregate), ``mapInPandas``, ``mapInArrow``, ``applyInPandas`` and
``cogroup().applyInPandas`` -- gives Spark's rows and schema and runs fully in the
engine (nothing falls back); the grouped ones in two modes of their exchange.  A
function that raises fails the job once, naming itself; one that returns the wrong
type gives Spark's null or Spark's error; one that imports a module only
``ray.runtime_env`` ships runs, and one whose module the executors cannot import
falls back to Spark with one sentence.  The session is conftest's shared one, whose Ray
starts with the ``ray.runtime_env`` that ships the first of those modules
(``conftest.SHIPPED_MODULE``).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from pyspark.sql import Window
from pyspark.sql import functions as F
from pyspark.sql.functions import pandas_udf, udf
from pyspark.sql.types import DoubleType, LongType, StringType

import hybrid_shuffle as hs

from .conftest import SHIPPED_MODULE
from .oracle import BASE_YAML, check, check_sql, configured, parquet_views, rows, subtrees

pytestmark = pytest.mark.spark

ROWS = 300
#: a module on the driver's path that nothing ships
UNSHIPPED = "hs_udf_unshipped"


@pytest.fixture(scope="module", autouse=True)
def driver_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The driver imports both modules for this module's tests: the one the shared Ray's
    ``runtime_env`` ships (``SHIPPED_MODULE``) and one that nothing ships."""
    unshipped = tmp_path_factory.mktemp("unshipped")
    (unshipped / UNSHIPPED).mkdir()
    (unshipped / UNSHIPPED / "__init__.py").write_text("def negated(x):\n    return -x\n")
    added = [str(SHIPPED_MODULE.parent), str(unshipped)]
    sys.path[:0] = added
    yield
    sys.path[:] = [p for p in sys.path if p not in added]


@pytest.fixture(scope="module")
def spark(session: hs.Session, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Spark with the Parquet view ``t``: nulls and NaN in ``v``, two files."""
    root = tmp_path_factory.mktemp("python_udfs")
    ids = list(range(ROWS))
    t = pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "k": pa.array([None if i % 13 == 0 else i % 5 for i in ids], pa.int32()),
            "g": pa.array([None if i % 11 == 0 else f"g{i % 3}" for i in ids], pa.string()),
            "v": pa.array(
                [None if i % 7 == 0 else (math.nan if i % 17 == 0 else i * 0.25) for i in ids],
                pa.float64(),
            ),
        }
    )
    return parquet_views(session.spark, root, {"t": t})


def _t(spark: Any) -> Any:
    return spark.table("t")


# -- the functions (module level: pickled by reference, as a user's would be) --------------


@pandas_udf(DoubleType())
def scaled(v: pd.Series, id: pd.Series) -> pd.Series:
    return v * 2 + id


@pandas_udf(StringType())
def labelled(g: pd.Series) -> pd.Series:
    return g.str.upper()


@pandas_udf(LongType())
def next_ids(batches: Iterator[pd.Series]) -> Iterator[pd.Series]:
    for ids in batches:
        yield ids + 1


@udf(LongType())
def squared(x: int | None) -> int | None:
    return None if x is None else x * x


@udf(StringType())
def described(g: str | None, v: float | None) -> str:
    return f"{g}:{v}"


@udf(DoubleType())
def as_int(x: int) -> int:
    return x  # an int for a double column: Spark makes it null


@udf(LongType())
def failing(x: int) -> int:
    if x == 123:
        raise ValueError(f"no row {x}, please")
    return x


@pandas_udf(DoubleType())
def mean_of(v: pd.Series) -> float:
    return float(v.mean())


@pandas_udf(LongType())
def count_of(v: pd.Series) -> int:
    return len(v)


def _evens(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    for frame in batches:
        kept = frame[frame.id % 2 == 0]
        yield kept.assign(w=kept.v * 10)


def _arrow_passthrough(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield from batches


def _batch_sizes(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    for frame in batches:
        yield pd.DataFrame({"n": [len(frame)]})


def _summary(key: tuple[Any, ...], frame: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {"k": [key[0]], "n": [len(frame)], "total": [frame.v.sum()], "first": [frame.id.min()]}
    )


def _paired(left: pd.DataFrame, right: pd.DataFrame) -> pd.DataFrame:
    key = left.k.iloc[0] if len(left) else right.k.iloc[0]
    return pd.DataFrame({"k": [key], "left": [len(left)], "right": [len(right)]})


def _wrong_length(v: pd.Series) -> pd.Series:
    return v.head(1)


# -- every form, against Spark ------------------------------------------------------------


def test_scalar_pandas_udfs_run_in_the_engine(session: hs.Session, spark: Any) -> None:
    df = _t(spark).select("id", scaled("v", "id").alias("s"), labelled("g").alias("G"))
    check(session, session.from_dataframe(df), df, in_engine=True)


def test_an_iterator_pandas_udf_runs_in_the_engine(session: hs.Session, spark: Any) -> None:
    df = _t(spark).where("id % 3 = 0").select("g", next_ids("id").alias("n"))
    check(session, session.from_dataframe(df), df, in_engine=True)


def test_row_at_a_time_udfs_run_in_the_engine(session: hs.Session, spark: Any) -> None:
    df = _t(spark).select(
        "id", squared(F.col("k") + 1).alias("sq"), described("g", "v").alias("d"), "v"
    )
    check(session, session.from_dataframe(df), df, in_engine=True)


def test_udfs_registered_for_sql_run_in_the_engine(session: hs.Session, spark: Any) -> None:
    spark.udf.register("squared_sql", squared)
    spark.udf.register("scaled_sql", scaled)
    check_sql(
        session,
        spark,
        "SELECT g, sum(squared_sql(k)) AS s, max(scaled_sql(v, id)) AS m FROM t GROUP BY g",
        in_engine=True,
    )


def test_a_udf_returning_another_type_gives_sparks_nulls(session: hs.Session, spark: Any) -> None:
    df = _t(spark).select("id", as_int("id").alias("x"))
    got = check(session, session.from_dataframe(df), df, in_engine=True)
    assert set(got.column("x").to_pylist()) == {None}


def test_a_udf_under_a_filter_and_an_aggregate(session: hs.Session, spark: Any) -> None:
    df = (
        _t(spark)
        .withColumn("s", scaled("v", "id"))
        .where(F.col("s") > 20)
        .groupBy("g")
        .agg(F.count("*").alias("n"), F.sum("s").alias("total"))
    )
    check(session, session.from_dataframe(df), df, in_engine=True)


def test_map_in_pandas_and_map_in_arrow_run_in_the_engine(session: hs.Session, spark: Any) -> None:
    pandas = _t(spark).mapInPandas(_evens, "id long, k int, g string, v double, w double")
    check(session, session.from_dataframe(pandas), pandas, in_engine=True)
    arrow = _t(spark).mapInArrow(_arrow_passthrough, "id long, k int, g string, v double")
    check(session, session.from_dataframe(arrow), arrow, in_engine=True)


@pytest.mark.parametrize("mode", ["blocking", "hybrid-full"])
def test_grouped_functions_run_in_the_engine_in_two_modes(
    session: hs.Session, spark: Any, tmp_path: Path, mode: str
) -> None:
    t = _t(spark)
    other = spark.range(0, 40).select((F.col("id") % 7).cast("int").alias("k"), "id")
    frames = {
        "applyInPandas": t.groupBy("k").applyInPandas(
            _summary, "k int, n long, total double, first long"
        ),
        "grouped aggregate": t.groupBy("g").agg(
            mean_of("v").alias("m"), count_of(F.col("id") + 1).alias("c")
        ),
        "cogroup": t.groupBy("k")
        .cogroup(other.groupBy("k"))
        .applyInPandas(_paired, "k int, left long, right long"),
        # one key on the right: a subtask whose right side gets no row still calls the
        # function for each of its left keys, with an empty right frame
        "cogroup with one right key": t.groupBy("k")
        .cogroup(other.where("k = 1").groupBy("k"))
        .applyInPandas(_paired, "k int, left long, right long"),
    }
    with configured(session, tmp_path, BASE_YAML % f", batch_mode: {mode}"):
        for name, df in frames.items():
            stream = session.from_dataframe(df, name=name.replace(" ", "_"))
            check(session, stream, df, in_engine=True)
            modes = {e["mode"] for e in stream.explain_data()["edges"]}
            assert mode in modes, (name, modes)


def test_a_pandas_aggregate_over_an_unbounded_window(session: hs.Session, spark: Any) -> None:
    whole = Window.partitionBy("g")
    framed = Window.partitionBy("k").rowsBetween(
        Window.unboundedPreceding, Window.unboundedFollowing
    )
    df = _t(spark).select(
        "id", "g", mean_of("v").over(whole).alias("m"), count_of("id").over(framed).alias("c")
    )
    check(session, session.from_dataframe(df), df, in_engine=True)


def test_a_pandas_aggregate_over_an_ordered_window_runs_in_spark(
    session: hs.Session, spark: Any
) -> None:
    ordered = Window.partitionBy("g").orderBy("id")
    df = _t(spark).select("id", mean_of("v").over(ordered).alias("m"))
    stream = session.from_dataframe(df)
    check(session, stream, df, in_engine=False)
    [fell_back] = subtrees(stream)
    assert "an order or a bounded frame" in fell_back["reason"]


def test_a_global_pandas_aggregate_over_no_rows(session: hs.Session, spark: Any) -> None:
    df = _t(spark).where("id < 0").agg(mean_of("v").alias("m"))
    check(session, session.from_dataframe(df), df, in_engine=True)


def test_an_empty_partition_reaches_no_function(session: hs.Session, spark: Any) -> None:
    one_side = _t(spark).repartition(2, "id").where("id < 5")  # one partition has rows
    df = one_side.mapInPandas(_evens, "id long, k int, g string, v double, w double")
    check(session, session.from_dataframe(df), df, in_engine=True)


def test_a_function_never_sees_more_than_max_records_per_batch(
    session: hs.Session, spark: Any
) -> None:
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    # the shared session's own value (the engine starts Spark with a million) comes back
    # after: unset would leave Spark's default to the modules after this one
    before = spark.conf.get(key)
    spark.conf.set(key, "10000")
    try:
        df = spark.range(0, 1_000_000, numPartitions=2).mapInPandas(_batch_sizes, "n long")
        stream = session.from_dataframe(df)
        assert subtrees(stream) == []
        sizes = [n for (n,) in rows(stream.to_arrow())]
    finally:
        spark.conf.set(key, before)
    assert sum(sizes) == 1_000_000
    assert max(sizes) <= 10_000


# -- errors, types, dependencies ---------------------------------------------------------


def test_a_function_that_raises_fails_once_naming_itself(session: hs.Session, spark: Any) -> None:
    df = _t(spark).select(failing("id").alias("x"))
    stream = session.from_dataframe(df)
    assert subtrees(stream) == []
    with pytest.raises(hs.JobFailedError) as caught:
        stream.collect()
    error = caught.value
    assert isinstance(error, hs.PythonFunctionError)
    text = str(error)
    assert "'failing'" in text and "ValueError: no row 123, please" in text
    assert "python_" in text  # the vertex
    assert error.attempts == 1
    cause = str(error.__cause__)
    assert __file__ in cause and "raise ValueError" in cause
    assert "pyspark" not in cause and "hybrid_shuffle" not in cause


def test_a_pandas_udf_returning_the_wrong_length_gives_sparks_error(
    session: hs.Session, spark: Any
) -> None:
    wrong = pandas_udf(_wrong_length, "double")
    df = _t(spark).select(wrong("v").alias("x"))
    with pytest.raises(Exception) as spark_error:
        df.collect()
    assert "SCHEMA_MISMATCH_FOR_PANDAS_UDF" in str(spark_error.value)
    with pytest.raises(hs.PythonFunctionError, match="SCHEMA_MISMATCH_FOR_PANDAS_UDF"):
        session.from_dataframe(df).collect()


def test_a_module_shipped_by_runtime_env_is_imported_by_the_executors(
    session: hs.Session, spark: Any
) -> None:
    import hs_udf_shipped  # type: ignore[import-not-found]

    tripled = udf(hs_udf_shipped.tripled, "long")  # pickled by reference: needs the module
    df = _t(spark).select("id", tripled("id").alias("x"))
    stream = session.from_dataframe(df)
    assert subtrees(stream) == []
    # Spark's own Python workers are not in the session's runtime_env: the oracle is Python
    assert sorted(rows(stream.to_arrow())) == [(i, i * 3) for i in range(ROWS)]


def test_a_function_the_executors_cannot_load_runs_in_spark(
    session: hs.Session, spark: Any
) -> None:
    import hs_udf_unshipped  # type: ignore[import-not-found]

    negated = udf(hs_udf_unshipped.negated, "long")
    df = _t(spark).select("id", negated("id").alias("x"))
    fell_back = subtrees(session.from_dataframe(df))
    assert len(fell_back) == 1
    reason = fell_back[0]["reason"]
    assert "cannot load its Python function" in reason and "ray.runtime_env" in reason
    assert UNSHIPPED in reason and "\n" not in reason
