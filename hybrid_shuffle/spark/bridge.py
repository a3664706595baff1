"""The Spark bridge: the session's Spark (``spark.backend``), DataFrames in and out.

DataFrames in (``to_arrow_refs``): up to ``spark.collect_limit`` (Spark's own
size estimate), the partitions are converted to Arrow by Spark itself (one
conversion in the executors, streamed to the driver) and ``ray.put`` by the
driver, which owns them for the session: one copy into the object store,
readable from any node.  Above it the driver would hold too much, so Spark's
executors send it to the engine's holder (``hybrid_shuffle.spark.holder``),
on every backend.  Either way, from 4 MiB of Spark's estimate on, a decimal of up
to 18 digits leaves Spark as its unscaled ``long`` and is rebuilt on arrival
(``unscaled_decimals``): Spark's Arrow writer makes a ``BigDecimal`` of every
decimal value.

DataFrames out (``to_dataframe``): the result's Arrow chunks are put by the
driver and read by Spark tasks from the object store.  On RayDP each chunk is put
as the bytes of an Arrow IPC stream, which the executors' JVMs read themselves
(``_dataframe_in_jvm``: no Python worker in Spark); otherwise (and for a table of
no column) Spark's Python workers read them, through the holder, as Arrow batches
(``mapInArrow``: no pandas in between).  The Spark
schema is the source DataFrame's when the result still has its columns and types
(``source_schema``), else derived from the Arrow schema, so tz-naive timestamps
come back as ``timestamp_ntz``.

Starting Spark takes seconds to tens of seconds (RayDP starts three JVMs), so
the start says so on stderr, a line before and one after with the seconds
(``hybrid_shuffle.quiet.announce``): a silent 20-second start looks like a hang.
``start_in_background`` starts it in a thread instead, so that the caller's own work
(writing or listing its data, planning, importing) overlaps those seconds; the first
use of ``session`` waits for the thread, and raises what the start raised.  A Spark
started off the main thread leaves the main thread's SIGINT handler alone (PySpark
installs its job-cancelling handler from the main thread only).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any

import pyarrow as pa
import ray

from hybrid_shuffle.config import SparkConfig
from hybrid_shuffle.errors import PlanError, SessionClosedError, WaitTimeoutError
from hybrid_shuffle.quiet import announce
from hybrid_shuffle.spark import holder
from hybrid_shuffle.spark.backends import (
    SparkBackend,
    choose_backend,
    describe_backend,
    launch_driver_jvm,
    require_pyspark,
    start_spark,
    stop_spark,
)
from hybrid_shuffle.spark.gateway_sockets import tcp_nodelay
from hybrid_shuffle.spark.sigint import current_sigint_handler, restore_sigint_handler
from hybrid_shuffle.spark.unscaled_decimals import UNSCALED_FROM_BYTES, unscaled

__all__ = ["SIZE_HINT", "SparkBridge", "check_spark_types", "handover_types", "spark_typed"]

log = logging.getLogger(__name__)

#: Spark types with no Arrow twin in PySpark 3.5 (``to_arrow_type``); maps and day-time
#: intervals (``duration[us]``) cross
_UNSUPPORTED = ("CalendarIntervalType", "YearMonthIntervalType", "VariantType")
#: rows and rounds of the Arrow export that warm a fresh Spark up (``_prewarm``)
_PREWARM_ROWS = 1 << 19
_PREWARM_ROUNDS = 3


class SparkBridge:
    """The session's Spark: started lazily by its backend, or the user's own (never
    stopped by the engine), and the two directions of the hand-over."""

    def __init__(
        self,
        config: SparkConfig,
        session_id: str,
        spark: Any = None,
        log_level: str | None = None,
        wait_timeout: float = 120.0,
    ) -> None:
        self.config = config
        self.session_id = session_id
        self.app_name = f"hybrid-shuffle-{session_id}"
        self.log_level = log_level
        self.wait_timeout = wait_timeout
        #: checked now, so a backend that does not fit the installed pyspark fails at once
        self.backend: SparkBackend = choose_backend(config, spark)
        self._spark = spark
        #: the Spark this session started (stopped on close), once ``start_spark`` returned
        self._own: Any = None
        #: the main thread's SIGINT handler before Spark replaced it (``session``)
        self._sigint: Any = None
        self._holder: Any = None
        #: the thread starting Spark (``start_in_background``) until ``session`` joined it,
        #: and what it gave: the session, or the error it raised
        self._starting: threading.Thread | None = None
        self._started: Any = None
        self._start_error: BaseException | None = None
        #: set by ``stop`` while the thread waits for Ray: it then starts nothing
        self._abandoned = False

    @property
    def session(self) -> Any:
        """The Spark session: the one passed in, the one the background start gives
        (waited for), else one started now."""
        if self._spark is None:
            if self._starting is not None:
                self._spark = self._join_start()
            else:
                self._sigint = current_sigint_handler()
                self._spark = self._start()
        tcp_nodelay(self._spark)  # this thread's py4j connection: once per thread
        return self._spark

    @property
    def starting(self) -> bool:
        """Whether a background start (``start_in_background``) has not been waited for."""
        return self._starting is not None

    def start_in_background(self, ray_up: threading.Event | None = None) -> None:
        """Start Spark in a thread now (nothing if it is started, starting or the user's):
        the caller goes on, and the first use of ``session`` waits for it.

        ``ray_up``, when given, is set once the session's Ray is up: until then the
        thread does what needs no Ray (on RayDP, launching the driver's JVM; in local
        mode, the whole start), so Spark's start overlaps Ray's."""
        if self._spark is not None or self._starting is not None:
            return
        require_pyspark(self.backend)  # one sentence here, not from the thread
        self._abandoned = False
        thread = threading.Thread(
            target=self._start_in_thread,
            args=(ray_up,),
            name="hybrid-shuffle-spark-start",
            daemon=True,
        )
        self._starting = thread
        thread.start()

    def _start_in_thread(self, ray_up: threading.Event | None) -> None:
        try:
            self._started = self._start(ray_up)
        except BaseException as e:  # raised again by session, in the caller's thread
            self._start_error = e

    def _join_start(self) -> Any:
        """Wait for the background start (at most ``spark.start_timeout``); its session,
        or raise its error.  A start still running after that is a ``WaitTimeoutError``
        and keeps running: a later use of ``session`` waits for it again."""
        thread = self._starting
        assert thread is not None
        thread.join(self.config.start_timeout)
        if thread.is_alive():
            raise WaitTimeoutError(
                f"{describe_backend(self.backend, self.config)} did not start within "
                f"{self.config.start_timeout:g} s (spark.start_timeout); Spark's log above says "
                "what it waits for (on a cluster, often CPUs for its executors): free them, "
                "lower spark.executors, or raise spark.start_timeout"
            )
        self._starting = None
        spark, self._started = self._started, None
        error, self._start_error = self._start_error, None
        if error is not None:
            raise error
        if spark is None:  # abandoned (the session closed first)
            raise SessionClosedError("the session closed while its Spark was starting")
        return spark

    def _start(self, ray_up: threading.Event | None = None) -> Any:
        """Start Spark (and warm it up: ``spark.prewarm``), saying so on stderr
        (``quiet.announce``); with ``ray_up`` (``start_in_background``), what needs Ray
        waits for it.  None when the session closed before Ray came up."""
        require_pyspark(self.backend)
        started = time.perf_counter()
        announce(self.log_level, f"starting {describe_backend(self.backend, self.config)}...")
        configs = None
        if ray_up is not None and self.backend.uses_raydp:
            configs = launch_driver_jvm(self.config, self.log_level)  # needs no Ray
            if not self._ray_ready(ray_up):
                return None
        spark = start_spark(self.backend, self.config, self.app_name, self.log_level, configs)
        self._own = spark
        if self.config.prewarm and (ray_up is None or self._ray_ready(ray_up)):
            try:
                self._prewarm(spark)
            except Exception as e:  # only a speed-up: the user's own first job will say more
                log.warning("Spark prewarm failed (%s: %s); continuing", type(e).__name__, e)
        version = f"Spark {self.backend.pyspark}" if self.backend.pyspark else "Spark"
        announce(self.log_level, f"{version} started in {time.perf_counter() - started:.1f} s")
        return spark

    def _ray_ready(self, ray_up: threading.Event) -> bool:
        """Wait for the session's Ray; False when the session gave up first (closed, or
        its Ray did not start)."""
        ray_up.wait()
        return not self._abandoned and ray.is_initialized()

    def _prewarm(self, spark: Any) -> None:
        """Take the first-use costs of both conversions now, not in the user's first job.

        A fresh Spark interprets its Arrow export until the JVM has compiled it (the
        main job's first conversion in took 2-4x a warm one), and each Python worker
        of an executor starts and connects to Ray on the first conversion out.  A
        few hundred thousand rows of the common column types, exported, and a small
        table handed back on every executor core, do both, in about a second.
        """
        cores = self.config.executors * self.config.executor_cores
        df = spark.range(0, _PREWARM_ROWS, numPartitions=cores).selectExpr(
            "id",
            "cast(id % 1000 as int) as i",
            "cast(id / 100.0 as decimal(12,2)) as d",
            "date_add(date'2000-01-01', cast(id % 1000 as int)) as t",
            "cast(id % 97 as string) as s",
        )
        exported = unscaled(df)  # what a conversion in exports (the decimal as its long)
        for _ in range(_PREWARM_ROUNDS):
            exported._collect_as_arrow()
        small = pa.table({"id": pa.array(range(cores), pa.int64())})
        refs = [_put(small.slice(i, 1)) for i in range(cores)]
        self._dataframe(spark, refs, _spark_schema(small.schema)).write.format("noop").mode(
            "overwrite"
        ).save()

    def _holder_started(self) -> None:
        if self._holder is None:
            self._holder = holder.start_holder(self.session_id)

    def stop(self) -> None:
        """Stop the Spark this session started (an attached one keeps running) and the
        holder, with the objects it owns; a background start is waited for first."""
        if self._starting is not None:
            self._abandoned = True  # the caller sets its ray_up before it stops the bridge
            self._starting.join(self.config.start_timeout)
            if self._starting.is_alive():  # a daemon thread: it ends with the process
                log.warning(
                    "Spark was still starting %g s after the session closed; left to the "
                    "process's exit (spark.start_timeout)",
                    self.config.start_timeout,
                )
            self._starting = None
            self._started = self._start_error = None
        try:
            if self._own is not None:
                stop_spark(self.backend, self._own, self.config, self.log_level)
        finally:
            restore_sigint_handler(self._sigint)
            self._sigint = None
            if self._holder is not None and ray.is_initialized():
                ray.kill(self._holder)
            self._holder = None
            self._spark = None
            self._own = None

    # -- in ------------------------------------------------------------------------------

    def arrow_schema(self, df: Any, name: str) -> pa.Schema:
        """The Arrow schema the DataFrame will arrive with; rejects what cannot travel."""
        check_spark_types(df.schema, name)
        check_unique_names(df.schema, name)
        return arrow_of(df.schema)

    def to_arrow_refs(self, df: Any, name: str, pieces: int = 1) -> list[Any]:
        """The DataFrame as ObjectRefs of Arrow tables (see the module docstring), at least
        ``pieces`` of them when it has that many rows, so every source subtask gets data."""
        schema = self.arrow_schema(df, name)
        estimate = _estimated_bytes(df)
        # short decimals as their longs (a quarter less of Spark's CPU for the main job's
        # orders), once that outweighs the tens of milliseconds of py4j calls it takes
        exported = unscaled(df) if estimate >= UNSCALED_FROM_BYTES else df
        if estimate <= self.config.collect_limit:
            batches = exported._collect_as_arrow()
            if not batches:
                return [ray.put(schema.empty_table())]
            table = holder.arrived_table(batches, schema)
            rows = min(self.config.collect_chunk, max(-(-table.num_rows // pieces), 1))
            return [_put(t) for t in _chunks(table, rows)]
        # every backend, RayDP's too: RayDP's own from_spark_recoverable waits for a free
        # Ray CPU, and with its executors holding them all (one executor of both cores on
        # a 2-core machine) it never returns; the holder needs none, and was faster
        # (BENCHMARKS.md, issue 25)
        self._holder_started()
        refs = holder.put_dataframe(
            exported, schema, self.session_id, self.config.collect_chunk, self.wait_timeout
        )
        return refs or [ray.put(schema.empty_table())]

    # -- out -----------------------------------------------------------------------------

    def to_dataframe(
        self, table: pa.Table, source_schema: Any = None, names: list[str] | None = None
    ) -> Any:
        """A Spark DataFrame of ``table`` with the same column types: ``source_schema`` (a
        Spark ``StructType``, the DataFrame the result came from) when the table still has
        its columns and types, nullability included, else one derived from the table.

        Its columns are named ``names`` (default: the table's own), which may repeat a
        name as Spark's own results do: the rows cross under unique names, and Spark
        renames them (``toDF``) once they are a DataFrame."""
        spark = self.session
        final = list(table.column_names if names is None else names)
        for name, f in zip(final, table.schema, strict=True):
            if pa.types.is_map(f.type) or _nested_map(f.type):
                raise PlanError(
                    f"to_spark: column '{name}' is a {f.type}, which Arrow cannot hand to "
                    "Spark here; turn it into a list of structs (or JSON) first"
                )
        renamed = final != table.column_names or len({n.lower() for n in final}) < len(final)
        if renamed:
            crossing = [f"_hs_{i}" for i in range(table.num_columns)]
            table = table.rename_columns(crossing)
            source_schema = _renamed_schema(source_schema, crossing)
        df = self._to_dataframe(spark, table, source_schema)
        return df.toDF(*final) if renamed else df

    def _to_dataframe(self, spark: Any, table: pa.Table, source_schema: Any) -> Any:
        schema = _spark_schema(table.schema)
        if source_schema is not None:
            arrow = _matching_arrow_schema(source_schema, table.schema)
            if arrow is not None:
                table, schema = table.cast(arrow), source_schema
        if table.num_rows == 0:
            return spark.createDataFrame([], schema)
        if self.backend.uses_raydp:
            df = _dataframe_in_jvm(spark, table, schema, self.config.collect_chunk)
            if df is not None:
                return df
        refs = [_put(t) for t in _chunks(table, self.config.collect_chunk)]
        return self._dataframe(spark, refs, schema)

    def _dataframe(self, spark: Any, refs: list[Any], schema: Any) -> Any:
        if self.backend.uses_raydp:
            return _dataframe_from_refs(spark, refs, schema)
        self._holder_started()
        return holder.dataframe_of(spark, refs, schema, self.session_id, self.wait_timeout)


def arrow_of(schema: Any) -> pa.Schema:
    """A Spark ``StructType`` as Arrow: timestamps in UTC, the session time zone the
    engine sets (PySpark 4 asks for the zone, which 3.5 takes as UTC by itself)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        arrow: pa.Schema = to_arrow_schema(schema, timezone="UTC")  # type: ignore[call-arg,unused-ignore]
    except TypeError:  # pyspark 3.5: no time zone argument
        arrow = to_arrow_schema(schema)
    return arrow


def _matching_arrow_schema(source: Any, table: pa.Schema) -> pa.Schema | None:
    """``source`` as Arrow, when ``table`` has the same column names and types (string
    widths aside); None when the result's columns are not the source's."""
    try:
        arrow = arrow_of(source)
    except Exception:  # a type Arrow cannot take: derive from the table instead
        return None
    if arrow.names != table.names:
        return None
    for want, got in zip(arrow.types, table.types, strict=True):
        if want != got and not (_is_string(want) and _is_string(got)):
            return None
    return arrow


def _renamed_schema(schema: Any, names: list[str]) -> Any:
    """``schema`` (a ``StructType``, or None) with its fields named ``names``; None when it
    has another number of fields."""
    if schema is None or len(schema.fields) != len(names):
        return None
    from pyspark.sql.types import StructField, StructType

    return StructType(
        [
            StructField(n, f.dataType, f.nullable, f.metadata)
            for n, f in zip(names, schema.fields, strict=True)
        ]
    )


def _is_string(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t))


def _dataframe_in_jvm(spark: Any, table: pa.Table, schema: Any, chunk_rows: int) -> Any:
    """RayDP's JVM reader (``spark.backend: raydp``): no Python in Spark's executors.

    Each chunk of the table, as Spark's Arrow types (``arrow_of(schema)``), is put as
    one Arrow IPC stream of bytes, which Ray stores raw, so that a Java worker reads it:
    RayDP's ``RayDatasetRDD`` fetches each in an executor's JVM (Spark's executors are
    Ray actors) and Spark's own ``ArrowConverters`` turn the batches into rows.  Nothing
    starts a Python worker nor joins Ray from one, which the first hand-back otherwise
    pays (seconds on a fresh executor).  The refs are registered with RayDP's master
    (kept as long as Spark runs), as ``_dataframe_from_refs`` does.  None when the table
    does not cast to Spark's Arrow types (that path then takes it)."""
    import uuid

    from pyspark.sql import DataFrame
    from raydp.spark.dataset import RAYDP_SPARK_MASTER_SUFFIX, get_locations

    if table.num_columns == 0:  # rows of no column: only the Python reader counts them
        return None
    try:
        arrow = arrow_of(schema)
        if not table.schema.equals(arrow):
            table = table.rename_columns(arrow.names).cast(arrow)
    except (pa.ArrowException, TypeError, ValueError):  # a type Spark's Arrow lacks
        return None
    payloads = []
    for chunk in _chunks(table, chunk_rows):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, arrow) as writer:
            writer.write_table(chunk)
        payloads.append(ray.put(sink.getvalue().to_pybytes()))  # bytes: stored raw
    master = ray.get_actor(spark.sparkContext.appName + RAYDP_SPARK_MASTER_SUFFIX)
    ray.get(master.add_objects.remote(uuid.uuid4(), payloads), timeout=120)
    jvm = spark.sparkContext._jvm
    rdd = jvm.org.apache.spark.rdd.RayDatasetRDD(
        spark.sparkContext._jsc, [ref.binary() for ref in payloads], get_locations(payloads)
    )
    reader = jvm.org.apache.spark.sql.raydp.ObjectStoreReader
    return DataFrame(reader.RayDatasetToDataFrame(spark._jsparkSession, rdd, schema.json()), spark)


