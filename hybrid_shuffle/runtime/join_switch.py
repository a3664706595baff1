"""The scheduler's side of a shuffled join becoming a broadcast join at run time
(``plan.join_switch`` says what and why; this says *when*).

A held probe producer's region does not deploy (``held``).  Once the region is the first
in the queue and the build side's producer has finished (every subtask),
``decide_joins`` measures the bytes it wrote over the build edge and lets the candidate
decide.  A join whose finished build subtasks already wrote more than its limit
(``JoinSwitch.limit``) is decided then, as staying shuffled: the rest can only add
bytes, so the probe side need not wait for it, and starts beside the build side's last
tasks on a core the wait left idle (TPC-H's Q4, Q9 and Q13 at SF1: 5-8% faster).  A
switched build edge (and each broadcast input that went with the join) is then read
whole by every probe task over reader 0, so its partitions (perhaps registered already,
with the readers the join would have had) are given that many readers: the tracker
counts channels as a set, never reaches the count, and keeps them until the job ends (a
restarted probe task reads them again; ``runtime.deployment`` registers a re-run
producer's partitions the same way).  Plain Python, no Ray."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Set

from hybrid_shuffle.plan.graph import JobGraph
from hybrid_shuffle.plan.join_switch import AdaptiveChange
from hybrid_shuffle.plan.regions import Region, TaskKey
from hybrid_shuffle.runtime.partition_tracker import PartitionTracker
from hybrid_shuffle.runtime.task import TaskReport

__all__ = ["decide_joins", "held"]

log = logging.getLogger(__name__)


def held(graph: JobGraph, region: Region) -> bool:
    """Whether a task of ``region`` is a probe producer waiting for a join's decision."""
    if not graph.join_switches:
        return False
    waiting = {big for _, big in graph.holds()}
    return bool(waiting) and any(vid in waiting for vid, _ in region.tasks)


def decide_joins(
    graph: JobGraph,
    region: Region,
    finished: Set[TaskKey],
    reports: Iterable[TaskReport],
    job_id: str,
    tracker: PartitionTracker,
) -> list[AdaptiveChange]:
    """Decide the joins holding ``region``'s vertices whose build side finished; the
    changes made (none: nothing to decide yet)."""
    if not graph.join_switches:
        return []
    vertices = {vid for vid, _ in region.tasks}
    changes: list[AdaptiveChange] = []
    for candidate in graph.join_switches:
        if not candidate.holding:
            continue
        small, big = candidate.producers(graph)
        if big not in vertices:
            continue
        subtasks = graph.vertices[small].parallelism
        done = sum((small, i) in finished for i in range(subtasks))
        written = sum(w.bytes for r in reports for w in r.writes if w.edge == candidate.build_edge)
        if done < subtasks and written <= candidate.limit(graph):
            continue  # the build side may still be small: wait for the rest of it
        change = candidate.decide(graph, written, done, subtasks)
        if change.switched:
            probe = graph.vertices[graph.edge(candidate.build_edge).target]
            for edge in probe.inputs:
                if edge.reads_whole is not None:
                    readers = edge.reads_whole * max(probe.parallelism, 2)
                    tracker.readers_decided(job_id, edge.name, readers)
        log.info("job %s: %s", job_id, change.describe())
        changes.append(change)
    return changes
