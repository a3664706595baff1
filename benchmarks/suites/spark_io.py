"""Spark in and Spark out (issue 10): a cached Spark DataFrame into the engine
(``from_spark``) against RayDP's ``ray.data.from_spark``, and an Arrow table to Spark's
noop sink (``to_spark``) against Ray Data's ``to_spark``; Spark on one executor of one
core (RayDP needs a spare Ray CPU).  Checked: the rows each side moved, against the
DataFrame's count."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import ray

import hybrid_shuffle as hs
from benchmarks import systems
from benchmarks.harness import Measurement, measure
from benchmarks.suite import Context, Outcome, Suite, mark_checked, object_store


def _rows_in(refs: list[Any], want: int) -> list[Any]:
    got = sum(t.num_rows for t in ray.get(refs))
    if got != want:
        raise AssertionError(f"{got:,} rows arrived, the DataFrame has {want:,}")
    return refs


def run(ctx: Context) -> Outcome:
    rows = int(ctx.scale * 1e6)
    with hs.Session(
        systems.session_config(object_store=object_store(ctx.scale)), slots=systems.SLOTS
    ) as session:
        spark = session.spark
        df = systems.spark_frame(spark, rows)
        table = pa.Table.from_batches(df._collect_as_arrow())
        from_engine = systems.engine_from_spark(session, df)
        from_ray = systems.ray_data_from_spark(df)
        cases = [
            ("spark in", "engine from_spark", "Spark converts to Arrow, driver puts",
             lambda: _rows_in(from_engine([]), rows), "engine"),
            ("spark in", "ray.data.from_spark (RayDP)", "", lambda: _rows_in(from_ray([]), rows),
             "ray-data"),
            ("spark out", "engine to_spark", "to the noop sink",
             lambda: systems.engine_to_spark(session, table)([]), "engine"),
            ("spark out", "ray.data to_spark (RayDP)", "to the noop sink",
             lambda: systems.ray_data_to_spark(session, table)([]), "ray-data"),
        ]  # fmt: skip
        out = [
            measure(Measurement(case, system, rows, "uniform", note=note), fn, ctx.runs)
            for case, system, note, fn, who in cases
            if who in ctx.systems
        ]
        df.unpersist()
    mark_checked(out, lambda m: m.workload == "spark in")
    return Outcome(out, {"rows": rows})


SUITE = Suite(
    name="spark-io",
    description="Spark in / Spark out against RayDP's own conversions",
    issue="issue 10",
    scale_unit="million rows",
    default_scale=10,
    tiny_scale=0.02,
    systems=("engine", "ray-data"),
    oracle="the DataFrame's row count (Spark in)",
    run=run,
)
