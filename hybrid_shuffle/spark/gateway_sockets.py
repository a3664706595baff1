"""Nagle's algorithm off on the JVM's end of py4j's sockets.

Py4J's Java side writes an answer through a ``BufferedWriter`` of 8 KiB, one socket
write per full buffer, on sockets with Nagle's algorithm on.  An answer of more than
8 KiB (a physical plan's JSON, a formatted ``explain``) is therefore two or more small
writes: the second waits for the ACK of the first, which Python's end delays by up to
40 ms (Linux's delayed ACK).  Measured on this machine: a 30 KB string from the JVM took
48 ms, 0.9 ms with ``TCP_NODELAY`` on the Java socket; ``Session.sql`` over TPC-H's 22
queries, 5.9 s against 3.2 s (BENCHMARKS.md, issue 34).  Python's end sends each
command in one ``sendall`` and does not stall.

Neither py4j nor PySpark exposes the option, so it is set through Java reflection on
the gateway server's open connections (``GatewayServer.connections``, each with its
``socket``).  A connection belongs to one Python thread (PySpark's pinned-thread mode),
so each thread runs the pass once per gateway, on its first use of that Spark through
the engine; the pass also covers every other connection open at that moment.  It only
changes when bytes leave the JVM, never what they are, and a py4j that lays its classes
out differently is left as it is (logged at debug level).
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["tcp_nodelay"]

_done = threading.local()


def tcp_nodelay(spark: Any) -> None:
    """Set ``TCP_NODELAY`` on the JVM's end of every py4j connection of ``spark``'s
    gateway, once per thread and gateway (later calls return at once)."""
    gateway = getattr(getattr(spark, "sparkContext", None), "_gateway", None)
    if gateway is None:  # not a classic PySpark session (Spark Connect): no py4j
        return
    seen: weakref.WeakSet[Any] | None = getattr(_done, "gateways", None)
    if seen is None:
        seen = _done.gateways = weakref.WeakSet()
    if gateway in seen:
        return
    seen.add(gateway)
    try:
        count = _set_on_open_connections(gateway)
    except Exception as e:  # an optimisation only: never a reason to fail a query
        log.debug("py4j sockets left with Nagle's algorithm on (%s: %s)", type(e).__name__, e)
    else:
        log.debug("TCP_NODELAY set on %d py4j connection(s)", count)


def _set_on_open_connections(gateway: Any) -> int:
    server = gateway.java_gateway_server
    connections = _field(server.getClass(), "connections").get(server)
    count = 0
    for connection in list(connections.toArray()):
        _field(connection.getClass(), "socket").get(connection).setTcpNoDelay(True)
        count += 1
    return count


def _field(cls: Any, name: str) -> Any:
    """The field ``name`` declared by ``cls`` or its nearest superclass, made readable."""
    from py4j.protocol import Py4JJavaError

    while cls is not None:
        try:
            field = cls.getDeclaredField(name)
        except Py4JJavaError:  # NoSuchFieldException: declared higher up
            cls = cls.getSuperclass()
            continue
        field.setAccessible(True)
        return field
    raise LookupError(f"no field {name!r}")
