"""Operator tests on both kernels (``operators.kernel``): the task swaps each operator
for the one that runs it on its kernel before it opens the chain, and so do the tests.

A test that pins results takes the ``kernel`` fixture (``conftest``) and builds its
operators through ``on_kernel``; a test that pins how one kernel does the work (the
Arrow kernel's in-memory account, the DuckDB twin's fallbacks) builds them on that
kernel only and says so.  Spilling is DuckDB's alone, past its 64 MiB floor
(``tests/integration/test_duckdb_spilling.py``).
"""

from __future__ import annotations

from hybrid_shuffle.config import KERNELS
from hybrid_shuffle.operators.base import Operator

__all__ = ["KERNELS", "on_kernel"]


def on_kernel(op: Operator, kernel: str) -> Operator:
    """``op`` as the task would run it on ``kernel`` (itself, or its DuckDB twin).  Open
    it like the original (``open(context)``) and ``close()`` it at the end."""
    return op.on_kernel(kernel)
