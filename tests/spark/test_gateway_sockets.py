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


def _own_connection_sends_without_nagle(spark: Any) -> bool:
    """Whether the JVM's end of this thread's py4j connection has ``TCP_NODELAY``: the
    JVM's socket whose remote port is this thread's socket's local port."""
    gateway = spark.sparkContext._gateway
    port = gateway._gateway_client.get_thread_connection().socket.getsockname()[1]
    server = gateway.java_gateway_server
    for connection in list(_field(server.getClass(), "connections").get(server).toArray()):
        socket = _field(connection.getClass(), "socket").get(connection)
        if socket.getPort() == port:
            return bool(socket.getTcpNoDelay())
    raise AssertionError("this thread's py4j connection is not open on the JVM's side")


def test_a_thread_that_uses_the_sessions_spark_has_its_connection_set(session: hs.Session) -> None:
    spark = session.spark
    assert _own_connection_sends_without_nagle(spark)
    seen: list[bool] = []

    def use() -> None:  # a thread of its own: a py4j connection of its own
        assert session.spark.range(5).count() == 5
        seen.append(_own_connection_sends_without_nagle(session.spark))

    thread = threading.Thread(target=use)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive() and seen == [True]


def test_a_large_answer_from_the_jvm_arrives_whole(session: hs.Session) -> None:
    # more than the Java writer's 8 KiB buffer: several socket writes
    text = session.spark._jvm.org.apache.commons.lang3.StringUtils.repeat("ab", 100_000)
    assert text == "ab" * 100_000


def test_an_object_without_py4j_is_left_alone() -> None:
    tcp_nodelay(object())  # Spark Connect's session has no gateway: nothing to set
