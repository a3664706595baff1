"""One Spark on Ray (through RayDP) shared by the modules that take the ``session``
fixture: Spark and Ray start in 15-30 s, once instead of once per module.

A module that needs a Ray of its own (a cluster, another runtime_env, an attached
Spark) sets ``STARTS_ITS_OWN_RAY = True`` and calls :func:`own_ray` before it starts
one; such modules run after the sharing ones (``pytest_collection_modifyitems``), so
the shared session starts once per pass.  Each sharing module leaves the session as it
found it: its config restored and the temporary views it made dropped.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

import hybrid_shuffle as hs

from ..ordering import run_last

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
HERE = Path(__file__).resolve().parent

#: The tests' Spark JVMs (drivers and RayDP's executors; the library gives RayDP's app
#: master the same): each runs seconds of Spark work at a time, which the quick compiler
#: alone serves best (the optimizing compiler's threads cost more CPU than their code saves
#: there: the Spark-facing half, run each way in turn, spent 34% less CPU in its JVMs and
#: 24% less in all; BENCHMARKS.md, issue 37), with a code cache large enough for the
#: hundreds of classes a shared session generates (the quick compiler's default one filled
#: and Spark 4's driver died), and the serial collector for a heap of 1 GiB.  Results do
#: not depend on how the JVM compiles; the benchmarks measure Spark with its defaults.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=512m -XX:+UseSerialGC"
JVM_CONFIGS = {
    "spark.driver.extraJavaOptions": JVM_OPTIONS,
    "spark.executor.extraJavaOptions": JVM_OPTIONS,
}
#: one RayDP executor with one core: the tests' Spark
SPARK = {"executors": 1, "executor_cores": 1, "executor_memory": "1 GiB", "configs": JVM_CONFIGS}
#: a module only ``ray.runtime_env`` ships to the executors (test_python_udfs imports it in a
#: UDF): the shared Ray starts with that runtime_env, which changes nothing for a module that
#: does not import it, rather than that module starting a second Ray and Spark on Ray of its
#: own (about 25 CPU-seconds)
SHIPPED_MODULE = HERE / "udf_modules" / "hs_udf_shipped"
CONFIG = {
    "parallelism": 2,
    "ray": {
        "num_cpus": 4,
        "object_store_memory": "500 MiB",
        "runtime_env": {"py_modules": [str(SHIPPED_MODULE)]},
    },
    "shuffle": {"buffer_size": "1 MiB", "memory_budget": "64 MiB"},
    "spark": SPARK,
}

#: the open shared session and the SIGINT handler from before it started
_shared: list[tuple[hs.Session, Callable[..., Any] | int | None]] = []


def close_shared_session() -> None:
    """Close the shared session if one is open, and check it stopped what it started."""
    if not _shared:
        return
    session, sigint = _shared.pop()
    session.close()
    assert not ray.is_initialized()  # the session started Ray, so it stopped it
    # PySpark's handler (cancel the context's jobs) is gone with the Spark it served:
    # Ctrl-C raises KeyboardInterrupt again, not AttributeError from a stopped context
    assert signal.getsignal(signal.SIGINT) is sigint


def own_ray() -> None:
    """Make way for a Ray of the caller's own: close the shared session, stop any Ray."""
    close_shared_session()
    if ray.is_initialized():
        ray.shutdown()


def _shared_session() -> hs.Session:
    if _shared:
        assert ray.is_initialized(), (
            "a module stopped Ray under the shared session: set STARTS_ITS_OWN_RAY and "
            "call own_ray() before starting a Ray of its own"
        )
        return _shared[0][0]
    if ray.is_initialized():
        ray.shutdown()
    sigint = signal.getsignal(signal.SIGINT)
    _shared.append((hs.Session(CONFIG, slots=2), sigint))
    return _shared[0][0]


def _temporary_views(session: hs.Session) -> set[str]:
    return {t.name for t in session.spark.catalog.listTables() if t.isTemporary}


@pytest.fixture(scope="module")
def session() -> Iterator[hs.Session]:
    """The shared session, as the module found it once the module is done."""
    s = _shared_session()
    config, views = s.config, _temporary_views(s)
    yield s
    s.config = config
    for view in _temporary_views(s) - views:
        s.spark.catalog.dropTempView(view)


def _starts_its_own_ray(item: pytest.Item) -> bool:
    module = getattr(item, "module", None)
    return bool(getattr(module, "STARTS_ITS_OWN_RAY", False))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules of this folder that start their own Ray run after those sharing the
    session (each keeps its tests' order); every other test keeps its place."""
    run_last(items, HERE, _starts_its_own_ray)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """The shared session closes when the pass leaves this folder (or ends), once the
    last module's fixtures are torn down."""
    yield
    if nextitem is None or HERE not in Path(str(nextitem.path)).parents:
        close_shared_session()
