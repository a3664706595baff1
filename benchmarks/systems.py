"""The systems a workload runs on: the engine and its peers, each a callable.

Every callable takes the same list of blocks (pyarrow Tables already in the
driver) and does the whole workload, including putting the blocks into the
object store where the system would, so that all of them pay the same input
cost.  Results stay where each system naturally leaves them: Ray Data's
``materialize()`` keeps blocks in the object store; the engine and Spark write
to a discarding sink (Spark's ``noop`` format), except for aggregation, whose
small result every system returns to the driver.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import ray

import hybrid_shuffle as hs
from hybrid_shuffle.shuffle.partitioner import hash_partition_ids, split_by_ids

PARTITIONS = 8
#: executor slots of the benchmark session (more than PARTITIONS: producers and consumers)
SLOTS = 10
Runner = Callable[[list[pa.Table]], Any]


def session_config(blocks: int = 8, object_store: str = "3 GiB") -> dict[str, Any]:
    """The session every engine measurement runs in (the profiler uses it too)."""
    return {
        "parallelism": blocks,
        "ray": {"num_cpus": 2, "object_store_memory": object_store},
        "shuffle": {"buffer_size": "8 MiB", "memory_budget": "1 GiB"},
        # one Spark core: RayDP's executor holds a Ray CPU per core, and its from_spark needs
        # one left over (benchmarks/spark_handover.py); from_spark caches the Arrow bytes in
        # the executor: 1 GiB runs out at 10M rows
        "spark": {"executors": 1, "executor_cores": 1, "executor_memory": "2 GiB", "prewarm": True},
    }


def discard(batch: pa.Table) -> pa.Table:
    """The sink of a repartition: one row of what the batch held (its rows, its keys'
    sum), so the run can be checked without bringing the rows back."""
    return pa.table({"rows": [batch.num_rows], "k_sum": [pc.sum(batch["k"]).as_py() or 0]})


def engine_aggregate(session: hs.Session, mode: str) -> Runner:
    def run(blocks: list[pa.Table]) -> Any:
        job = session.job(f"bench-agg-{mode}")
        source = job.from_arrow(blocks, name="blocks", parallelism=len(blocks))
        keyed = source.key_by("k", edge="by_k", mode=mode, partitions=PARTITIONS)
        return keyed.aggregate({"v": "sum"}, name="sum").to_arrow()

    return run


def engine_repartition(session: hs.Session, mode: str) -> Runner:
    def run(blocks: list[pa.Table]) -> Any:
        job = session.job(f"bench-repartition-{mode}")
        source = job.from_arrow(blocks, name="blocks", parallelism=len(blocks))
        keyed = source.key_by("k", edge="by_k", mode=mode, partitions=PARTITIONS)
        return keyed.map_batches(discard, name="sink").to_arrow()

    return run


def engine_three_stage(session: hs.Session, mode: str | None, parallelism: int) -> Runner:
    """source -> map -> hash -> aggregate -> range -> sort, all edges in ``mode`` (None:
    the session's ``shuffle.default_mode``, which the planner may pick per edge)."""

    def run(blocks: list[pa.Table]) -> Any:
        job = session.job(f"bench-3stage-{mode or 'default'}")
        source = job.from_arrow(blocks, name="blocks", parallelism=parallelism)
        doubled = source.map_batches(
            lambda t: t.set_column(1, "v", pa.array(t["v"].to_numpy() * 2.0)), name="map"
        )
        totals = doubled.key_by("k", edge="by_k", mode=mode, partitions=parallelism).aggregate(
            {"v": "sum"}, name="agg"
        )
        return totals.sort("v_sum", edge="to_sort", mode=mode, partitions=parallelism).to_arrow()

    return run


def ray_data_aggregate(blocks: list[pa.Table]) -> Any:
    ds = ray.data.from_arrow(blocks)
    return ds.groupby("k", num_partitions=PARTITIONS).sum("v").to_arrow_refs()


def ray_data_repartition(blocks: list[pa.Table]) -> Any:
    ds = ray.data.from_arrow(blocks)
    return ds.repartition(PARTITIONS, keys=["k"]).materialize()


def raw_put_get(blocks: list[pa.Table]) -> Any:
    """The object-store bound: put every block and get it back, nothing else."""
    refs = [ray.put(b) for b in blocks]
    tables = ray.get(refs)
    return sum(t.num_rows for t in tables)


def pyarrow_partition(blocks: list[pa.Table]) -> Any:
    """The compute bound of a hash repartition, in one process."""
    rows = 0
    for block in blocks:
        parts = split_by_ids(block, hash_partition_ids(block, ["k"], PARTITIONS), PARTITIONS)
        rows += sum(p.num_rows for p in parts)
    return rows


def pyarrow_group_by(blocks: list[pa.Table]) -> Any:
    """The compute bound of the aggregation, in one process."""
    return pa.concat_tables(blocks).group_by("k").aggregate([("v", "sum")])


def spark_aggregate(spark: Any, blocks: list[pa.Table]) -> tuple[Any, Runner]:
    """Spark's own shuffle on the same data: cached and counted before timing."""
    df = _spark_frame(spark, blocks)

    def run(_: list[pa.Table]) -> Any:
        from pyspark.sql import functions as F

        df.groupBy("k").agg(F.sum("v")).write.format("noop").mode("overwrite").save()

    return df, run


def spark_repartition(spark: Any, blocks: list[pa.Table]) -> tuple[Any, Runner]:
    df = _spark_frame(spark, blocks)

    def run(_: list[pa.Table]) -> Any:
        df.repartition(PARTITIONS, "k").write.format("noop").mode("overwrite").save()

    return df, run


def _spark_frame(spark: Any, blocks: list[pa.Table]) -> Any:
    table = pa.concat_tables(blocks)
    pdf = table.to_pandas()
    spark.conf.set("spark.sql.execution.arrow.pyspark.enabled", "true")
    spark.conf.set("spark.sql.shuffle.partitions", str(PARTITIONS))
    df = spark.createDataFrame(pdf).repartition(len(blocks)).cache()
    df.count()
    return df


def checksum(table: pa.Table) -> float:
    return float(np.nansum(table.column("v_sum").to_numpy()))


def spark_frame(spark: Any, rows: int, partitions: int = 8) -> Any:
    """A cached Spark DataFrame of ``rows`` (k int64, v float64), generated by Spark."""
    df = spark.range(0, rows, numPartitions=partitions).selectExpr(
        "id % 100000 as k", "rand(42) as v"
    )
    df = df.cache()
    df.count()
    return df


def engine_from_spark(session: hs.Session, df: Any) -> Runner:
    def run(_: list[pa.Table]) -> Any:
        refs = session.bridge.to_arrow_refs(df, "bench")
        ray.wait(refs, num_returns=len(refs))
        return refs

    return run


def ray_data_from_spark(df: Any) -> Runner:
    def run(_: list[pa.Table]) -> Any:
        refs = ray.data.from_spark(df).to_arrow_refs()
        ray.wait(refs, num_returns=len(refs))
        return refs

    return run


def engine_to_spark(session: hs.Session, table: pa.Table) -> Runner:
    def run(_: list[pa.Table]) -> Any:
        return session.bridge.to_dataframe(table).write.format("noop").mode("overwrite").save()

    return run


def ray_data_to_spark(session: hs.Session, table: pa.Table) -> Runner:
    def run(_: list[pa.Table]) -> Any:
        blocks = [table.slice(i, 1_000_000) for i in range(0, table.num_rows, 1_000_000)]
        df = ray.data.from_arrow(blocks).to_spark(session.spark)
        return df.write.format("noop").mode("overwrite").save()

    return run
