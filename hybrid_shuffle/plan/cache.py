"""One cached intermediate result (FLIP-205): what the planner and the session know of it.

``Stream.cache()`` adds a *cache node* to its job and a ``Cache`` to the
session.  The cache is filled by the first run that reaches the node: the
vertex that ends with it also writes its output to one ``BLOCKING_PERSISTENT``
partition per subtask, which the partition tracker keeps when the job ends
(``PartitionTracker.promote``).  From then on the node is a source: a later
plan reads the partitions instead of the node's lineage
(``LogicalNode.inputs`` is empty while the cache is filled), and
``Job.from_cache`` adds such a source to another job.

The lineage stays in the cache node's own job, so a cache can always be filled
again: after ``invalidate()``, or when a partition was lost with its holder.
That is FLIP-205's fallback ("re-submit the original job as if the cache had
not been created").

Plain data: the session's ``CacheCatalog`` (``runtime.cache_catalog``) changes
its state and counters, ``Job.plan`` sets ``expected`` (the layout of a cache
not filled yet, for ``explain()``), and the planner reads it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from hybrid_shuffle._words import plural
from hybrid_shuffle.shuffle.api import ShuffleDescriptor

__all__ = ["Cache", "CacheLayout", "CacheState", "HashPartitioning", "cache_edge"]


def cache_edge(name: str) -> str:
    """The edge name a cache's partitions are tracked under (the prefix keeps it apart
    from the job's own edges in the partition tracker and the metrics)."""
    return f"cache:{name}"


@dataclass(frozen=True)
class HashPartitioning:
    """Rows whose ``keys`` hash to ``i`` (the exchange hash, modulo ``count``) are all in
    partition ``i``, and only they are."""

    keys: tuple[str, ...]
    count: int

    def describe(self) -> str:
        return f"hash({', '.join(self.keys)}) into {self.count}"


class CacheState(enum.StrEnum):
    """Where a cache is in its life (``Session.caches()`` reports it)."""

    EMPTY = "empty"  # never filled, or invalidated: the next read fills it
    FILLED = "filled"  # every partition is held: reads use it
    LOST = "lost"  # a partition was lost with its holder: the next read fills it again


@dataclass(frozen=True)
class CacheLayout:
    """What a read of the cache looks like: one subtask per partition, the schema, and
    the hash partitioning the partitions keep (if the cache was hash-partitioned)."""

    parallelism: int
    schema: pa.Schema | None
    partitioning: HashPartitioning | None


@dataclass(eq=False)
class Cache:
    name: str
    session_id: str
    #: the lineage, opaque to the planner: the cache node (a ``LogicalNode`` whose
    #: inputs are the lineage) and its job (``api.job.Job``: a fill runs there, with
    #: that job's config and sources)
    node: Any
    job: Any
    state: CacheState = CacheState.EMPTY
    #: per partition (= per subtask of the vertex that filled it): where it is held
    partitions: list[ShuffleDescriptor] = field(default_factory=list)
    #: the layout of the partitions once filled
    filled: CacheLayout | None = None
    #: before the first fill: the layout planned from the lineage (for ``explain()``)
    expected: CacheLayout | None = None
    rows: int = 0
    bytes: int = 0
    #: of ``bytes``, what went to disk (the holder's memory budget was full)
    spilled_bytes: int = 0
    #: runs that read the cache instead of computing it
    hits: int = 0
    #: runs that filled it (more than one: it was invalidated or lost in between)
    fills: int = 0

    @property
    def readable(self) -> bool:
        return self.state is CacheState.FILLED

    @property
    def layout(self) -> CacheLayout:
        """The filled layout, or the expected one before the cache was filled."""
        layout = self.filled or self.expected
        if layout is None:  # the API sets ``expected`` before it plans a read
            raise AssertionError(f"cache '{self.name}' has no layout yet")
        return layout

    def describe(self) -> str:
        """For ``explain()``: the state, partitions and partitioning."""
        layout = self.filled or self.expected
        parts = ""
        if layout is not None:
            parts = f", {layout.parallelism} {plural(layout.parallelism, 'partition')}"
        if layout is not None and layout.partitioning is not None:
            parts += f", {layout.partitioning.describe()}"
        if self.readable:
            parts += f", {self.rows:,} {plural(self.rows, 'row')}, {self.bytes / 2**20:.1f} MiB"
        return f"cache '{self.name}' ({self.state}{parts})"

    def set_filled(
        self,
        partitions: list[ShuffleDescriptor],
        layout: CacheLayout,
        rows: int,
        nbytes: int,
        spilled: int,
    ) -> None:
        self.partitions = list(partitions)
        self.filled = layout
        self.rows, self.bytes, self.spilled_bytes = rows, nbytes, spilled
        self.state = CacheState.FILLED
        self.fills += 1

    def clear(self, state: CacheState = CacheState.EMPTY) -> list[ShuffleDescriptor]:
        """Forget the partitions (the caller releases them); returns them."""
        partitions, self.partitions = self.partitions, []
        self.filled = None
        self.rows = self.bytes = self.spilled_bytes = 0
        self.state = state
        return partitions