def _dataframe_from_refs(spark: Any, refs: list[Any], schema: Any) -> Any:
    """RayDP's object-store reader (``spark.backend: raydp``), with Arrow batches instead
    of pandas in between.

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
        if _untravelled(field.dataType):
            text = field.dataType.simpleString()
            raise PlanError(
                f"from_spark '{name}': column '{field.name}' has type {text}, which cannot go "
                "through Arrow; convert it (to a string, or a number of months for a "
                "year-month interval) before handing the DataFrame in"
            )


def check_unique_names(schema: Any, name: str) -> None:
    """Reject, naming it, a column name the DataFrame has twice (``a.join(b, a.k == b.id)``
    when both have an ``id``): Ray stores no Arrow table with two columns of one name."""
    seen: set[str] = set()
    for field in schema.fields:
        if field.name in seen:
            raise PlanError(
                f"from_spark '{name}': the DataFrame has two columns named '{field.name}'; "
                "rename one before handing it in (df.toDF(...) with distinct names, or an "
                "alias in the select)"
            )
        seen.add(field.name)


def _untravelled(t: Any) -> bool:
    from pyspark.sql.types import ArrayType, MapType, StructType, UserDefinedType

    if type(t).__name__ in _UNSUPPORTED or isinstance(t, UserDefinedType):
        return True
    if isinstance(t, ArrayType):
        return _untravelled(t.elementType)
    if isinstance(t, MapType):
        return _untravelled(t.keyType) or _untravelled(t.valueType)
    if isinstance(t, StructType):
        return any(_untravelled(f.dataType) for f in t.fields)
    return False


def handover_types(df: Any) -> Any:
    """``df`` with its columns of a type Arrow cannot carry out of PySpark 3.5 turned into
    what PySpark itself gives for them: a year-month interval as its number of months
    (``collect()``'s ``int``), a calendar interval (``make_interval``, which PySpark cannot
    even collect) as Spark's string of it (``df.show()``'s ``1 years 2 months ...``).
    Read from the JVM's schema: PySpark cannot parse one holding a calendar interval."""
    fields = list(df._jdf.schema().fields())
    items: list[str] = []
    changed = False
    for field in fields:
        name = "`" + str(field.name()).replace("`", "``") + "`"
        kind = str(field.dataType().getClass().getSimpleName()).rstrip("$")
        if kind == "CalendarIntervalType":
            items.append(f"CAST({name} AS STRING) AS {name}")
        elif kind == "YearMonthIntervalType":
            items.append(f"CAST(CAST({name} AS INTERVAL MONTH) AS INT) AS {name}")
        else:
            items.append(name)
            continue
        changed = True
    if not changed:
        return df
    out = df.selectExpr(*items)
    hint = vars(df).get(SIZE_HINT)  # not getattr: it parses the schema PySpark cannot
    if hint is not None:
        setattr(out, SIZE_HINT, hint)
    return out


