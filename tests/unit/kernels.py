"""Operator tests on the DuckDB operator a task runs and on the pyarrow operator it
hands an input to where DuckDB's answer would differ (float keys, types DuckDB does
not keep: ``operators.duck.base``).

There is one kernel (``operators.kernel`` was removed): a task swaps each planning
operator for its DuckDB operator (``operators.duck.operators.on_duckdb``).  The
pyarrow operators still run the inputs handed to them, so a test that pins results
takes the ``kernel`` fixture (``conftest``) and runs both: ``duckdb`` (what a task
runs) and ``arrow`` (the fallback, which must give the same rows).  A test that pins
how one of them does the work (the pyarrow operator's in-memory account, the DuckDB
operator's fallbacks) builds that one only and says so.  Spilling is DuckDB's alone,
past its 64 MiB floor (``tests/integration/test_duckdb_spilling.py``).
"""

from __future__ import annotations

from hybrid_shuffle.operators.base import Operator
from hybrid_shuffle.operators.duck.operators import on_duckdb

__all__ = ["KERNELS", "on_kernel"]

#: ``duckdb``: the operator a task runs; ``arrow``: the pyarrow fallback it hands inputs to
KERNELS = ("duckdb", "arrow")


def on_kernel(op: Operator, kernel: str) -> Operator:
    """``op`` as the task runs it (``duckdb``) or the pyarrow operator itself (``arrow``).
    Open it like the original (``open(context)``) and ``close()`` it at the end."""
    return on_duckdb(op) if kernel == "duckdb" else op
