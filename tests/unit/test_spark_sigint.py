"""A session that stopped its Spark leaves Ctrl-C as it found it (``spark.sigint``).

PySpark's handler stays installed after its context stops and then raises
``AttributeError`` on Ctrl-C; the session puts the previous handler back, unless the
user installed their own meanwhile.  The real Spark case is checked by
``tests/spark/conftest.py`` on every Spark test module's session.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest

from hybrid_shuffle.spark.sigint import current_sigint_handler, restore_sigint_handler


@pytest.fixture(autouse=True)
def keep_handler() -> Iterator[None]:
    before = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, before)


def _pysparks_handler() -> Any:
    def signal_handler(signum: int, frame: Any) -> None:
        raise AttributeError("'NoneType' object has no attribute 'sc'")

    signal_handler.__module__ = "pyspark.context"
    return signal_handler


def test_the_handler_spark_left_is_replaced_by_the_one_before_it() -> None:
    previous = current_sigint_handler()
    signal.signal(signal.SIGINT, _pysparks_handler())
    restore_sigint_handler(previous)
    assert signal.getsignal(signal.SIGINT) is previous


def test_a_handler_the_user_installed_after_spark_stays() -> None:
    previous = current_sigint_handler()

    def users(signum: int, frame: Any) -> None:
        pass

    signal.signal(signal.SIGINT, users)
    restore_sigint_handler(previous)
    assert signal.getsignal(signal.SIGINT) is users
