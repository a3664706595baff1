"""Builds logical nodes the way the API does, without a session (planner and scheduler
unit tests)."""

from __future__ import annotations

import itertools

import pyarrow as pa

from hybrid_shuffle.operators import HashAggregate, Identity, MapBatches, SortPartition
from hybrid_shuffle.plan.planner import ExchangeSpec, LogicalNode
from hybrid_shuffle.shuffle.routing import Partitioner, PartitionerKind

TABLE = pa.table({"customer": ["a", "b"], "amount": [1.0, 2.0]})


class Builder:
    """Builds logical nodes the way the API does, without a session."""

    def __init__(self) -> None:
        self.ids = itertools.count()

    def source(self, name: str, parallelism: int) -> LogicalNode:
        return LogicalNode(
            next(self.ids), name, None, [], parallelism, [[TABLE]] * parallelism, TABLE.schema
        )

    def map(self, up: LogicalNode, name: str) -> LogicalNode:
        return LogicalNode(next(self.ids), name, MapBatches(lambda t: t, name), [(up, None)])

    def agg(
        self,
        up: LogicalNode,
        name: str,
        edge: str | None = None,
        mode: str | None = None,
        partitions: int | str | None = None,
        keys: tuple[str, ...] = ("customer",),
    ) -> LogicalNode:
        spec = ExchangeSpec(Partitioner(PartitionerKind.HASH, keys), edge, mode, partitions)
        op = HashAggregate(list(keys), {"amount": ["sum"]}, name)
        return LogicalNode(next(self.ids), name, op, [(up, spec)])

    def sort(
        self, up: LogicalNode, name: str, edge: str | None = None, mode: str | None = None
    ) -> LogicalNode:
        spec = ExchangeSpec(Partitioner(PartitionerKind.RANGE, ("amount_sum",)), edge, mode)
        return LogicalNode(
            next(self.ids), name, SortPartition(["amount_sum"], False, name), [(up, spec)]
        )

    def union(self, *ups: LogicalNode) -> LogicalNode:
        return LogicalNode(
            next(self.ids),
            "union",
            Identity("union", num_inputs=len(ups)),
            [(u, None) for u in ups],
        )
