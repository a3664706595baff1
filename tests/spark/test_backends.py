"""``spark.backend``: which Spark the session runs, who stops it, and how data travels.

Runs on both Spark versions (``./dev test`` runs the Spark-facing tests in a second
virtualenv with pyspark 4): the default backend fits the installed pyspark, a
backend that does not is one sentence naming both versions, and a SparkSession the
test made itself (``attach``) serves the session and outlives it.  A DataFrame
larger than ``spark.collect_limit`` goes from Spark's workers into the session's
holder without passing through the driver: every object of it is owned by the
holder, none by the driver.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
import ray

import hybrid_shuffle as hs
from hybrid_shuffle.config import SparkConfig, load_config
from hybrid_shuffle.spark import JAVA_OPTIONS
from hybrid_shuffle.spark.backends import choose_backend, installed_pyspark

from .conftest import JVM_OPTIONS, own_ray
from .test_bridge import holder_worker, owners, rows

pytestmark = pytest.mark.spark

#: runs after the modules sharing conftest's session, which own_ray() closes
STARTS_ITS_OWN_RAY = True
pyspark_sql = pytest.importorskip("pyspark.sql")

PYSPARK = installed_pyspark() or "0"
SPARK4 = int(PYSPARK.split(".")[0]) >= 4
CONFIG: dict[str, Any] = {
    "parallelism": 2,
    "ray": {"num_cpus": 4, "object_store_memory": "400 MiB"},
    "shuffle": {"buffer_size": "1 MiB", "memory_budget": "64 MiB"},
}


def test_the_default_backend_fits_the_installed_pyspark() -> None:
    assert choose_backend(SparkConfig(), None).name == ("local" if SPARK4 else "raydp")


@pytest.mark.skipif(not SPARK4, reason="RayDP runs on the installed pyspark 3.5")
def test_raydp_on_pyspark_4_is_one_sentence_naming_both_versions() -> None:
    own_ray()
    with pytest.raises(hs.ConfigError) as raised:
        hs.Session({**CONFIG, "spark": {"backend": "raydp"}})
    message = str(raised.value)
    assert f"pyspark {PYSPARK} is installed" in message
    assert "pyspark<=3.5.7" in message and "spark.backend: local" in message
    assert "\n" not in message
    assert not ray.is_initialized()  # refused before anything started


def test_attach_without_a_session_names_the_fix() -> None:
    with pytest.raises(hs.ConfigError, match=r"hs\.Session\(config, spark=spark\)"):
        hs.Session({**CONFIG, "spark": {"backend": "attach"}})


def test_a_backend_that_is_not_one_lists_the_three() -> None:
    with pytest.raises(hs.ConfigError, match="raydp, local, attach"):
        load_config({"spark": {"backend": "yarn"}})


#: a plain SparkSession launches the process's one JVM without RayDP's classes, after which
#: RayDP cannot start in that process ("Could not parse Master URL: 'ray://...'"): where
#: the suite's other modules run on RayDP (pyspark 3.5), the attached-session tests are left
#: to the Spark 4 pass of ./dev test
_ATTACH_HERE = pytest.mark.skipif(
    choose_backend(SparkConfig(), None).uses_raydp,
    reason="the suite runs on RayDP in this process; attach is tested on Spark 4",
)


@pytest.fixture(scope="module")
def own_spark() -> Iterator[Any]:
    """A local SparkSession made here, as a notebook would: the engine must not stop it."""
    from pyspark.sql import SparkSession

    own_ray()  # the shared session's Spark would otherwise be the one getOrCreate returns

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers' Python: the driver's
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("the-users-own")
        .config("spark.driver.extraJavaOptions", f"{JAVA_OPTIONS} {JVM_OPTIONS}")
        .config("spark.sql.session.timeZone", "America/New_York")  # not the engine's UTC
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    # the shared session's local Spark closed before: none of its settings carried over
    # (spark-submit had made them the JVM's system properties; stop_spark clears them)
    assert spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch") == "10000"
    yield spark
    spark.stop()


@_ATTACH_HERE
def test_attach_serves_the_session_and_the_spark_outlives_it(own_spark: Any) -> None:
    own_ray()
    df = own_spark.range(0, 5000, numPartitions=3).selectExpr(
        "id", "cast(id % 7 as int) as k", "cast(id / 3 as decimal(12,2)) as d"
    )
    with hs.Session(CONFIG, spark=own_spark) as session:
        assert session.bridge.backend.name == "attach"
        assert session.spark is own_spark
        back = session.job("attached").from_spark(df).to_spark()
        assert back.schema == df.schema  # nullability included
        assert rows(back) == rows(df)
    assert not ray.is_initialized()
    assert own_spark.range(0, 10).count() == 10  # still running, still usable


@_ATTACH_HERE
def test_a_hand_over_above_collect_limit_never_passes_through_the_driver(
    own_spark: Any,
) -> None:
    """On an attached Spark; ``test_bridge`` checks the same on the Spark the session
    starts (RayDP on Spark 3.5, local mode on Spark 4)."""
    own_ray()
    config = {**CONFIG, "spark": {"collect_limit": "1 KiB", "collect_chunk": 20_000}}
    with hs.Session(config, spark=own_spark) as session:
        df = own_spark.range(0, 100_000, numPartitions=3).selectExpr(
            "id", "cast(id as string) as s", "timestamp_seconds(id) as ts"
        )
        refs = session.bridge.to_arrow_refs(df, "big")
        assert owners(refs) == {holder_worker(session)}  # none is the driver's
        assert len(refs) >= 6  # 3 partitions of 33k rows, in chunks of 20k: put by Spark
        table = ray.get(refs)
        assert sum(t.num_rows for t in table) == 100_000
        got = session.job("big").from_spark(df).to_arrow()
        assert sorted(got.column("id").to_pylist()) == list(range(100_000))
        assert got.schema == session.bridge.arrow_schema(df, "big")  # timestamps in UTC
        instants = got.sort_by("id").column("ts").cast(pa.int64()).to_pylist()
        assert instants == [i * 1_000_000 for i in range(100_000)]
