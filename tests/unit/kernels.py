"""Operator tests on both kernels (``operators.kernel``): the task swaps each operator
for the one that runs it on its kernel before it opens the chain, and so do the tests.

A test that pins results takes the ``kernel`` fixture (``conftest``) and builds its
operators through ``on_kernel``; a test that pins how the Arrow kernel does the work
(its spill runs and buckets, its ``peak <= memory`` accounting) builds them on
``arrow`` only and says so.
"""

from __future__ import annotations

from hybrid_shuffle.config import KERNELS
from hybrid_shuffle.operators.base import Operator

__all__ = ["KERNELS", "on_kernel"]


def on_kernel(op: Operator, kernel: str) -> Operator:
    """``op`` as the task would run it on ``kernel`` (itself, or its DuckDB twin).  Open
    it like the original (``open(context)``) and ``close()`` it at the end."""
    return op.on_kernel(kernel)
