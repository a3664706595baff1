"""Which slot each task of a region runs in: task-balanced, locality kept where free.

Flink's default slot sharing puts subtask i of every vertex of a region into slot
i, which keeps the subtasks joined by forward edges together but piles every
vertex of parallelism 1 onto the first slot: three sources, a union and an
aggregate of parallelism 4 on 4 slots put 5 of their 8 tasks on one executor.
FLIP-370's task-balanced scheduling counts tasks instead.  ``place`` does both:
vertices are placed widest first, and each subtask goes to its slot i unless
another slot it may use (a slot holds at most one subtask of a vertex) carries
fewer tasks, in which case it goes to the least loaded one.  Wide vertices
therefore keep their alignment, narrow ones fill the gaps, and no slot holds
more than ``ceil(tasks / slots)`` tasks of the region.  Plain Python.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from hybrid_shuffle.plan.graph import VertexId
from hybrid_shuffle.plan.regions import TaskKey

__all__ = ["place"]


def place(tasks: Sequence[TaskKey], slots: Sequence[int]) -> dict[TaskKey, int]:
    """The slot (an executor index from ``slots``) of every task of one region; the
    region needs no more slots than ``len(slots)`` (its widest vertex)."""
    by_vertex: dict[VertexId, list[int]] = defaultdict(list)
    order: list[VertexId] = []
    for vertex, subtask in tasks:
        if vertex not in by_vertex:
            order.append(vertex)
        by_vertex[vertex].append(subtask)
    # widest first; among equals, in the region's (topological) order
    order.sort(key=lambda v: -len(by_vertex[v]))
    load = dict.fromkeys(range(len(slots)), 0)
    placed: dict[TaskKey, int] = {}
    for vertex in order:
        free = set(load)
        for subtask in sorted(by_vertex[vertex]):
            preferred = subtask % len(slots)
            least = min(load[s] for s in free)
            if preferred in free and load[preferred] == least:
                chosen = preferred
            else:
                chosen = min(s for s in free if load[s] == least)
            free.discard(chosen)
            load[chosen] += 1
            placed[(vertex, subtask)] = slots[chosen]
    return placed
