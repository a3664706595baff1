"""Speculative execution (``failover.speculation``): a slow subtask gets a second attempt.

The slow subtask is made slow by a phase, not a timer: the first call of the user
function anywhere creates a marker file (atomically: one process wins) and sleeps; every
other call, the second attempt's included, runs at once.  A job that waited for the
sleeper would take 30 s; with speculation it ends as soon as the copy wins, with the
exact result.  A vertex whose output is pipelined is never copied.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

import hybrid_shuffle as hs

from .conftest import assert_closed_cleanly, assert_no_leaks
from .data import orders

ROWS = 20_000
SLEEP = 30.0

CONFIG = {
    "parallelism": 2,
    "shuffle": {"buffer_size": "64 KiB", "wait_timeout": 60},
    "failover": {
        "max_attempts": 3,
        "backoff": "50 ms",
        "speculation": {
            "enabled": True,
            "multiplier": 1.0,
            "quantile": 0.5,
            "min_runtime": "200 ms",
        },
    },
}


@pytest.fixture(scope="module")
def session(local_ray: None) -> Iterator[hs.Session]:
    with hs.Session(CONFIG, slots=4) as s:
        yield s
    assert_closed_cleanly(s)


def slow_once(marker: Path, seconds: float) -> Callable[[pa.Table], pa.Table]:
    """Sleeps ``seconds`` in the first call anywhere (the one that creates ``marker``)."""
    path = str(marker)

    def fn(table: pa.Table) -> pa.Table:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return table
        os.close(fd)
        time.sleep(seconds)
        return table

    return fn


def pipeline(
    session: hs.Session,
    mode: str,
    producer: Callable[[pa.Table], pa.Table] | None = None,
    consumer: Callable[[pa.Table], pa.Table] | None = None,
) -> hs.Stream:
    job = session.job(f"speculation-{mode}")
    stream = job.from_arrow(orders(ROWS), name="orders", parallelism=2)
    stream = stream.map_batches(producer or (lambda t: t), name="produce")
    keyed = stream.key_by("customer", edge="by_customer", mode=mode, partitions=2)
    return keyed.map_batches(consumer or (lambda t: t), name="consume")


def assert_all_rows(result: hs.JobResult) -> None:
    """Every input row exactly once: the loser's rows never reach the result."""
    expected = orders(ROWS)
    table = result.table.sort_by("order_id")
    assert table.num_rows == expected.num_rows
    assert table.select(expected.column_names).equals(expected)


@pytest.mark.parametrize("slow", ["produce", "consume"])
def test_a_slow_subtask_is_copied_and_the_job_ends_long_before_it(
    session: hs.Session, slow: str, tmp_path: Path
) -> None:
    """``produce`` writes a blocking edge; ``consume`` is the sink (its result partition
    is attempt-numbered, read by the driver after the job)."""
    sleeper = slow_once(tmp_path / "slow", SLEEP)
    stream = (
        pipeline(session, "blocking", producer=sleeper)
        if slow == "produce"
        else pipeline(session, "blocking", consumer=sleeper)
    )
    assert "can be speculated" in stream.explain()
    started = time.perf_counter()
    result = stream.collect()
    assert time.perf_counter() - started < SLEEP / 2
    assert_all_rows(result)
    assert result.speculative_attempts >= 1
    copies = [r for r in result.tasks if r.speculative]
    # the slow subtask was copied; on a loaded machine another subtask past the median
    # may be copied too, which is speculation doing its job
    assert any(slow in r.vertex for r in copies) and all(r.attempt >= 1 for r in copies)
    assert_no_leaks(session)


def test_a_pipelined_vertex_is_not_speculated(session: hs.Session, tmp_path: Path) -> None:
    stream = pipeline(session, "pipelined", producer=slow_once(tmp_path / "slow", 3.0))
    data = stream.explain_data()["speculation"]
    why = {v["name"]: v["reason"] for v in data["vertices"]}
    assert why == {
        "orders->produce": "output pipelined to 'consume'",
        "consume": ("input pipelined from 'orders->produce'"),
    }
    result = stream.collect()
    assert_all_rows(result)
    assert result.speculative_attempts == 0
    assert not any(r.speculative for r in result.tasks)
    assert_no_leaks(session)


def test_a_copied_parquet_sink_writes_every_row_once(session: hs.Session, tmp_path: Path) -> None:
    """The sink's two attempts stage their files apart; only the winner's are committed."""
    out = tmp_path / "out"
    stream = pipeline(session, "blocking", consumer=slow_once(tmp_path / "slow", SLEEP))
    started = time.perf_counter()
    result = stream.write_parquet(out)
    assert time.perf_counter() - started < SLEEP / 2
    assert result.speculative_attempts >= 1
    expected = orders(ROWS)
    written = ds.dataset(out).to_table().sort_by("order_id")
    assert written.select(expected.column_names).equals(expected)
    assert sorted(os.listdir(out)) == sorted(
        os.path.basename(p) for p in result.table["path"].to_pylist()
    )
    assert_no_leaks(session)