def spark_typed(table: pa.Table, schema: Any) -> pa.Table:
    """``table`` with its day-time interval columns (``schema``: the Spark ``StructType``
    the rows are) as the ``duration[us]`` Spark's Arrow gives: a column that went through
    DuckDB comes out of it as ``month_day_nano_interval`` (DuckDB's ``INTERVAL``); and its
    void columns as Arrow's ``null`` type (DuckDB has no such column type)."""
    if schema is None or len(schema.fields) != table.num_columns:
        return table
    for i, field in enumerate(schema.fields):
        column = table.column(i)
        if _holds_interval(column.type) and _spark_has_interval(field.dataType):
            chunks = [_durations(chunk, field.dataType) for chunk in column.chunks]
            kind = chunks[0].type if chunks else _duration_type(column.type)
            table = table.set_column(
                i, table.schema.field(i).with_type(kind), pa.chunked_array(chunks, kind)
            )
        elif type(field.dataType).__name__ == "NullType" and column.type != pa.null():
            # a void column (``SELECT NULL``): all nulls, which DuckDB typed as an integer
            table = table.set_column(
                i, table.schema.field(i).with_type(pa.null()), pa.nulls(len(column))
            )
    return table


def _holds_interval(t: pa.DataType) -> bool:
    """Whether ``t`` is, or nests in lists and structs, DuckDB's ``INTERVAL``."""
    if t == pa.month_day_nano_interval():
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _holds_interval(t.value_type)
    if pa.types.is_struct(t):
        return any(_holds_interval(t.field(i).type) for i in range(t.num_fields))
    return False


