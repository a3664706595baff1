"""A session starts, fails and closes without leaving Ray, actors, files or memory."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import ray

import hybrid_shuffle as hs
from hybrid_shuffle.runtime.slot_pool import SlotPool

from .conftest import assert_no_leaks

MiB = 1 << 20


def test_a_session_that_fails_after_starting_ray_stops_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    if ray.is_initialized():
        ray.shutdown()

    def executors_fail_to_start(self: SlotPool) -> None:
        raise hs.WaitTimeoutError("the executor actors did not start (injected)")

    monkeypatch.setattr(SlotPool, "start", executors_fail_to_start)
    config = {"ray": {"num_cpus": 2, "object_store_memory": "100 MiB"}}
    with pytest.raises(hs.WaitTimeoutError, match="injected"):
        hs.Session(config, slots=1)
    assert not ray.is_initialized()


@pytest.mark.slow
def test_executor_memory_comes_back_after_repeated_large_sorts(local_ray: None) -> None:
    rows = 100 * MiB // 16  # 100 MiB of int64 keys and float64 values
    rng = np.random.default_rng(0)
    table = pa.table({"k": rng.integers(0, 1 << 40, rows), "v": np.ones(rows)})
    with hs.Session({"shuffle": {"default_mode": "blocking"}}, slots=2) as session:
        before = session.executor_memory()
        for _ in range(3):
            out = session.job("sort").from_arrow(table, name="t", parallelism=2).sort("k")
            assert out.to_arrow().num_rows == rows
        assert_no_leaks(session)
        after = session.executor_memory()
        for i in before:
            assert after[i]["arrow_pool"] == 0
            assert after[i]["private"] - before[i]["private"] < 64 * MiB, (before[i], after[i])
