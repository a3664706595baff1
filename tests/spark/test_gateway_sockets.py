"""The JVM's end of py4j's sockets sends without Nagle's algorithm (``spark.gateway_sockets``):
each thread that uses the session's Spark has its connection set, and the answers stay
the same."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import hybrid_shuffle as hs
from hybrid_shuffle.spark.gateway_sockets import _field, tcp_nodelay

pytestmark = pytest.mark.spark


def _nodelay_flags(spark: Any) -> list[bool]:
    server = spark.sparkContext._gateway.java_gateway_server
    connections = _field(server.getClass(), "connections").get(server)
    return [
        bool(_field(c.getClass(), "socket").get(c).getTcpNoDelay())
        for c in list(connections.toArray())
    ]


def test_a_thread_that_uses_the_sessions_spark_has_its_connection_set(session: hs.Session) -> None:
    spark = session.spark
    counted: list[int] = []

    def use() -> None:  # a thread of its own: a py4j connection of its own
        counted.append(int(session.spark.range(5).count()))

    thread = threading.Thread(target=use)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive() and counted == [5]
    flags = _nodelay_flags(spark)
    assert len(flags) >= 2 and all(flags)


def test_a_large_answer_from_the_jvm_arrives_whole(session: hs.Session) -> None:
    # more than the Java writer's 8 KiB buffer: several socket writes
    text = session.spark._jvm.org.apache.commons.lang3.StringUtils.repeat("ab", 100_000)
    assert text == "ab" * 100_000


def test_an_object_without_py4j_is_left_alone() -> None:
    tcp_nodelay(object())  # Spark Connect's session has no gateway: nothing to set
