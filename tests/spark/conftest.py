"""One Spark on Ray (through RayDP) per test module: Spark starts in about 15 s."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray

import hybrid_shuffle as hs

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))

CONFIG = {
    "parallelism": 2,
    "ray": {"num_cpus": 4, "object_store_memory": "500 MiB"},
    "shuffle": {"buffer_size": "1 MiB", "memory_budget": "64 MiB"},
    "spark": {"executors": 1, "executor_cores": 1, "executor_memory": "1 GiB"},
}


@pytest.fixture(scope="module")
def session() -> Iterator[hs.Session]:
    if ray.is_initialized():
        ray.shutdown()
    sigint = signal.getsignal(signal.SIGINT)
    with hs.Session(CONFIG, slots=2) as s:
        yield s
    assert not ray.is_initialized()  # the session started Ray, so it stopped it
    # PySpark's handler (cancel the context's jobs) is gone with the Spark it served:
    # Ctrl-C raises KeyboardInterrupt again, not AttributeError from a stopped context
    assert signal.getsignal(signal.SIGINT) is sigint
