"""Issue 14, item 6: FLIP-44's local aggregation against key skew.

**Data** (seeded, ``benchmarks.data.make_table(rows, "zipf")``): ``rows`` rows
(``--scale`` million, default 10M) of an int64 key ``k`` drawn from Zipf(1.2) and
capped at ``data.KEYS`` = 100,000 keys (key 0 holds about 18% of the rows, the
cap key 99,999 the ~9% tail beyond it) and a float64 ``v``, dealt as
8 contiguous blocks put into the object store once, untimed.

**The aggregate**, ``{"v": ["sum", "count"]}`` per ``k``, parallelism 8 on both
sides of the hash edge ``by_k`` (its mode left to the default: the output-on-EOF
rule makes it ``shuffle.batch_mode``, blocking), on the shared benchmark
session's slots, three ways in the same run:

1. ``combine=False``: every row crosses the exchange;
2. the default map-side combiner (``key_by("k").aggregate(spec)``);
3. ``local_key_by("k").aggregate(spec, flush_rows=1M)`` chained
   into the source, then ``key_by("k").aggregate()`` merging the partials.

**Measured** per variant: the wall time (a warm-up, then the median of
``--runs``, ``benchmarks.harness``); **the most rows any one receiver got**
(the hottest consumer subtask of ``by_k``: the largest ``ReadMetrics.rows`` of
the edge over the job's task reports, FLIP-44's whole argument) and the rows of
the edge in total.  Both ratios are printed against ``combine=False``; the
issue's targets: the hottest receiver at least 10x fewer rows, the wall time at
most 0.5x.

**Checked**: every run, the warm-up included, against one pyarrow
``group_by`` of the whole table in the driver (counts exactly, sums to 1e-9),
after the timed runs; a mismatch is the measurement's error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

import hybrid_shuffle as hs
from benchmarks.data import KEYS, blocks, make_table
from benchmarks.harness import Measurement, measure

__all__ = ["DEFAULT_FLUSH_ROWS", "VARIANTS", "run"]

WORKLOAD = "skew aggregation"
SPEC = {"v": ["sum", "count"]}
EDGE = "by_k"
PARALLELISM = 8
#: flush the local state after this many input rows (about twice per source subtask at 10M)
DEFAULT_FLUSH_ROWS = 1_000_000
VARIANTS = ("combine=False", "combiner", "local_key_by")
#: the issue's targets, against combine=False
HOTTEST_TARGET = 10.0
WALL_TARGET = 0.5


@dataclass
class _Runs:
    """What each run of one variant returned (checked after the timed runs)."""

    tables: list[pa.Table] = field(default_factory=list)
    hottest: list[int] = field(default_factory=list)
    edge_rows: list[int] = field(default_factory=list)


def hottest_receiver(result: hs.JobResult, edge: str) -> tuple[int, dict[int, int]]:
    """The most rows one consumer subtask of ``edge`` read, and the rows per subtask
    (a later attempt of a subtask replaces an earlier one's reads)."""
    per_subtask: dict[int, int] = {}
    for report in sorted(result.tasks, key=lambda r: r.attempt):
        for read in report.reads:
            if read.edge == edge:
                per_subtask[read.subtask] = read.rows
    return max(per_subtask.values(), default=0), per_subtask


def _job(session: hs.Session, variant: str, data: list[pa.Table], flush_rows: int) -> hs.Stream:
    job = session.job(f"bench-skew-{variant}")
    source = job.from_arrow(data, name="blocks", parallelism=PARALLELISM)
    if variant == "local_key_by":
        local = source.local_key_by("k").aggregate(SPEC, name="local", flush_rows=flush_rows)
        keyed = local.key_by("k", edge=EDGE, partitions=PARALLELISM)
        return keyed.aggregate(name="agg")
    keyed = source.key_by("k", edge=EDGE, partitions=PARALLELISM)
    return keyed.aggregate(SPEC, name="agg", combine=variant == "combiner")


def _check(got: pa.Table, expected: pa.Table) -> str | None:
    """None if ``got`` is ``expected`` row for row by key, else what differs."""
    got = got.sort_by("k")
    if got.num_rows != expected.num_rows:
        return f"{got.num_rows} keys, pyarrow has {expected.num_rows}"
    if not got.column("k").equals(expected.column("k")):
        return "the keys differ from pyarrow's"
    if not got.column("v_count").equals(expected.column("v_count")):
        return "v_count differs from pyarrow's"
    a, b = got.column("v_sum").to_numpy(), expected.column("v_sum").to_numpy()
    if not np.allclose(a, b, rtol=1e-9, atol=0):
        return f"v_sum differs from pyarrow's by up to {np.max(np.abs(a - b)):.3g}"
    return None


def run(
    session: hs.Session,
    rows: int,
    block_count: int,
    runs: int,
    flush_rows: int = DEFAULT_FLUSH_ROWS,
) -> tuple[list[Measurement], dict[str, Any]]:
    """The three variants on ``session``; the measurements and the summary
    (``payload["skew"]``)."""
    table = make_table(rows, "zipf")
    data = blocks(table, block_count)
    expected = table.group_by("k").aggregate([("v", "sum"), ("v", "count")]).sort_by("k")
    measurements: list[Measurement] = []
    figures: dict[str, dict[str, Any]] = {}
    for variant in VARIANTS:
        stream_runs = _Runs()

        def once(variant: str = variant, into: _Runs = stream_runs) -> None:
            result = _job(session, variant, data, flush_rows).collect()
            into.tables.append(result.table)
            into.hottest.append(hottest_receiver(result, EDGE)[0])
            into.edge_rows.append(result.edges[EDGE].rows)

        m = Measurement(WORKLOAD, f"engine {variant}", rows, "zipf")
        measure(m, once, runs)
        for i, got in enumerate(stream_runs.tables):
            problem = _check(got, expected)
            if problem is not None and m.error is None:
                m.error = f"run {i} does not match pyarrow: {problem}"
        hottest = max(stream_runs.hottest, default=0)
        edge_rows = max(stream_runs.edge_rows, default=0)
        m.note = f"hottest receiver {hottest:,} rows, edge {edge_rows:,} rows"
        measurements.append(m)
        figures[variant] = {
            "median_seconds": m.median if m.seconds else None,
            "seconds": m.seconds,
            "hottest_receiver_rows": hottest,
            "edge_rows": edge_rows,
            "checked_runs": len(stream_runs.tables),
            "error": m.error,
        }
    return measurements, _summary(rows, block_count, flush_rows, table, figures)


def _summary(
    rows: int,
    block_count: int,
    flush_rows: int,
    table: pa.Table,
    figures: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    keys = table.column("k")
    counts = np.bincount(keys.to_numpy(), minlength=KEYS)
    base = figures["combine=False"]
    for f in figures.values():
        ok = f["error"] is None and base["error"] is None and f["median_seconds"]
        f["hottest_over_combine_false"] = (
            f["hottest_receiver_rows"] / base["hottest_receiver_rows"] if ok else None
        )
        f["hottest_fewer_x"] = (
            base["hottest_receiver_rows"] / f["hottest_receiver_rows"]
            if ok and f["hottest_receiver_rows"]
            else None
        )
        f["wall_over_combine_false"] = (
            f["median_seconds"] / base["median_seconds"] if ok and base["median_seconds"] else None
        )
    local = figures["local_key_by"]
    targets = [
        _target(
            f"hottest receiver at least {HOTTEST_TARGET:g}x fewer rows than combine=False",
            local["hottest_fewer_x"],
            lambda x: x >= HOTTEST_TARGET,
            "x fewer",
        ),
        _target(
            f"wall at most {WALL_TARGET:g}x combine=False",
            local["wall_over_combine_false"],
            lambda x: x <= WALL_TARGET,
            "x",
        ),
    ]
    return {
        "rows": rows,
        "blocks": block_count,
        "parallelism": PARALLELISM,
        "flush_rows": flush_rows,
        "distinct_keys": int(np.count_nonzero(counts)),
        "hottest_key_rows": int(counts.max()),
        "spec": SPEC,
        "variants": figures,
        "targets": targets,
    }


def _target(name: str, value: float | None, met: Any, unit: str) -> dict[str, Any]:
    status = "no figure" if value is None else "met" if met(value) else "not met"
    return {"target": name, "value": value, "unit": unit, "status": status}
