"""The wait for a Spark started in the background is bounded (``spark.start_timeout``):
a start that hangs is a ``WaitTimeoutError`` naming the key, not a hang, and a start
that ends later is still taken by the next use.  The start itself is a stand-in held on
an event (pure logic: no JVM)."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

import hybrid_shuffle as hs
from hybrid_shuffle.config import load_config
from hybrid_shuffle.spark import bridge as bridge_module
from hybrid_shuffle.spark.backends import SparkBackend
from hybrid_shuffle.spark.bridge import SparkBridge


def _bridge(monkeypatch: pytest.MonkeyPatch, release: threading.Event) -> SparkBridge:
    config = load_config({"spark": {"backend": "local", "start_timeout": "50 ms"}}).spark
    monkeypatch.setattr(bridge_module, "choose_backend", lambda c, s: SparkBackend("local", "4.0"))
    monkeypatch.setattr(bridge_module, "require_pyspark", lambda b: None)
    bridge = SparkBridge(config, "test")

    def start(ray_up: Any = None) -> object:
        if not release.wait(60):
            raise AssertionError("never released")
        return "spark"

    monkeypatch.setattr(bridge, "_start", start)
    return bridge


def test_a_start_that_does_not_end_is_a_timeout_naming_the_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()
    bridge = _bridge(monkeypatch, release)
    bridge.start_in_background()
    with pytest.raises(
        hs.WaitTimeoutError, match=r"did not start within 0\.05 s \(spark\.start_timeout\)"
    ):
        _ = bridge.session
    thread = bridge._starting
    assert thread is not None and bridge.starting  # still running: the next use waits again
    release.set()
    thread.join(60)  # the start has ended: the next use takes its session at once
    assert bridge.session == "spark"
    assert not bridge.starting


def test_closing_while_spark_still_starts_does_not_wait_for_it_forever(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="hybrid_shuffle")
    release = threading.Event()
    bridge = _bridge(monkeypatch, release)
    bridge.start_in_background()
    try:
        bridge.stop()  # returns after spark.start_timeout, the start still held
        assert not bridge.starting
        assert "still starting" in caplog.text
    finally:
        release.set()
