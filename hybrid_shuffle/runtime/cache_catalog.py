"""The session's caches (FLIP-205): names, fills, losses, invalidation, the report.

A ``Cache`` (``plan.cache``) is plain state; this catalog is the one place that
changes it against the partition tracker, which holds the partitions
themselves (promoted past their job, ``PartitionTracker.promote``):

- ``filled`` records what a successful run wrote, unless a partition was lost
  already (then the cache is ``lost`` at once);
- ``check`` is asked before every run that reaches a cache: a filled cache
  with a partition the tracker saw lost (its executor died or was replaced, its
  store died) is marked ``lost`` and its surviving partitions are released, so
  the run fills it again from its lineage;
- ``hit`` counts a run that read the cache instead of computing it;
- ``invalidate`` releases the partitions and empties the cache;
- ``close`` empties every cache (the shuffle master releases what it holds).

Cached bytes live in the holders' result-partition memory (``shuffle.memory_budget``),
so they count against it and spill to disk beyond it, as a blocking partition does.
Plain Python.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hybrid_shuffle.errors import PlanError
from hybrid_shuffle.plan.cache import Cache, CacheLayout, CacheState, cache_edge
from hybrid_shuffle.plan.logical import LogicalNode
from hybrid_shuffle.runtime.partition_tracker import PartitionTracker, TrackedState
from hybrid_shuffle.runtime.task import TaskReport
from hybrid_shuffle.shuffle.api import ShuffleDescriptor

__all__ = ["CacheCatalog", "CacheInfo"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CacheInfo:
    """One cache, as ``Session.caches()`` reports it."""

    name: str
    #: ``empty`` (never filled, or invalidated), ``filled`` or ``lost`` (a partition went
    #: with its holder; the next read fills it again)
    state: str
    rows: int
    bytes: int
    #: of ``bytes``, what its holders keep on disk (their memory budget was full)
    spilled_bytes: int
    #: one per subtask of the vertex that filled it
    partitions: int
    #: where its partitions are held ("executor 0", or a partition store)
    holders: tuple[str, ...]
    #: runs that read it instead of computing it
    hits: int
    #: runs that filled it
    fills: int
    #: ``hash(k) into 4`` when the partitions keep a hash partitioning, else None
    partitioning: str | None


class CacheCatalog:
    def __init__(self, session_id: str, tracker: PartitionTracker) -> None:
        self.session_id = session_id
        self._tracker = tracker
        self._caches: dict[str, Cache] = {}

    def new_name(self, name: str | None, default: str) -> str:
        """``name`` if free (a taken one is an error), else ``default`` or the first of
        ``default_2``, ``default_3``, ... that is free."""
        if name is not None:
            if name in self._caches:
                raise PlanError(
                    f"cache name '{name}' is taken in this session; invalidate() that cache "
                    "and use another name, or leave name= out for a generated one"
                )
            return name
        name, n = default, 1
        while name in self._caches:
            n += 1
            name = f"{default}_{n}"
        return name

    def create(self, name: str, node: LogicalNode, job: Any) -> Cache:
        """A new, empty cache (``name`` from ``new_name``) for ``node`` in ``job``."""
        cache = Cache(name, self.session_id, node, job)
        self._caches[name] = cache
        return cache

    def check(self, cache: Cache) -> None:
        """Mark a filled cache ``lost`` if the tracker lost one of its partitions, and
        release the others (the next run fills it again)."""
        if cache.readable and not self._all_held(cache.partitions):
            log.warning("cache '%s': a partition was lost with its holder", cache.name)
            self._tracker.release(_ids(cache.clear(CacheState.LOST)))

    def filled(
        self,
        cache: Cache,
        partitions: list[ShuffleDescriptor],
        layout: CacheLayout,
        reports: Sequence[TaskReport],
    ) -> None:
        """A run wrote ``partitions`` for ``cache`` (its reports say how much)."""
        edge = cache_edge(cache.name)
        writes = [w for r in reports for w in r.writes if w.edge == edge]
        cache.set_filled(
            partitions,
            layout,
            sum(w.rows for w in writes),
            sum(w.bytes for w in writes),
            sum(w.spilled_bytes for w in writes),
        )
        self.check(cache)  # a holder may have died between the end of the job and now

    def hit(self, cache: Cache) -> None:
        """A run read ``cache`` instead of computing it."""
        cache.hits += 1

    def invalidate(self, cache: Cache) -> None:
        self._tracker.release(_ids(cache.clear()))

    def caches(self) -> list[CacheInfo]:
        self._tracker.poll_lost()
        for cache in self._caches.values():
            self.check(cache)
        return [_info(c) for c in self._caches.values()]

    def close(self) -> None:
        """The session closes: its shuffle master releases every partition."""
        for cache in self._caches.values():
            cache.clear()

    def _all_held(self, partitions: list[ShuffleDescriptor]) -> bool:
        states = self._tracker.states(_ids(partitions))
        return all(s is TrackedState.PRODUCED for s in states)


def _ids(partitions: list[ShuffleDescriptor]) -> list[Any]:
    return [d.partition.partition_id for d in partitions]


def _info(cache: Cache) -> CacheInfo:
    layout = cache.filled
    return CacheInfo(
        name=cache.name,
        state=str(cache.state),
        rows=cache.rows,
        bytes=cache.bytes,
        spilled_bytes=cache.spilled_bytes,
        partitions=len(cache.partitions),
        holders=tuple(sorted({d.location_name for d in cache.partitions})),
        hits=cache.hits,
        fills=cache.fills,
        partitioning=(
            layout.partitioning.describe()
            if layout is not None and layout.partitioning is not None
            else None
        ),
    )
