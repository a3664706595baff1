"""Operators run inside tasks; the contract is in ``operators.base``.  The stateful ones
run on DuckDB (``operators.duck``)."""

from hybrid_shuffle.operators.aggregate import HashAggregate, PartialAggregate
from hybrid_shuffle.operators.base import Operator
from hybrid_shuffle.operators.co_group import CoGroup
from hybrid_shuffle.operators.join import HashJoin, SortMergeJoin
from hybrid_shuffle.operators.local_aggregate import LocalAggregate
from hybrid_shuffle.operators.sort import SortPartition
from hybrid_shuffle.operators.stateless import Filter, Identity, MapBatches, Rename, Select
from hybrid_shuffle.operators.top_n import TopN

__all__ = [
    "CoGroup",
    "Filter",
    "HashAggregate",
    "HashJoin",
    "Identity",
    "LocalAggregate",
    "MapBatches",
    "Operator",
    "PartialAggregate",
    "Rename",
    "Select",
    "SortMergeJoin",
    "SortPartition",
    "TopN",
]
