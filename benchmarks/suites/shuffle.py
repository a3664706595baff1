"""Workloads 1 and 2 (issues 1-10): a hash aggregation and a hash repartition of
``k``/``v`` rows, uniform and Zipf keys, the engine (blocking, hybrid-selective) against
Ray Data, raw ``ray.put``/``ray.get`` (the object-store bound), pyarrow in one process
(the compute bound) and Spark (one executor of one core: RayDP needs a spare Ray
CPU).  The engine's answers are checked against pyarrow: the aggregate's sums key for
key, the repartition's rows and key sum."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import hybrid_shuffle as hs
from benchmarks import systems
from benchmarks.data import blocks, make_table
from benchmarks.harness import Measurement, measure
from benchmarks.suite import Context, Outcome, Suite, mark_checked, object_store

MODES = ("blocking", "hybrid-selective")
DISTRIBUTIONS = ("uniform", "zipf")
AGG, REPARTITION = "hash-aggregation", "hash-repartition"


def checked(runner: systems.Runner, check: Any) -> systems.Runner:
    """``runner``, whose every answer goes through ``check`` (raising on a mismatch)."""

    def run(data: list[pa.Table]) -> Any:
        result = runner(data)
        check(result)
        return result

    return run


def _check_agg(table: pa.Table) -> Any:
    want = table.group_by("k").aggregate([("v", "sum")]).sort_by("k")

    def check(got: pa.Table) -> None:
        got = got.sort_by("k")
        same = got["k"].equals(want["k"]) and np.allclose(got["v_sum"], want["v_sum"])
        if not same:
            raise AssertionError("the aggregate differs from pyarrow's")

    return check


def _check_repartition(table: pa.Table) -> Any:
    want = (table.num_rows, pc.sum(table["k"]).as_py())

    def check(got: pa.Table) -> None:
        if (pc.sum(got["rows"]).as_py(), pc.sum(got["k_sum"]).as_py()) != want:
            raise AssertionError("the repartition lost or duplicated rows")

    return check


def run(ctx: Context) -> Outcome:
    rows = int(ctx.scale * 1e6)
    out: list[Measurement] = []
    with hs.Session(
        systems.session_config(object_store=object_store(ctx.scale)), slots=systems.SLOTS
    ) as session:
        spark = _spark(session) if "spark" in ctx.systems else None
        for dist in DISTRIBUTIONS:
            table = make_table(rows, dist)
            data = blocks(table, 8)
            out += _cases(ctx, session, spark, data, AGG, dist, _check_agg(table))
            out += _cases(ctx, session, spark, data, REPARTITION, dist, _check_repartition(table))
    mark_checked(out, lambda m: m.system.startswith("engine"))
    return Outcome(out, {"rows": rows, "modes": list(MODES)})


def _spark(session: hs.Session) -> Any:
    try:
        return session.spark
    except Exception as e:  # a missing peer is a result to report, not a crash
        print(f"spark peer skipped: {e}", file=sys.stderr)
        return None


def _cases(ctx, session, spark, data, case, dist, check) -> list[Measurement]:  # type: ignore[no-untyped-def]
    rows, runs = sum(b.num_rows for b in data), ctx.runs
    engine = systems.engine_aggregate if case == AGG else systems.engine_repartition
    out = []
    for mode in MODES if "engine" in ctx.systems else ():
        job = checked(engine(session, mode), check)
        out.append(
            measure(Measurement(case, f"engine {mode}", rows, dist), lambda j=job: j(data), runs)
        )
    peers: list[tuple[str, str, str, Any]] = [
        ("ray-data", "ray data", "groupby(num_partitions=8).sum, SHUFFLE_V2 default",
         systems.ray_data_aggregate) if case == AGG else
        ("ray-data", "ray data", "repartition(8, keys=['k']).materialize()",
         systems.ray_data_repartition),
        ("pyarrow", "pyarrow group_by (1 process)", "", systems.pyarrow_group_by) if case == AGG
        else ("pyarrow", "pyarrow partition (compute bound)", "", systems.pyarrow_partition),
    ]  # fmt: skip
    if case == REPARTITION:
        peers.append(("ray-put", "ray.put+ray.get (object store bound)", "", systems.raw_put_get))
    for name, system, note, fn in peers:
        if name in ctx.systems:
            m = Measurement(case, system, rows, dist, note=note)
            out.append(measure(m, lambda fn=fn: fn(data), runs))
    if spark is not None:
        make = systems.spark_aggregate if case == AGG else systems.spark_repartition
        df, spark_run = make(spark, data)
        note = "groupBy().agg()" if case == AGG else "repartition(8, 'k')"
        m = Measurement(case, "spark", rows, dist, note=f"{note} to noop, cached input")
        out.append(measure(m, lambda: spark_run(data), runs))
        df.unpersist()
    return out


SUITE = Suite(
    name="shuffle",
    description="hash aggregation and repartition vs Ray Data, ray.put/get, pyarrow, Spark",
    issue="issues 1-10",
    scale_unit="million rows",
    default_scale=10,
    tiny_scale=0.02,
    systems=("engine", "ray-data", "ray-put", "pyarrow", "spark"),
    default_systems=("engine", "ray-data", "ray-put", "pyarrow"),
    oracle="pyarrow (aggregate sums; repartition rows and key sum)",
    run=run,
)