def _spark_has_interval(kind: Any) -> bool:
    """Whether the Spark type ``kind`` is, or nests, a day-time interval."""
    name = type(kind).__name__
    if name == "DayTimeIntervalType":
        return True
    if name == "ArrayType":
        return _spark_has_interval(kind.elementType)
    if name == "StructType":
        return any(_spark_has_interval(f.dataType) for f in kind.fields)
    return False


def _duration_type(t: pa.DataType) -> pa.DataType:
    """``t`` with every ``INTERVAL`` as ``duration[us]``."""
    if t == pa.month_day_nano_interval():
        return pa.duration("us")
    if pa.types.is_list(t):
        return pa.list_(_duration_type(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct(
            [t.field(i).with_type(_duration_type(t.field(i).type)) for i in range(t.num_fields)]
        )
    return t


def _durations(array: pa.Array, kind: Any) -> pa.Array:
    """``array`` (of the Spark type ``kind``) with the day-time intervals DuckDB made
    ``INTERVAL`` as ``duration[us]`` again, in lists and structs too (``approx_percentile``
    of intervals is an array of them)."""
    name = type(kind).__name__
    if name == "DayTimeIntervalType" and array.type == pa.month_day_nano_interval():
        return _duration(array)
    if name == "ArrayType" and pa.types.is_list(array.type):
        if array.offset:  # from_arrays takes no sliced offsets with a null bitmap
            array = pa.concat_arrays([array])  # a copy from offset 0
        values = _durations(array.values, kind.elementType)
        offsets = array.offsets
        mask = array.is_null() if array.null_count else None
        return pa.ListArray.from_arrays(offsets, values, mask=mask)
    if name == "StructType" and pa.types.is_struct(array.type):
        children = [_durations(array.field(i), f.dataType) for i, f in enumerate(kind.fields)]
        names = [array.type.field(i).name for i in range(array.type.num_fields)]
        mask = array.is_null() if array.null_count else None
        return pa.StructArray.from_arrays(children, names=names, mask=mask)
    return array


def _duration(array: pa.Array) -> pa.Array:
    """A ``month_day_nano_interval`` array (months 0, as a day-time interval's are) as
    ``duration[us]``: the 16-byte values read as NumPy records, no row in Python."""
    import numpy as np

    layout = np.dtype([("months", "<i4"), ("days", "<i4"), ("nanos", "<i8")])
    values = np.frombuffer(array.buffers()[1], dtype=layout, count=array.offset + len(array))[
        array.offset :
    ]
    micros = (
        values["months"].astype(np.int64) * (30 * 86_400_000_000)
        + values["days"].astype(np.int64) * 86_400_000_000
        + values["nanos"] // 1000
    )
    mask = array.is_null().to_numpy(zero_copy_only=False) if array.null_count else None
    return pa.array(micros.view("m8[us]"), pa.duration("us"), mask=mask)


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
