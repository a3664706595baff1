"""The logical job the API builds: nodes (an operator each) and how they read inputs.

``Stream`` calls add ``LogicalNode`` values; ``plan_job`` turns them into a
``JobGraph``.  A node with a ``cache`` (``Stream.cache``, ``Job.from_cache``)
reads the cache's partitions instead of its lineage while the cache is filled:
``inputs`` is then empty and the node is a source, so every planner pass sees
the graph a run really executes.  Plain data, no Ray.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from hybrid_shuffle.operators.base import Operator
from hybrid_shuffle.plan.edge_rules import EdgeFacts
from hybrid_shuffle.shuffle.routing import Partitioner

if TYPE_CHECKING:
    from hybrid_shuffle.plan.cache import Cache
    from hybrid_shuffle.plan.join_switch import SwitchableJoin

__all__ = ["ExchangeSpec", "LogicalNode"]


@dataclass
class ExchangeSpec:
    """How a node reads one input across an exchange (absent: forward, chainable)."""

    partitioner: Partitioner
    edge: str | None = None
    mode: str | None = None
    #: the consumer's parallelism, ``"auto"`` (adaptive) or None (the config's)
    partitions: int | str | None = None
    #: the producer-side combiner of this exchange (see ``JobEdge.combiner``)
    combiner: Operator | None = None
    #: ``mode`` goes against the output-on-EOF rule on purpose: explain notes it instead
    #: of warning (``JobEdge.mode_kept``); only with ``mode``
    keep: bool = False
    #: what the exchange is, for ``edge_rules:`` (a translated Spark exchange says; else
    #: derived from the partitioner and the consumer: ``plan.edge_rules``)
    facts: EdgeFacts | None = None


@dataclass(eq=False)
class LogicalNode:
    id: int
    name: str
    operator: Operator | None
    #: what the node reads as built (``inputs`` is what the next run reads)
    lineage: list[tuple[LogicalNode, ExchangeSpec | None]] = field(default_factory=list)
    #: set for sources and fixed by the user; resolved by the planner otherwise
    parallelism: int | None = None
    source_splits: list[list[Any]] | None = None
    source_schema: pa.Schema | None = None
    #: sources whose data is fetched only when the job runs (from_spark): given the
    #: columns to keep (``None``: all), returns the refs of every split
    load: Callable[[Sequence[str] | None], list[Any]] | None = None
    #: a lazy source whose ``load`` is cheap (it only plans splits, read by the tasks:
    #: ``from_parquet``): loaded again every run, so each run reads the columns it needs
    reload: bool = False
    #: the cache this node fills (built by ``Stream.cache``: it has a lineage) or reads
    #: (built by ``Job.from_cache``: no lineage)
    cache: Cache | None = None
    #: the slot sharing group set in code (``Stream.slot_sharing_group``); unset, a node
    #: inherits its inputs' group when they agree (Flink's rule)
    slot_sharing_group: str | None = None
    #: nodes with the same key run subtask i on the same executor (``co_locate_with``)
    co_location: str | None = None
    #: a FLIP-44 local operator (``local_key_by``): it runs in its input's tasks, so the
    #: planner chains it there and refuses a parallelism or group that would not let it
    local: bool = False
    #: a translated shuffled join's stage that may become a broadcast join at run time
    #: (``plan.join_switch``)
    switchable: SwitchableJoin | None = None

    @property
    def reads_cache(self) -> bool:
        """The next run reads the cache's partitions here: a ``from_cache`` node always
        (the lineage runs first if the cache is empty), a cache node once filled."""
        return self.cache is not None and (not self.lineage or self.cache.readable)

    @property
    def fills_cache(self) -> bool:
        """The next run computes this cache node and keeps its output."""
        return self.cache is not None and not self.reads_cache

    @property
    def inputs(self) -> list[tuple[LogicalNode, ExchangeSpec | None]]:
        """What the next run reads: the lineage, or nothing for a cache read."""
        return [] if self.reads_cache else self.lineage

    @property
    def is_source(self) -> bool:
        return self.source_splits is not None or self.load is not None or self.reads_cache

    def resolve(self, columns: frozenset[str] | None = None) -> None:
        """Fetch a lazy source's data, only ``columns`` of it (``None``: all; column pruning
        decides), and deal its refs to the subtasks."""
        if self.load is not None and (self.source_splits is None or self.reload):
            assert self.parallelism is not None
            keep = None
            if columns is not None and self.source_schema is not None:
                keep = [n for n in self.source_schema.names if n in columns]
            refs = self.load(keep)
            self.source_splits = [refs[i :: self.parallelism] for i in range(self.parallelism)]
