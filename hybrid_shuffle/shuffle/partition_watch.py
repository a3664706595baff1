"""Who waits on which partitions of one holder, so a change wakes only them.

One consumer request covers many partitions of one holder (``poll_many``) and
must wake when *any* of them gets a buffer, finishes, fails or is released,
without a thread per partition, and without waking every other request held
open in the same process (on a busy executor, dozens: waking them all on every
buffer costs the producer's thread its share of the GIL).  A waiter subscribes
an event to its partitions *before* it looks at them, clears it before each
look, and sleeps on it; a change after the clear sets it, so none is missed.
The lock is a leaf: nothing else is acquired while it is held, so partitions
notify under their own locks.
"""

from __future__ import annotations

import threading
from collections.abc import Collection

from hybrid_shuffle.shuffle.api import PartitionId

__all__ = ["PartitionWatch"]


class PartitionWatch:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[PartitionId, set[threading.Event]] = {}

    def subscribe(self, partition_ids: Collection[PartitionId], wake: threading.Event) -> None:
        with self._lock:
            for pid in partition_ids:
                self._waiters.setdefault(pid, set()).add(wake)

    def unsubscribe(self, partition_ids: Collection[PartitionId], wake: threading.Event) -> None:
        with self._lock:
            for pid in partition_ids:
                waiters = self._waiters.get(pid)
                if waiters is not None:
                    waiters.discard(wake)
                    if not waiters:
                        del self._waiters[pid]

    def changed(self, partition_id: PartitionId) -> None:
        """Wake every waiter subscribed to ``partition_id``."""
        with self._lock:
            waiters = list(self._waiters.get(partition_id, ()))
        for wake in waiters:
            wake.set()
