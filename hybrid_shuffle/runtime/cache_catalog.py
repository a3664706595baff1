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

The catalog holds its caches weakly.  A cache stays as long as something can
read it: its ``CachedStream``, or a job with a node that fills or reads it (the
cache holds its lineage, and the lineage its sources).  Once the garbage
collector takes it, its partitions are released at the catalog's next call and
its name is free again.

Cached bytes live in the holders' result-partition memory (``shuffle.memory_budget``),
so they count against it and spill to disk beyond it, as a blocking partition does.
Plain Python.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hybrid_shuffle.errors import PlanError
from hybrid_shuffle.plan.cache import Cache, CacheLayout, CacheState, cache_edge
from hybrid_shuffle.plan.logical import LogicalNode
from hybrid_shuffle.runtime.partition_tracker import PartitionTracker
from hybrid_shuffle.runtime.task import TaskReport
from hybrid_shuffle.shuffle.api import PartitionId, ShuffleDescriptor

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
        #: name -> the cache, weakly: a cache no one can read any more (its
        #: ``CachedStream`` and every job reading it are gone) must not keep its lineage,
        #: and with it the lineage's source tables, alive for the session's life
        self._caches: dict[str, weakref.ref[Cache]] = {}
        #: ``id(cache)`` -> the partitions a live cache holds, for its finalizer
        self._held: dict[int, list[PartitionId]] = {}
        #: partitions of caches collected since the last call, released by the next one
        #: (a finalizer runs inside whatever code the garbage collector interrupted)
        self._orphans: list[PartitionId] = []

    def new_name(self, name: str | None, default: str) -> str:
        """``name`` if free (a taken one is an error), else ``default`` or the first of
        ``default_2``, ``default_3``, ... that is free."""
        taken = {c.name for c in self._live()}
        if name is not None:
            if name in taken:
                raise PlanError(
                    f"cache name '{name}' is taken in this session; invalidate() that cache "
                    "and use another name, or leave name= out for a generated one"
                )
            return name
        name, n = default, 1
        while name in taken:
            n += 1
            name = f"{default}_{n}"
        return name

    def create(self, name: str, node: LogicalNode, job: Any) -> Cache:
        """A new, empty cache (``name`` from ``new_name``) for ``node`` in ``job``."""
        cache = Cache(name, self.session_id, node, job)
        self._caches[name] = weakref.ref(cache)
        self._held[id(cache)] = []
        weakref.finalize(cache, self._collected, id(cache))
        return cache

    def check(self, cache: Cache) -> None:
        """Mark a filled cache ``lost`` if the tracker lost one of its partitions, and
        release the others (the next run fills it again)."""
        self._release_orphans()
        if cache.readable and not self._tracker.all_produced(_ids(cache.partitions)):
            log.warning("cache '%s': a partition was lost with its holder", cache.name)
            self._release(cache, CacheState.LOST)

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
        self._held[id(cache)] = _ids(partitions)
        self.check(cache)  # a holder may have died between the end of the job and now

    def hit(self, cache: Cache) -> None:
        """A run read ``cache`` instead of computing it."""
        cache.hits += 1

    def invalidate(self, cache: Cache) -> None:
        self._release_orphans()
        self._release(cache, CacheState.EMPTY)

    def caches(self) -> list[CacheInfo]:
        self._tracker.poll_lost()
        live = self._live()
        for cache in live:
            self.check(cache)
        return [_info(c) for c in live]

    def close(self) -> None:
        """The session closes: its shuffle master releases every partition."""
        for cache in self._live():
            cache.clear()
        self._held.clear()
        self._orphans.clear()

    def _release(self, cache: Cache, state: CacheState) -> None:
        self._held[id(cache)] = []
        self._tracker.release(_ids(cache.clear(state)))

    def _live(self) -> list[Cache]:
        self._release_orphans()
        live = [(n, r()) for n, r in self._caches.items()]
        for name, cache in live:
            if cache is None:
                del self._caches[name]
        return [c for _, c in live if c is not None]

    def _collected(self, key: int) -> None:
        """A cache was garbage-collected: its partitions are orphans (the finalizer)."""
        self._orphans.extend(self._held.pop(key, []))

    def _release_orphans(self) -> None:
        orphans, self._orphans = self._orphans, []
        if orphans:
            log.info("releasing %d partitions of caches no one can read", len(orphans))
            self._tracker.release(orphans)


def _ids(partitions: list[ShuffleDescriptor]) -> list[PartitionId]:
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
