"""Reordering one folder's test modules at collection, for the conftests that share a
Ray or a Spark between modules: the modules that share it run first, so it starts once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


def run_last(items: list[pytest.Item], folder: Path, last: Callable[[pytest.Item], bool]) -> None:
    """Move the tests under ``folder`` for which ``last`` holds after the folder's other
    tests, in place: a stable sort, so each module keeps its tests' order, and the tests
    outside ``folder`` keep their places."""
    places = [i for i, item in enumerate(items) if folder in Path(str(item.path)).parents]
    ordered = sorted((items[i] for i in places), key=last)  # stable: False first
    for place, item in zip(places, ordered, strict=True):
        items[place] = item
