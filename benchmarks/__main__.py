"""Run every system on the same seeded data in one process and print ratios.

    python -m benchmarks                      # default sizes, finishes in minutes on 2 cores
    python -m benchmarks --rows 2e6,1e7 --runs 3 --workloads agg,repartition,modes

Writes ``benchmarks/results/<name>.json`` and ``<name>.png``.  Not part of the
test suite: absolute times drift on a shared machine, the ratios printed here
(each system against the best engine mode, same run, same data) are the claim.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import ray

import hybrid_shuffle as hs
from benchmarks import systems
from benchmarks.data import blocks, make_table
from benchmarks.harness import Measurement, measure
from benchmarks.report import print_table, ratios, write_chart

RESULTS = Path(__file__).resolve().parent / "results"
ENGINE_MODES = ["pipelined", "blocking", "hybrid-selective", "hybrid-full"]


def parse_rows(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--rows", default="2e6,1e7", type=parse_rows)
    parser.add_argument("--distributions", default="uniform,zipf")
    parser.add_argument("--workloads", default="agg,repartition,modes,spark")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--engine-modes",
        default="blocking,hybrid-selective",
        help="engine modes for the aggregation and repartition workloads (all four run in "
        "the modes workload)",
    )
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--name", default="latest")
    parser.add_argument("--object-store", default="3 GiB")
    parser.add_argument("--out", default=str(RESULTS), help="folder for the JSON and PNG")
    args = parser.parse_args(argv)
    workloads = set(args.workloads.split(","))
    distributions = args.distributions.split(",")
    modes = args.engine_modes.split(",")
    config = systems.session_config(args.blocks, args.object_store)
    results: list[Measurement] = []
    started = time.time()
    with hs.Session(config, slots=systems.SLOTS) as session:
        spark = _spark(session) if "spark" in workloads else None
        for rows in args.rows:
            for dist in distributions:
                data = blocks(make_table(rows, dist), args.blocks)
                if "agg" in workloads:
                    results += _aggregation(session, spark, data, rows, dist, args.runs, modes)
                if "repartition" in workloads:
                    results += _repartition(session, spark, data, rows, dist, args.runs, modes)
        if spark is not None:
            for rows in args.rows:
                results += _spark_io(session, spark, rows, args.runs)
            results += _main_job(session, spark, args.runs)
        if "modes" in workloads:
            results += _modes(config, args.rows[0], args.runs)
    payload = {
        "name": args.name,
        "started": started,
        "seconds": time.time() - started,
        "machine": {"cpus": 2, "python": platform.python_version(), "ray": ray.__version__},
        "args": {k: (v if not isinstance(v, set) else sorted(v)) for k, v in vars(args).items()},
        "results": [m.to_json() for m in results],
        "ratios": ratios(results),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps(payload, indent=2))
    write_chart(results, out / f"{args.name}.png")
    print_table(results)
    print(f"\nwrote {out / (args.name + '.json')} and .png")
    return 0


def _spark(session: hs.Session) -> Any:
    try:
        return session.spark  # the RayDP bridge, where this version has it
    except Exception as e:
        print(f"spark peer skipped: {e}", file=sys.stderr)
        return None


def _aggregation(session, spark, data, rows, dist, runs, modes) -> list[Measurement]:  # type: ignore[no-untyped-def]
    out = []
    for mode in modes:
        m = Measurement("hash-aggregation", f"engine {mode}", rows, dist)
        out.append(
            measure(m, lambda mode=mode: systems.engine_aggregate(session, mode)(data), runs)
        )
    out.append(
        measure(
            Measurement(
                "hash-aggregation",
                "ray data",
                rows,
                dist,
                note="groupby(num_partitions=8).sum, SHUFFLE_V2 default",
            ),
            lambda: systems.ray_data_aggregate(data),
            runs,
        )
    )
    out.append(
        measure(
            Measurement("hash-aggregation", "pyarrow group_by (1 process)", rows, dist),
            lambda: systems.pyarrow_group_by(data),
            runs,
        )
    )
    if spark is not None:
        df, run = systems.spark_aggregate(spark, data)
        out.append(
            measure(
                Measurement(
                    "hash-aggregation",
                    "spark",
                    rows,
                    dist,
                    note="groupBy().agg() to noop, cached input",
                ),
                lambda: run(data),
                runs,
            )
        )
        df.unpersist()
    return out


def _repartition(session, spark, data, rows, dist, runs, modes) -> list[Measurement]:  # type: ignore[no-untyped-def]
    out = []
    for mode in modes:
        m = Measurement("hash-repartition", f"engine {mode}", rows, dist)
        out.append(
            measure(m, lambda mode=mode: systems.engine_repartition(session, mode)(data), runs)
        )
    out.append(
        measure(
            Measurement(
                "hash-repartition",
                "ray data",
                rows,
                dist,
                note="repartition(8, keys=['k']).materialize()",
            ),
            lambda: systems.ray_data_repartition(data),
            runs,
        )
    )
    out.append(
        measure(
            Measurement("hash-repartition", "ray.put+ray.get (object store bound)", rows, dist),
            lambda: systems.raw_put_get(data),
            runs,
        )
    )
    out.append(
        measure(
            Measurement("hash-repartition", "pyarrow partition (compute bound)", rows, dist),
            lambda: systems.pyarrow_partition(data),
            runs,
        )
    )
    if spark is not None:
        df, run = systems.spark_repartition(spark, data)
        out.append(
            measure(
                Measurement(
                    "hash-repartition",
                    "spark",
                    rows,
                    dist,
                    note="repartition(8, 'k') to noop, cached input",
                ),
                lambda: run(data),
                runs,
            )
        )
        df.unpersist()
    return out


def _spark_io(session, spark, rows, runs) -> list[Measurement]:  # type: ignore[no-untyped-def]
    """Spark -> engine and engine -> Spark against RayDP's own conversions, same DataFrame."""
    df = systems.spark_frame(spark, rows)
    table = pa.Table.from_batches(df._collect_as_arrow())
    out = [
        measure(
            Measurement(
                "spark in",
                "engine from_spark",
                rows,
                "uniform",
                note="Spark converts to Arrow, driver puts",
            ),
            lambda: systems.engine_from_spark(session, df)([]),
            runs,
        ),
        measure(
            Measurement("spark in", "ray.data.from_spark (RayDP)", rows, "uniform"),
            lambda: systems.ray_data_from_spark(df)([]),
            runs,
        ),
        measure(
            Measurement("spark out", "engine to_spark", rows, "uniform", note="to the noop sink"),
            lambda: systems.engine_to_spark(session, table)([]),
            runs,
        ),
        measure(
            Measurement(
                "spark out", "ray.data to_spark (RayDP)", rows, "uniform", note="to the noop sink"
            ),
            lambda: systems.ray_data_to_spark(session, table)([]),
            runs,
        ),
    ]
    df.unpersist()
    return out


