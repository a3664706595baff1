"""The operator a task runs for each operator the planner saw: the DuckDB one.

A ``Stream`` builds the planning operators (``HashAggregate``, ``SortPartition``,
``HashJoin``, ``SortMergeJoin``); before it opens its chain a task swaps each
for the DuckDB operator that runs it (``on_duckdb``), which plans as it does and
computes the rows pyarrow would (the planning operators run nothing themselves:
``base.PlannedOperator``).  Every other operator runs as it is: co_group sorts on
DuckDB itself (``co_group.SortedSides``), ``sql`` is DuckDB already, and the
per-batch steps (filters, projections, the map-side combiner, ``local_key_by``)
stay on Arrow, where they measured faster.  There is no other kernel to choose
(``operators.kernel`` was removed).
"""

from __future__ import annotations

from hybrid_shuffle.operators.aggregate import HashAggregate
from hybrid_shuffle.operators.base import Operator
from hybrid_shuffle.operators.duck.aggregate import DuckAggregate
from hybrid_shuffle.operators.duck.base import DuckOperator
from hybrid_shuffle.operators.duck.join import DuckJoin
from hybrid_shuffle.operators.duck.sort import DuckSort
from hybrid_shuffle.operators.join import Join
from hybrid_shuffle.operators.sort import SortPartition

__all__ = ["on_duckdb"]


def on_duckdb(op: Operator) -> Operator:
    """The operator that runs ``op`` in a task: its DuckDB operator, or ``op`` itself
    (already one, or a per-batch step).  Open it like ``op`` (``open(context)``) and
    ``close()`` it at the end."""
    if isinstance(op, DuckOperator):
        return op
    if isinstance(op, HashAggregate):
        return DuckAggregate(op)
    if isinstance(op, SortPartition):
        return DuckSort(op)
    if isinstance(op, Join):
        return DuckJoin(op)
    return op
