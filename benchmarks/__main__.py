"""Run every system on the same seeded data in one process and print ratios.

    python -m benchmarks                      # default sizes, finishes in ~10 minutes on 2 cores
    python -m benchmarks --rows 2e6,1e7 --runs 3 --workloads agg,repartition,modes
    python -m benchmarks --workloads mainjob --scales 0.1,1,5,20 --name main-job
    python -m benchmarks --workloads failover --rows 1e7 --runs 3 --name issue11-failover
    python -m benchmarks --workloads batch --runs 3 --name issue12-batch
    python -m benchmarks --workloads cache --runs 3 --name issue13-cache
    python -m benchmarks --workloads modes,skew --rows 1e7 --runs 5 --name issue14
    python -m benchmarks --workloads tpch,kernels,tight-memory --runs 3 --name issue23

Workloads (``--workloads``, comma-separated; default all but ``failover``, ``batch``,
``cache``, ``skew``, ``tpch``, ``kernels`` and ``tight-memory``):

* ``agg``, ``repartition``: workloads 1 and 2 at ``--rows`` x ``--distributions``,
  the engine (``--engine-modes``) against Ray Data, Spark and the bounds;
* ``modes``: workload 3, a 3-stage job in all four engine modes and under
  ``shuffle.default_mode: auto``, ample and scarce slots;
* ``spark``: Spark as a peer in 1 and 2, and Spark in / Spark out against RayDP's own
  conversions, in the shared session (Spark: 1 executor, 1 core);
* ``mainjob``: workload 4, the main job (``examples/main_job.py``) against plain PySpark
  at ``--scales`` (TPC-H-like scale factors; 1.0 = 1.65M input rows), in its own session
  from ``configs/main.yaml`` with Spark on one executor of both cores; see
  ``benchmarks/mainjob.py``.  The default scales (0.1,1,5) fit the default run's time;
  the issue-level run is ``--scales 0.1,1,5,20``;
* ``failover``: issue 11, an aggregation of the first ``--rows`` with one executor killed
  mid-job and without, per mode (``--failover-modes``) and shuffle service
  (``--failover-services``), in its own Ray; then the happy path against the engine before
  issue 11 (``--failover-baseline``, a git worktree run side by side, ``none`` skips it);
  see ``benchmarks/failover.py``.  Only when named: it would take the default run past
  its 10 minutes;
* ``batch``: issue 12, the batch operators within a memory budget: global sort at
  ``--batch-rows``, hash and sort-merge join and co_group at ``--batch-join-rows``, the
  engine with ample operator memory and with a quarter of a task's input, against Spark
  (one executor of both cores, AQE off) and Ray Data (``--batch-peers``), and co_group
  against the same figures computed record at a time (``--batch-baseline-rows`` per
  side, scaled per row); in its own session and Ray, see ``benchmarks/batch_operators.py``.
  Only when named (20-40 minutes at the default sizes);
* ``cache``: issue 13, five queries (filter, top-k, join with a dimension, regroup,
  sort) over one prepared aggregation of ``--cache-rows`` facts, with and without the
  engine's cache (``stream.cache()``, ``job.from_cache``), against Spark's
  ``df.cache()`` and Ray Data's ``materialize()`` (``--cache-peers``); in its own
  session and Ray, see ``benchmarks/cache.py``.  Only when named;
* ``skew``: issue 14, FLIP-44's local aggregation: the sum and count of ``--skew-rows``
  Zipf 1.2 keys with ``combine=False``, the default combiner and ``local_key_by`` (flushing
  every ``--skew-flush-rows``), in the shared session; the wall time and the most rows any
  one receiver got, against ``combine=False``; see ``benchmarks/skew.py``.  Only when named;
* ``tpch``: issue 23, TPC-H Q1, Q3 and Q6 at ``--tpch-scale`` (tpchgen-cli Parquet, made
  once into ``benchmarks/.data/``), the engine (``from_parquet``, its operators and
  ``sql``, at ``--tpch-parallelism``) against DuckDB with 2 threads (also the oracle every
  answer is checked against) and Spark SQL through RayDP on both cores (``--tpch-peers``);
  in its own session and Ray, see ``benchmarks/tpch.py``.  Only when named;
* ``kernels``: issue 23, a group-by, a sort and two joins of ``--kernel-rows`` with
  ``operators.kernel: duckdb`` against ``arrow``, checked against pyarrow; in its own
  Ray, see ``benchmarks/kernels.py``.  Only when named;
* ``tight-memory``: issue 23, an aggregate of ``--tight-rows`` (half as many keys) with
  ``operators.memory: 16 MiB`` and the duckdb kernel: checked against pyarrow, its
  task's peak memory against its memory; see ``benchmarks/tight_memory.py``.  Only when
  named.

Writes ``benchmarks/results/<name>.json`` (workload 4's per-scale table under
``main_job``, the failover tables under ``failover``, issue 12's figures and targets
under ``batch``, issue 13's under ``cache``, issue 14's skew figures under ``skew``) and
``<name>.png`` (issue 23's under ``tpch``, ``kernels`` and ``tight_memory``).  Not part
of the test suite: absolute times drift on a shared machine, the ratios printed here
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

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import ray

import hybrid_shuffle as hs
from benchmarks import (
    batch_operators,
    cache,
    failover,
    kernels,
    mainjob,
    skew,
    systems,
    tight_memory,
    tpch,
    tpch_data,
)
from benchmarks.data import blocks, make_table
from benchmarks.harness import CpuBusy, Measurement, measure
from benchmarks.report import print_table, ratios, write_chart

RESULTS = Path(__file__).resolve().parent / "results"
ENGINE_MODES = ["pipelined", "blocking", "hybrid-selective", "hybrid-full"]
WORKLOADS = (
    "agg",
    "repartition",
    "modes",
    "spark",
    "mainjob",
    "failover",
    "batch",
    "cache",
    "skew",
    "tpch",
    "kernels",
    "tight-memory",
)
DEFAULT_WORKLOADS = ("agg", "repartition", "modes", "spark", "mainjob")
#: the workloads that run in (or, for modes, next to) the shared benchmark session
SHARED_SESSION = {"agg", "repartition", "modes", "spark", "skew"}


def parse_rows(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x.strip()]


def parse_count(text: str) -> int:
    """``"1e7"`` -> ``10000000`` (argparse ``type``)."""
    try:
        count = int(float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if count < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return count


def parse_peers(text: str) -> list[str]:
    """``--batch-peers``: ``spark,ray-data``, one of them, or ``none``."""
    names = [x.strip() for x in text.split(",") if x.strip() and x.strip() != "none"]
    unknown = set(names) - set(batch_operators.PEERS)
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown peer(s) {', '.join(sorted(unknown))}; choose from "
            f"{', '.join(batch_operators.PEERS)} or none"
        )
    return names


def parse_tpch_peers(text: str) -> list[str]:
    """``--tpch-peers``: ``duckdb,spark``, one of them, or ``none``."""
    names = [x.strip() for x in text.split(",") if x.strip() and x.strip() != "none"]
    unknown = set(names) - set(tpch.PEERS)
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown peer(s) {', '.join(sorted(unknown))}; choose from "
            f"{', '.join(tpch.PEERS)} or none"
        )
    return names


def parse_workloads(text: str) -> set[str]:
    """The ``--workloads`` names, checked: a typo would otherwise silently run nothing."""
    names = {x.strip() for x in text.split(",") if x.strip()}
    unknown = names - set(WORKLOADS)
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown workload(s) {', '.join(sorted(unknown))}; choose from {', '.join(WORKLOADS)}"
        )
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--rows", default="2e6,1e7", type=parse_rows)
    parser.add_argument("--distributions", default="uniform,zipf")
    parser.add_argument(
        "--workloads",
        default=",".join(DEFAULT_WORKLOADS),
        type=parse_workloads,
        help=f"comma-separated, of {', '.join(WORKLOADS)} (default: all but failover, batch, "
        "cache, skew, tpch, kernels, tight-memory)",
    )
    parser.add_argument(
        "--scales",
        default=",".join(f"{s:g}" for s in mainjob.DEFAULT_SCALES),
        type=mainjob.parse_scales,
        help="scale factors of the mainjob workload (the issue-level run: 0.1,1,5,20)",
    )
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
    parser.add_argument(
        "--failover-modes", default=",".join(failover.MODES), help="modes of the failover workload"
    )
    parser.add_argument(
        "--failover-services",
        default=",".join(failover.SERVICES),
        help="shuffle services of the failover workload",
    )
    parser.add_argument(
        "--failover-baseline",
        default=failover.BASELINE,
        help="commit whose engine the failover workload's happy path is paired with ('none': skip)",
    )
    parser.add_argument(
        "--failover-pairs", type=int, default=9, help="paired runs per mode against the baseline"
    )
    parser.add_argument(
        "--batch-rows",
        default="2e6,1e7,4e7",
        type=parse_rows,
        help="global sort sizes of the batch workload",
    )
    parser.add_argument(
        "--batch-join-rows",
        default="1e7",
        type=parse_count,
        help="rows of each fact table of the batch workload's joins and co_group",
    )
    parser.add_argument(
        "--batch-baseline-rows",
        default="1e6",
        type=parse_count,
        help="rows per side of the record-at-a-time co_group (scaled per row)",
    )
    parser.add_argument(
        "--batch-peers",
        default=",".join(batch_operators.PEERS),
        type=parse_peers,
        help="peers of the batch workload: spark, ray-data, or none",
    )
    parser.add_argument(
        "--cache-rows",
        default="1e7",
        type=parse_count,
        help="fact rows of the cache workload (aggregated into rows / 10 keys)",
    )
    parser.add_argument(
        "--cache-peers",
        default=",".join(cache.PEERS),
        type=parse_peers,
        help="peers of the cache workload: spark, ray-data, or none",
    )
    parser.add_argument(
        "--skew-rows", default="1e7", type=parse_count, help="rows of the skew workload"
    )
    parser.add_argument(
        "--skew-flush-rows",
        default=str(skew.DEFAULT_FLUSH_ROWS),
        type=parse_count,
        help="flush_rows of the skew workload's local aggregate",
    )
    parser.add_argument(
        "--tpch-scale", default=tpch.DEFAULT_SCALE, type=float, help="TPC-H scale factor"
    )
    parser.add_argument(
        "--tpch-parallelism",
        default=tpch.DEFAULT_PARALLELISM,
        type=parse_count,
        help="subtasks per vertex of the engine's TPC-H queries",
    )
    parser.add_argument(
        "--tpch-peers",
        default=",".join(tpch.PEERS),
        type=parse_tpch_peers,
        help="peers of the tpch workload: duckdb, spark, or none (DuckDB is the oracle anyway)",
    )
    parser.add_argument(
        "--tpch-data",
        default=str(tpch_data.CACHE),
        help="folder of the tpch workload's Parquet caches (git-ignored by default)",
    )
    parser.add_argument(
        "--kernel-rows", default="1e7", type=parse_count, help="rows of the kernels workload"
    )
    parser.add_argument(
        "--tight-rows", default="4e7", type=parse_count, help="rows of the tight-memory workload"
    )
    args = parser.parse_args(argv)
    workloads: set[str] = args.workloads
    distributions = args.distributions.split(",")
    modes = args.engine_modes.split(",")
    config = systems.session_config(args.blocks, args.object_store)
    results: list[Measurement] = []
    started = time.time()
    main_job: list[dict[str, Any]] = []
    skew_summary: dict[str, Any] | None = None
    main_job_config = mainjob.session_config() if "mainjob" in workloads else {}
    if workloads & SHARED_SESSION:
        with hs.Session(config, slots=systems.SLOTS) as session:
            spark = _spark(session) if "spark" in workloads else None
            for rows in args.rows if workloads & {"agg", "repartition"} else []:
                for dist in distributions:
                    data = blocks(make_table(rows, dist), args.blocks)
                    if "agg" in workloads:
                        results += _aggregation(session, spark, data, rows, dist, args.runs, modes)
                    if "repartition" in workloads:
                        results += _repartition(session, spark, data, rows, dist, args.runs, modes)
            if "skew" in workloads:
                measured, skew_summary = skew.run(
                    session, args.skew_rows, args.blocks, args.runs, args.skew_flush_rows
                )
                results += measured
            if spark is not None:
                for rows in args.rows:
                    results += _spark_io(session, spark, rows, args.runs)
            if "modes" in workloads:  # inside, as before: its sessions join this Ray
                results += _modes(config, args.rows[0], args.runs)
    if "mainjob" in workloads:  # its own session and Ray: the shared one is closed by now
        measured, main_job = mainjob.run(args.scales, args.runs, main_job_config)
        results += measured
    batch_summary: dict[str, Any] | None = None
    if "batch" in workloads:  # its own session and Ray, like mainjob
        measured, batch_summary = batch_operators.run(
            args.batch_rows,
            args.batch_join_rows,
            args.batch_baseline_rows,
            args.runs,
            object_store=args.object_store,
            peers=args.batch_peers,
        )
        results += measured
    cache_summary: dict[str, Any] | None = None
    if "cache" in workloads:  # its own session and Ray, like batch
        measured, cache_summary = cache.run(
            args.cache_rows, args.runs, object_store=args.object_store, peers=args.cache_peers
        )
        results += measured
    tpch_summary: dict[str, Any] | None = None
    if "tpch" in workloads:  # its own session and Ray, like batch
        measured, tpch_summary = tpch.run(
            args.tpch_scale,
            args.runs,
            args.tpch_parallelism,
            object_store=args.object_store,
            peers=args.tpch_peers,
            data=Path(args.tpch_data),
        )
        results += measured
    kernels_summary: dict[str, Any] | None = None
    if "kernels" in workloads:  # its own sessions and Ray
        measured, kernels_summary = kernels.run(
            args.kernel_rows, args.runs, object_store=args.object_store
        )
        results += measured
    tight_summary: dict[str, Any] | None = None
    if "tight-memory" in workloads:  # its own session and Ray
        measured, tight_summary = tight_memory.run(
            args.tight_rows, args.runs, object_store=args.object_store
        )
        results += measured
    failover_summary: dict[str, Any] | None = None
    if "failover" in workloads:  # its own Ray: every session above is closed by now
        from hybrid_shuffle.sizes import parse_size

        measured, failover_summary = failover.run(
            args.rows[0],
            args.runs,
            modes=args.failover_modes.split(","),
            services=args.failover_services.split(","),
            block_count=args.blocks,
            object_store=parse_size(args.object_store, "--object-store"),
            baseline=None if args.failover_baseline == "none" else args.failover_baseline,
            pairs=args.failover_pairs,
        )
        results += measured
    payload = {
        "name": args.name,
        "started": started,
        "seconds": time.time() - started,
        "machine": {"cpus": 2, "python": platform.python_version(), "ray": ray.__version__},
        "args": {k: (v if not isinstance(v, set) else sorted(v)) for k, v in vars(args).items()},
        "results": [m.to_json() for m in results],
        "ratios": ratios(results),
    }
    if "mainjob" in workloads:
        payload["main_job"] = {"config": main_job_config, "scales": main_job}
    if failover_summary is not None:
        payload["failover"] = failover_summary
    if batch_summary is not None:
        payload["batch"] = batch_summary
    if cache_summary is not None:
        payload["cache"] = cache_summary
    if skew_summary is not None:
        payload["skew"] = skew_summary
    if tpch_summary is not None:
        payload["tpch"] = tpch_summary
    if kernels_summary is not None:
        payload["kernels"] = kernels_summary
    if tight_summary is not None:
        payload["tight_memory"] = tight_summary
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps(payload, indent=2))
    write_chart(results, out / f"{args.name}.png")
    print_table([m for m in results if m.workload not in failover.OWN_WORKLOADS])
    mainjob.print_summary(main_job)
    batch_operators.print_summary(batch_summary)
    cache.print_summary(cache_summary)
    skew.print_summary(skew_summary)
    tpch.print_summary(tpch_summary)
    kernels.print_summary(kernels_summary)
    tight_memory.print_summary(tight_summary)
    failover.print_summary(failover_summary)
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


def _modes(config: dict[str, Any], rows: int, runs: int) -> list[Measurement]:
    """3-stage job, parallelism 8, on 8 slots (ample) and 2 slots (scarce), in every mode
    and under ``shuffle.default_mode: auto`` (issue 14: within 1.1x of the best mode
    picked by hand, per slot count).  Every mode's first run is checked against pyarrow."""
    out = []
    table = make_table(rows, "uniform")
    data = blocks(table, 8)
    expected = table.group_by("k").aggregate([("v", "sum")])
    expected = np.sort(pc.multiply(expected["v_sum"], 2.0).to_numpy())
    auto = {**config, "shuffle": {**config.get("shuffle", {}), "default_mode": "auto"}}
    for slots in (8, 2):
        measured: dict[str, Measurement] = {}
        with hs.Session(auto, slots=slots) as session:
            for mode in [*ENGINE_MODES, "auto"]:
                name = f"engine {mode} ({slots} slots)"
                m = Measurement("3-stage modes", name, rows, "uniform")
                if mode == "pipelined" and slots < 8:
                    m.error = "does not fit: the pipelined region needs 8 slots"
                    out.append(m)
                    continue
                runner = systems.engine_three_stage(session, None if mode == "auto" else mode, 8)
                checked = _checked_once(runner, expected)
                busy = CpuBusy()  # over the warm-up and the timed runs
                busy.start()
                out.append(measure(m, lambda checked=checked: checked(data), runs))
                busy.stop()
                if busy.share is not None:
                    m.note = f"CPUs busy {busy.share:.0%}"
                measured[mode] = m
        timed = [m for mode, m in measured.items() if mode != "auto" and m.seconds]
        if timed and measured["auto"].seconds:
            best = min(timed, key=lambda m: m.median)
            ratio = measured["auto"].median / best.median
            verdict = f"auto / best hand-picked ({best.system}): {ratio:.2f}x (target <= 1.1x)"
            measured["auto"].note = "; ".join(filter(None, [measured["auto"].note, verdict]))
            print(f"[bench] {slots} slots: {verdict}", file=sys.stderr, flush=True)
    return out


def _checked_once(runner: systems.Runner, expected: Any) -> systems.Runner:
    """``runner``, whose first result must equal pyarrow's (the sorted sums)."""
    first = [True]

    def run(data: list[pa.Table]) -> Any:
        result = runner(data)
        if first[0]:
            first[0] = False
            got = result["v_sum"].to_numpy()
            ordered = bool(np.all(got[1:] >= got[:-1]))
            if not ordered or len(got) != len(expected) or not np.allclose(got, expected):
                raise AssertionError("the 3-stage job's result differs from pyarrow's sorted sums")
        return result

    return run


if __name__ == "__main__":
    sys.exit(main())
