"""A session starts, fails and closes without leaving Ray, actors, files or memory."""

from __future__ import annotations

import time

import numpy as np
import psutil
import pyarrow as pa
import pytest
import ray

import hybrid_shuffle as hs
from hybrid_shuffle.runtime.slot_pool import SlotPool

from .conftest import assert_no_leaks, wait_until

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


def ray_worker_titles() -> list[str]:
    """The process titles of the Python workers of the Ray this process started (its
    raylet's children but Ray's two agents): ``ray::IDLE`` for one that never ran
    anything, ``ray::Executor...`` for an executor; a worker not yet connected still has
    its command line, ``.../default_worker.py ...``."""
    raylets = [
        p for p in psutil.Process().children(recursive=True) if p.name().startswith("raylet")
    ]
    assert len(raylets) == 1, raylets
    titles = [" ".join(p.cmdline()) for p in raylets[0].children()]
    return [t for t in titles if "Agent" not in t and "dashboard" not in t]


def test_an_embedded_ray_starts_a_worker_only_for_what_runs() -> None:
    """Ray prestarts a worker per CPU for a new driver; the session's executors never use
    them (they are created before those register), so a session that starts its own Ray
    turns that off: its Ray's Python workers are its executors, once a job ran."""
    if ray.is_initialized():
        ray.shutdown()
    config = {"ray": {"num_cpus": 2, "object_store_memory": "100 MiB"}}
    with hs.Session(config, slots=2) as session:
        table = pa.table({"k": [1, 2, 2]})
        result = session.job("one").from_arrow(table).key_by("k").aggregate({"k": "count"})
        assert result.collect().table.num_rows == 2
        titles = ray_worker_titles()
        assert len(titles) == 2 and all(t.startswith("ray::Executor") for t in titles), titles
    assert not ray.is_initialized()


def wait_for_task_imports(session: hs.Session) -> None:
    """Until every executor imported what its tasks use (it does as it starts, in the
    background), at most 60 s."""
    from hybrid_shuffle.actors.executor import _TASK_IMPORTS

    wanted = list(_TASK_IMPORTS)
    deadline = time.monotonic() + 60
    for executor in session.cluster.executors:
        while (got := ray.get(executor.imported.remote(wanted), timeout=30)) != wanted:
            assert time.monotonic() < deadline, f"still not imported after 60 s: {got}"
            time.sleep(0.05)


def test_executors_import_what_tasks_use_before_the_first_job(local_ray: None) -> None:
    """Each executor imports pandas, pyarrow's dataset and DuckDB as it starts, in the
    background, so the session's first tasks do not (about 1.5 s of the first query)."""
    with hs.Session({"shuffle": {"default_mode": "blocking"}}, slots=2) as session:
        assert len(session.cluster.executors) == 2
        wait_for_task_imports(session)


def _collector_state(_actor: object) -> tuple[int, int]:
    """In an actor's process: the objects frozen, and those the cycle collector walks."""
    import gc

    gc.collect()
    return gc.get_freeze_count(), len(gc.get_objects())


def _importing(_actor: object) -> bool:
    """In an executor's process: whether its background imports (and the freeze after
    them) are still running."""
    import threading

    return any(t.name == "task-imports" for t in threading.enumerate())


def test_an_actors_imported_objects_are_out_of_the_collectors_walks(local_ray: None) -> None:
    """Once an executor imported its tasks' modules (before any task ran), and a partition
    store once started, what they imported is frozen (``gc.freeze``): a full collection,
    which every leak probe makes, walks only what came after."""
    config = {"shuffle": {"service": "external"}}
    with hs.Session(config, slots=2) as session:
        for executor in session.cluster.executors:
            wait_until(
                lambda e=executor: not ray.get(e.__ray_call__.remote(_importing), timeout=30),
                60,
                "the executor's background imports and freeze done",
            )
        stores = [actor for _, actor in session.cluster.master.stores()]
        for actor in [*session.cluster.executors, *stores]:
            frozen, walked = ray.get(actor.__ray_call__.remote(_collector_state), timeout=60)
            assert frozen > 20_000 and walked < frozen // 4, (frozen, walked)
        job = session.job("after")
        table = pa.table({"k": np.arange(1000) % 7, "v": np.arange(1000)})
        got = job.from_arrow(table).key_by("k").aggregate({"v": "sum"}).collect()
        assert got.table.num_rows == 7
        assert_no_leaks(session)  # a job's garbage is still collected


@pytest.mark.slow
def test_executor_memory_comes_back_after_repeated_large_sorts(local_ray: None) -> None:
    rows = 100 * MiB // 16  # 100 MiB of int64 keys and float64 values
    rng = np.random.default_rng(0)
    table = pa.table({"k": rng.integers(0, 1 << 40, rows), "v": np.ones(rows)})
    with hs.Session({"shuffle": {"default_mode": "blocking"}}, slots=2) as session:
        wait_for_task_imports(session)  # their memory is the executors', not the sorts'
        before = session.executor_memory()
        for _ in range(3):
            out = session.job("sort").from_arrow(table, name="t", parallelism=2).sort("k")
            assert out.to_arrow().num_rows == rows
        assert_no_leaks(session)
        after = session.executor_memory()
        for i in before:
            assert after[i]["arrow_pool"] == 0
            assert after[i]["private"] - before[i]["private"] < 64 * MiB, (before[i], after[i])
