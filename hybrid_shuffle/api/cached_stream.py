"""``CachedStream``: a stream whose result is kept for later runs (FLIP-205's cache).

``stream.cache()`` returns one.  Nothing is computed then: the first run that
reaches it (a ``collect()`` of it or of anything built on it, or ``fill()``)
computes it and keeps its partitions, blocking-persistent, in the holders of
the session's shuffle service (the executors, or the partition stores with
``shuffle.service: external``).  Every later run reads them instead of the
lineage: a new branch built on the cached stream in its own job, or
``other_job.from_cache(cached)`` in another job of the session.

A cache whose partition was lost with its holder is filled again from its
lineage when it is next read, and a read that loses one midway runs again;
``invalidate()`` empties it (the next read fills it again); the session's
``close()`` empties them all.  ``Session.caches()`` reports them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hybrid_shuffle.api.stream import Stream
from hybrid_shuffle.plan.cache import Cache

if TYPE_CHECKING:
    from hybrid_shuffle.api.job import Job
    from hybrid_shuffle.plan.logical import LogicalNode
    from hybrid_shuffle.runtime.cache_catalog import CacheInfo

__all__ = ["CachedStream"]


class CachedStream(Stream):
    """A ``Stream`` whose result the session keeps; see the module docstring."""

    def __init__(self, job: Job, node: LogicalNode, cache: Cache) -> None:
        super().__init__(job, node)
        self._cache = cache

    @property
    def name(self) -> str:
        """The cache's name in ``Session.caches()`` and ``explain()``."""
        return self._cache.name

    def fill(self, timeout: float | None = None) -> CacheInfo:
        """Compute the cache now if it is not filled (nothing comes back to the driver but
        the report), as Spark's ``df.cache().count()`` or Ray Data's ``materialize()``."""
        self.job.cluster.check_open()
        self.job.cluster.cache_catalog.check(self._cache)
        if not self._cache.readable:
            self.job.run(self, timeout, collect=False)
        return self.info()

    def invalidate(self) -> None:
        """Release the cache's partitions; the next run that reaches it fills it again.
        Idempotent, and a no-op once the session is closed (close released them)."""
        if not self.job.cluster.closed:
            self.job.cluster.cache_catalog.invalidate(self._cache)

    def info(self) -> CacheInfo:
        """This cache's line of ``Session.caches()``."""
        return next(c for c in self.job.cluster.caches() if c.name == self._cache.name)
