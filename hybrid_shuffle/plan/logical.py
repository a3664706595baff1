"""The logical job the API builds: nodes (an operator each) and how they read inputs.

``Stream`` calls add ``LogicalNode`` values; ``plan_job`` turns them into a
``JobGraph``.  Plain data, no Ray.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from hybrid_shuffle.operators.base import Operator
from hybrid_shuffle.shuffle.routing import Partitioner

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


@dataclass(eq=False)
class LogicalNode:
    id: int
    name: str
    operator: Operator | None
    inputs: list[tuple[LogicalNode, ExchangeSpec | None]] = field(default_factory=list)
    #: set for sources and fixed by the user; resolved by the planner otherwise
    parallelism: int | None = None
    source_splits: list[list[Any]] | None = None
    source_schema: pa.Schema | None = None
    #: sources whose data is fetched only when the job runs (from_spark): given the
    #: columns to keep (``None``: all), returns the refs of every split
    load: Callable[[Sequence[str] | None], list[Any]] | None = None

    @property
    def is_source(self) -> bool:
        return self.source_splits is not None or self.load is not None

    def resolve(self, columns: frozenset[str] | None = None) -> None:
        """Fetch a lazy source's data, only ``columns`` of it (``None``: all; column pruning
        decides), and deal its refs to the subtasks."""
        if self.load is not None and self.source_splits is None:
            assert self.parallelism is not None
            keep = None
            if columns is not None and self.source_schema is not None:
                keep = [n for n in self.source_schema.names if n in columns]
            refs = self.load(keep)
            self.source_splits = [refs[i :: self.parallelism] for i in range(self.parallelism)]
