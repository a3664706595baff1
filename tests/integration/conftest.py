"""One local Ray per test module (start-up costs seconds), with a small object store."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator

import pytest
import ray

import hybrid_shuffle as hs

OBJECT_STORE = 400 * 2**20


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    if ray.is_initialized():
        ray.shutdown()
    ray.init(
        num_cpus=2,
        object_store_memory=OBJECT_STORE,
        include_dashboard=False,
        namespace="hybrid-shuffle",
        logging_level="ERROR",
    )
    yield
    ray.shutdown()


def assert_no_leaks(session: hs.Session) -> None:
    """Nothing of a finished job stays held: no partitions, no refs in any executor."""
    gc.collect()
    assert session.partitions_occupying_local_resources() == {
        i: set() for i in range(session.slots)
    }
    assert session.owned_objects() == {i: 0 for i in range(session.slots)}


def assert_closed_cleanly(session: hs.Session) -> None:
    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)]
    assert not [n for n in names if n.startswith(session.session_id)]
    assert not os.path.exists(session.spill_dir)
