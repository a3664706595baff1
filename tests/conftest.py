"""What the default run leaves out: the tests marked ``slow``.

``./dev test`` (and CI) runs every test but the ``slow`` ones: jobs over tens of
millions of rows that show DuckDB spilling past its memory floor, minutes each on two
cores (what they pin down at scale, the unit tests of the operators pin down on small
memory).  ``HS_TEST_FULL=1 ./dev test`` runs them too, with the full matrices of the
node-loss and TPC-H tests and every benchmark workload's smoke run.
"""

from __future__ import annotations

import gc
import os

import pytest

FULL = bool(os.environ.get("HS_TEST_FULL"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if FULL:
        return
    skip = pytest.mark.skip(reason="slow: runs with HS_TEST_FULL=1 (the full suite)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Once the tests are collected, the modules, tests and parameters made so far leave
    the cycle collector's walks (``gc.freeze``, as the library's actors do once started):
    every leak check collects garbage in this process (``gc.collect``), which otherwise
    walks the ~120k objects Ray, Spark's Python side and the test modules hold, 50-100
    ms each time."""
    gc.freeze()
