"""The RayDP bridge: a Spark session on Ray, DataFrames in and out.

Spark on Ray starts through ``raydp.init_spark`` with the Java 17
``--add-opens`` options set here for the driver, the executors and RayDP's app
master (RayDP's documented list plus ``java.math``, without which its app
master cannot serialise a decimal), and with Spark's Python workers pinned to
this interpreter so that they find pyspark and ray.

DataFrames in (``to_arrow_refs``): the DataFrame's partitions are converted to
Arrow by Spark itself (``_collect_as_arrow``: one conversion in the executors,
streamed to the driver) and ``ray.put`` by the driver, which owns them for the
session: one copy into the object store, readable from any node.  Above
``spark.collect_limit`` the driver would hold too much, so the RayDP path
(``from_spark_recoverable``: blocks rebuilt by lineage) is used instead.

DataFrames out (``to_dataframe``): the result's Arrow chunks are put by the
driver and handed to RayDP, whose Spark tasks read them from the object store
(the path of ``ray.data.Dataset.to_spark``); the Spark schema is derived from
the Arrow schema here, so tz-naive timestamps come back as ``timestamp_ntz``.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import ray

from hybrid_shuffle.config import SparkConfig
from hybrid_shuffle.errors import PlanError
from hybrid_shuffle.quiet import spark_log_configs

__all__ = ["JAVA_OPTIONS", "SparkBridge", "spark_configs"]

log = logging.getLogger(__name__)

_OPENS = (
    "java.lang", "java.lang.invoke", "java.lang.reflect", "java.io", "java.net", "java.nio",
    "java.math", "java.text", "java.util", "java.util.concurrent",
    "java.util.concurrent.atomic", "jdk.internal.ref", "sun.nio.ch", "sun.nio.cs",
    "sun.security.action", "sun.util.calendar",
)  # fmt: skip
JAVA_OPTIONS = " ".join(
    [
        "-XX:+IgnoreUnrecognizedVMOptions",
        *(f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in _OPENS),
        "-Djdk.reflect.useDirectMethodHandle=false",
        "-Dio.netty.tryReflectionSetAccessible=true",
    ]
)
_JAVA_KEYS = (
    "spark.driver.extraJavaOptions",
    "spark.executor.extraJavaOptions",
    "spark.ray.raydp_app_master.extraJavaOptions",
)


def spark_configs(config: SparkConfig, log_level: str | None = None) -> dict[str, str]:
    """Spark settings for RayDP: ours, then the user's (Java options are merged, not replaced).

    Spark's log4j2 configuration is the quiet one unless ``log_level`` is ``debug``
    (``hybrid_shuffle.quiet``); a user's own ``spark.log4j.config.file.name`` wins.
    """
    settings = {
        **spark_log_configs(log_level),
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "1000000",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",
        # the Arrow collect holds a partition's batches in the driver JVM before Python
        # reads them: 1 GiB ran out of heap at 30M rows (four partitions)
        "spark.driver.memory": "4g",
        "spark.driver.maxResultSize": "2g",
    }
    user: Mapping[str, str] = config.configs
    settings.update({k: v for k, v in user.items() if k not in _JAVA_KEYS})
    for key in _JAVA_KEYS:
        settings[key] = f"{JAVA_OPTIONS} {user.get(key, '')}".strip()
    return settings


_UNSUPPORTED = ("map", "interval", "calendarinterval", "udt", "variant")
#: rows and rounds of the Arrow export that warm a fresh Spark up (``_prewarm``)
_PREWARM_ROWS = 1 << 19
_PREWARM_ROUNDS = 3


class SparkBridge:
    """One Spark session on Ray: started lazily, or the user's own (never stopped by us)."""

    def __init__(
        self, config: SparkConfig, app_name: str, spark: Any = None, log_level: str | None = None
    ) -> None:
        self.config = config
        self.app_name = app_name
        self.log_level = log_level
        self._spark = spark
        self._owned = False

    @property
    def session(self) -> Any:
        if self._spark is None:
            import raydp

            # pyspark reads the Python of its workers from this variable, not from the conf
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            self._spark = raydp.init_spark(
                self.app_name,
                num_executors=self.config.executors,
                executor_cores=self.config.executor_cores,
                executor_memory=self.config.executor_memory,
                configs=spark_configs(self.config, self.log_level),
            )
            self._owned = True
            try:
                self._prewarm()
            except Exception as e:  # only a speed-up: the user's own first job will say more
                log.warning("Spark prewarm failed (%s: %s); continuing", type(e).__name__, e)
        return self._spark

    def _prewarm(self) -> None:
        """Take the first-use costs of both conversions now, not in the user's first job.

        A fresh Spark interprets its Arrow export until the JVM has compiled it (the
        main job's first conversion in took 2-4x a warm one), and each Python worker
        of an executor starts and connects to Ray on the first conversion out.  A
        few hundred thousand rows of the common column types, exported, and a small
        table handed back on every executor core, do both, in about a second.
        """
        spark = self._spark
        cores = self.config.executors * self.config.executor_cores
        df = spark.range(0, _PREWARM_ROWS, numPartitions=cores).selectExpr(
            "id",
            "cast(id % 1000 as int) as i",
            "cast(id / 100.0 as decimal(12,2)) as d",
            "date_add(date'2000-01-01', cast(id % 1000 as int)) as t",
            "cast(id % 97 as string) as s",
        )
        for _ in range(_PREWARM_ROUNDS):
            df._collect_as_arrow()
        small = pa.table({"id": pa.array(range(cores), pa.int64())})
        back = _dataframe_from_refs(
            spark, [_put(small.slice(i, 1)) for i in range(cores)], _spark_schema(small.schema)
        )
        back.write.format("noop").mode("overwrite").save()

    def stop(self) -> None:
        if self._owned and self._spark is not None:
            import raydp

            raydp.stop_spark()
        self._spark = None
        self._owned = False

    # -- in ------------------------------------------------------------------------------

    def arrow_schema(self, df: Any, name: str) -> pa.Schema:
        """The Arrow schema the DataFrame will arrive with; rejects what cannot travel."""
        check_spark_types(df.schema, name)
        from pyspark.sql.pandas.types import to_arrow_schema

        schema: pa.Schema = to_arrow_schema(df.schema)
        return schema

    def to_arrow_refs(self, df: Any, name: str, pieces: int = 1) -> list[Any]:
        """The DataFrame as ObjectRefs of Arrow tables (see the module docstring), at least
        ``pieces`` of them when it has that many rows, so every source subtask gets data."""
        schema = self.arrow_schema(df, name)
        if _estimated_bytes(df) <= self.config.collect_limit:
            batches = df._collect_as_arrow()
            if not batches:
                return [ray.put(schema.empty_table())]
            table = pa.Table.from_batches(batches)
            if not table.schema.equals(schema):
                table = table.cast(schema)
            rows = min(self.config.collect_chunk, max(-(-table.num_rows // pieces), 1))
            return [_put(t) for t in _chunks(table, rows)]
        from raydp.spark.dataset import from_spark_recoverable

        return list(from_spark_recoverable(df).to_arrow_refs())

    # -- out -----------------------------------------------------------------------------

    def to_dataframe(self, table: pa.Table) -> Any:
        """A Spark DataFrame of ``table`` with the same column types."""
        spark = self.session
        for f in table.schema:
            if pa.types.is_map(f.type) or _nested_map(f.type):
                raise PlanError(
                    f"to_spark: column '{f.name}' is a {f.type}, which RayDP cannot hand to "
                    "Spark; turn it into a list of structs (or JSON) first"
                )
        if table.num_rows == 0:
            return spark.createDataFrame([], _spark_schema(table.schema))
        refs = [_put(t) for t in _chunks(table, self.config.collect_chunk)]
        return _dataframe_from_refs(spark, refs, _spark_schema(table.schema))


def _dataframe_from_refs(spark: Any, refs: list[Any], schema: Any) -> Any:
    """RayDP's object-store reader, with Arrow batches instead of pandas in between.

    RayDP registers the refs with its Spark master actor (which keeps them alive
    as long as Spark runs) and makes a DataFrame of block indexes placed where the
    objects live; each Spark task fetches its blocks from Ray.  RayDP converts
    them through pandas (``mapInPandas``), which turns nullable integers into
    floats and NaN into null; ``mapInArrow`` hands Spark the Arrow batches as
    they are.
    """
    import uuid

    from pyspark.sql import DataFrame
    from raydp.spark.dataset import RAYDP_SPARK_MASTER_SUFFIX, get_locations

    holder_name = spark.sparkContext.appName + RAYDP_SPARK_MASTER_SUFFIX
    holder = ray.get_actor(holder_name)
    df_id = uuid.uuid4()
    ray.get(holder.add_objects.remote(df_id, refs), timeout=120)
    reader = spark.sparkContext._jvm.org.apache.spark.sql.raydp.ObjectStoreReader
    jdf = reader.createRayObjectRefDF(spark._jsparkSession, get_locations(refs))
    namespace = ray.get_runtime_context().namespace
    address = ray.get(holder.get_ray_address.remote(), timeout=120)

    def fetch(batches: Any) -> Any:
        import logging

        import ray as ray_in_spark

        if not ray_in_spark.is_initialized():
            ray_in_spark.init(address=address, namespace=namespace, logging_level=logging.WARN)
        owner = ray_in_spark.get_actor(holder_name)
        for batch in batches:
            for idx in batch.column("idx").to_pylist():  # one entry per block, not per row
                ref = ray_in_spark.get(owner.get_object.remote(df_id, idx))
                yield from ray_in_spark.get(ref).to_batches()

    return DataFrame(jdf, spark).mapInArrow(fetch, schema)


def check_spark_types(schema: Any, name: str) -> None:
    """Reject, naming the column, Spark types that cannot travel as Arrow through RayDP."""
    for field in schema.fields:
        text = field.dataType.simpleString()
        if any(text.startswith(t) or f"<{t}" in text or f":{t}" in text for t in _UNSUPPORTED):
            raise PlanError(
                f"from_spark '{name}': column '{field.name}' has type {text}, which cannot go "
                "through Arrow and RayDP; convert it (to_json, or explode a map into a list "
                "of structs) before handing the DataFrame in"
            )


def _nested_map(t: pa.DataType) -> bool:
    if pa.types.is_map(t):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _nested_map(t.value_type)
    if pa.types.is_struct(t):
        return any(_nested_map(t.field(i).type) for i in range(t.num_fields))
    return False


def _spark_schema(schema: pa.Schema) -> Any:
    from pyspark.sql.pandas.types import from_arrow_type
    from pyspark.sql.types import StructType, TimestampNTZType

    out = StructType()
    for f in schema:
        if pa.types.is_timestamp(f.type) and f.type.tz is None:
            spark_type: Any = TimestampNTZType()
        else:
            spark_type = from_arrow_type(f.type)
        out.add(f.name, spark_type, nullable=f.nullable)
    return out


#: an attribute on a DataFrame carrying a size estimate its own plan cannot give (an RDD of
#: a physical plan's operator, made by ``sparkplan`` for a fallback or a leaf)
SIZE_HINT = "_hs_size_hint"


def _estimated_bytes(df: Any) -> int:
    """Spark's own size estimate of the DataFrame (it may overestimate, never reads data)."""
    hint = getattr(df, SIZE_HINT, None)
    if hint is not None:  # Spark's estimate of the plan this DataFrame wraps (sparkplan)
        return int(hint)
    try:
        stats = df._jdf.queryExecution().optimizedPlan().stats()
        return int(str(stats.sizeInBytes()))
    except Exception:  # no estimate: take the path that always works
        return sys.maxsize


def _put(table: pa.Table) -> Any:
    """``ray.put``, rebuilding the buffers of arrays Ray's Arrow serializer rejects.

    Spark writes all-null nested string columns with an empty offsets buffer, which
    Arrow accepts and Ray's serializer does not; a ``take`` rewrites the buffers.
    """
    try:
        return ray.put(table)
    except pa.ArrowInvalid:
        return ray.put(table.take(pa.array(range(table.num_rows), pa.int64())))


def _chunks(table: pa.Table, rows: int) -> list[pa.Table]:
    if table.num_rows <= rows:
        return [table]
    return [table.slice(i, rows) for i in range(0, table.num_rows, rows)]