def _main_job(session: hs.Session, spark: Any, runs: int) -> list[Measurement]:
    """The main job's pipeline at two scales against the same pipeline in plain PySpark.

    The engine's time is split into conversion in, engine and conversion out (to
    Spark's noop sink); medians of each part are in the measurement's note.
    """
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
    from main_job import engine_pipeline, generate, spark_pipeline

    out = []
    for scale in (0.1, 0.5):
        orders, customers = generate(spark, scale)
        orders, customers = orders.cache(), customers.cache()
        rows = orders.count() + customers.count()
        parts: dict[str, list[float]] = {"in": [], "engine": [], "out": []}

        def engine(orders: Any = orders, customers: Any = customers, parts: Any = parts) -> None:
            result = engine_pipeline(session, orders, customers).collect()
            started = time.perf_counter()
            df = session.bridge.to_dataframe(result.table)
            df.write.format("noop").mode("overwrite").save()
            parts["in"].append(result.sources_seconds)
            parts["engine"].append(result.wall_seconds - result.sources_seconds)
            parts["out"].append(time.perf_counter() - started)

        m = measure(Measurement("main job", f"engine (scale {scale})", rows, "tpch"), engine, runs)
        timed = {k: sorted(v[1:])[len(v[1:]) // 2] for k, v in parts.items() if len(v) > 1}
        m.note = ", ".join(f"{k} {v:.3f} s" for k, v in timed.items())
        out.append(m)
        out.append(
            measure(
                Measurement("main job", f"plain pyspark (scale {scale})", rows, "tpch"),
                lambda o=orders, c=customers: (
                    spark_pipeline(o, c).write.format("noop").mode("overwrite").save()
                ),
                runs,
            )
        )
        orders.unpersist()
        customers.unpersist()
    return out


def _modes(config: dict[str, Any], rows: int, runs: int) -> list[Measurement]:
    """3-stage job, parallelism 8, on 8 slots (ample) and 2 slots (scarce)."""
    out = []
    data = blocks(make_table(rows, "uniform"), 8)
    for slots in (8, 2):
        with hs.Session(config, slots=slots) as session:
            for mode in ENGINE_MODES:
                name = f"engine {mode} ({slots} slots)"
                m = Measurement("3-stage modes", name, rows, "uniform")
                if mode == "pipelined" and slots < 8:
                    m.error = "does not fit: the pipelined region needs 8 slots"
                    out.append(m)
                    continue
                runner = systems.engine_three_stage(session, mode, 8)
                out.append(measure(m, lambda runner=runner: runner(data), runs))
    return out


if __name__ == "__main__":
    sys.exit(main())
