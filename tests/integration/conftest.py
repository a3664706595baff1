"""One local Ray shared by the test modules (start-up costs seconds), with a small
object store: a module that takes ``local_ray`` gets the Ray the previous module left if
this fixture started it and it is still up, else a new one.  A module that starts a Ray
of its own (a multi-node ``Cluster``, a session that owns Ray's lifecycle) stops whatever
runs first; the next ``local_ray`` then starts afresh, so the modules none of whose tests
take ``local_ray`` (a multi-node ``Cluster``, command lines in processes of their own,
no Ray at all) run after the others (``pytest_collection_modifyitems``): between two
modules that share it the Ray stays up, and each start costs about 4 CPU-seconds.  Each
module still closes its own sessions and checks that they left nothing behind
(``assert_closed_cleanly``)."""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

import hybrid_shuffle as hs

from ..ordering import run_last

OBJECT_STORE = 400 * 2**20
HERE = Path(__file__).resolve().parent


#: the GCS address of the Ray ``local_ray`` started, while it may still be running
_SHARED_RAY: list[str] = []


def _ours() -> bool:
    """Ray is up and is the one ``local_ray`` started (not a module's own)."""
    return (
        ray.is_initialized()
        and bool(_SHARED_RAY)
        and ray.get_runtime_context().gcs_address == _SHARED_RAY[0]
    )


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    if not _ours():
        if ray.is_initialized():
            ray.shutdown()
        _SHARED_RAY.clear()
        ray.init(
            # a Ray of the tests' own: without it, ray.init joins a cluster another
            # process on the machine started (its address file), and refuses num_cpus
            address="local",
            num_cpus=2,
            object_store_memory=OBJECT_STORE,
            include_dashboard=False,
            namespace="hybrid-shuffle",
            logging_level="ERROR",
        )
        _SHARED_RAY.append(ray.get_runtime_context().gcs_address)
    yield


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules of this folder none of whose tests take ``local_ray`` run after those
    that share it (each module keeps its tests' order); every other test keeps its
    place."""
    sharing = {item.path for item in items if _takes_local_ray(item)}
    run_last(items, HERE, lambda item: item.path not in sharing)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """At the end of a module, once its fixtures are torn down, the shared Ray stops
    unless the next module's first test takes ``local_ray`` too: a module that does not
    (a subprocess's own Ray, a multi-node cluster) and the folders after this one find
    no Ray running unasked."""
    yield
    if nextitem is not None and nextitem.module is item.module:
        return
    if _ours() and not _takes_local_ray(nextitem):
        ray.shutdown()
        _SHARED_RAY.clear()


def _takes_local_ray(item: pytest.Item | None) -> bool:
    return (
        item is not None
        and HERE in Path(str(item.path)).parents
        and "local_ray" in getattr(item, "fixturenames", ())
    )


def assert_no_leaks(session: hs.Session) -> None:
    """Nothing of a finished job stays held: no partitions, no refs in any executor, no
    spill file on disk."""
    gc.collect()
    assert session.partitions_occupying_local_resources() == {
        i: set() for i in range(session.slots)
    }
    # Ray counts references across processes by messages: after a failed job, a buffer
    # ref that was in flight to a cancelled consumer is dropped by its owner a moment
    # after the consumer let go; wait for that count to settle (bounded), then insist
    none = {i: 0 for i in range(session.slots)}
    try:
        wait_until(lambda: session.owned_objects() == none, 30.0, "executors' refs released")
    except AssertionError as error:
        raise AssertionError(f"{error}; still held: {held_references(session)}") from None
    # and the partition stores of the external service, if the session runs any
    assert all(held == set() for held in session.stored_partitions().values())
    wait_until(lambda: not any(session.stored_objects().values()), 10.0, "stores' refs released")
    assert spill_files(session) == []
    # no actor is left over: the session's named actors are its executors and stores
    wanted = session.slots + len(session.stored_partitions())
    wait_until(lambda: len(session_actors(session)) == wanted, 10.0, "dead actors gone")


def held_references(session: hs.Session) -> dict[int, dict[str, Any]]:
    """Per executor that still holds any, the object references and their counts (what
    Ray's reference table says: local Python refs, refs in submitted tasks), so that a
    failed leak check names what leaked."""

    def table(_actor: Any) -> dict[str, Any]:
        return dict(ray._private.worker.global_worker.core_worker.get_all_reference_counts())

    tables = ray.get([e.__ray_call__.remote(table) for e in session.executors], timeout=30)
    return {i: t for i, t in enumerate(tables) if t}


def session_actors(session: hs.Session) -> list[str]:
    """The alive named actors of ``session`` (executors, partition stores)."""
    return [
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["name"].startswith(session.session_id)
    ]


def spill_files(session: hs.Session) -> list[str]:
    """Data files under the session's spill directory (its owner marker is not data)."""
    return [
        os.path.join(root, name)
        for root, _, names in os.walk(session.spill_dir)
        for name in names
        if not name.startswith(".")
    ]


def assert_closed_cleanly(session: hs.Session) -> None:
    assert session_actors(session) == []
    assert not os.path.exists(session.spill_dir)


def wait_until(condition: Callable[[], bool], timeout: float = 30.0, what: str = "") -> None:
    """Wait for a phase of a running job (a marker file, an executor's state); bounded,
    and a failure names the phase."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"phase not reached within {timeout:.0f} s: {what}")
        time.sleep(0.01)
