"""Pipelined regions: the subtasks that must run at the same time, and the slot check.

Regions are computed per *subtask* as in Flink: pipelined edges glue subtasks
together (all-to-all edges glue every producer subtask to every consumer
subtask, forward edges pair subtask i with i), and each connected component
must get all its slots at once.  A region larger than the session's slots is
rejected before anything runs, naming the edges to switch.  Plain Python.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from hybrid_shuffle.errors import SlotsExceededError
from hybrid_shuffle.plan.graph import JobEdge, JobGraph, VertexId

__all__ = [
    "DEFAULT_GROUP",
    "Region",
    "TaskKey",
    "check_slots",
    "pipelined_regions",
    "task_pairs",
    "vertex_regions",
]

TaskKey = tuple[VertexId, int]

#: the slot sharing group of a vertex no code or YAML put in one
DEFAULT_GROUP = "default"


@dataclass
class Region:
    """Subtasks that must run at the same time.

    Slot sharing, as Flink's: one slot holds at most one subtask of each vertex,
    and only tasks of one slot sharing group, so a region needs, for each of its
    groups, as many slots as that group's widest vertex has subtasks in it.
    """

    id: int
    tasks: list[TaskKey]
    #: the pipelined edges that glue it together
    edges: list[str]
    #: vertex -> its slot sharing group (absent: ``default``)
    groups: dict[VertexId, str] = field(default_factory=dict)

    def group_slots(self) -> dict[str, int]:
        """Group -> the slots it needs (its widest vertex's subtasks in the region)."""
        counts: dict[VertexId, int] = defaultdict(int)
        for vid, _ in self.tasks:
            counts[vid] += 1
        need: dict[str, int] = {}
        for vid, count in counts.items():
            group = self.groups.get(vid, DEFAULT_GROUP)
            need[group] = max(need.get(group, 0), count)
        return need

    @property
    def slots(self) -> int:
        return sum(self.group_slots().values())


def task_pairs(graph: JobGraph, edge: JobEdge) -> list[tuple[TaskKey, TaskKey]]:
    """The (producer subtask, consumer subtask) pairs ``edge`` connects: every pair on an
    all-to-all edge, subtask i with i on a forward one."""
    src, dst = graph.vertices[edge.source], graph.vertices[edge.target]
    if edge.partitioner.is_all_to_all():
        return [
            ((src.id, i), (dst.id, j))
            for i in range(src.parallelism)
            for j in range(dst.parallelism)
        ]
    return [((src.id, i), (dst.id, i)) for i in range(src.parallelism)]


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[Any, Any] = {}

    def find(self, x: Any) -> Any:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: Any, b: Any) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def pipelined_regions(graph: JobGraph) -> list[Region]:
    """Subtask-level pipelined regions, in deployment order (producers first; a probe
    producer held for a join's build side after that side's producer:
    ``JobGraph.holds``)."""
    uf = _UnionFind()
    order = graph.topological_order()
    for vid in order:
        for i in range(graph.vertices[vid].parallelism):
            uf.find((vid, i))
    pipelined = [e for e in graph.edges if e.partition_type.must_be_pipelined()]
    for edge in pipelined:
        for a, b in task_pairs(graph, edge):
            uf.union(a, b)
    position = {vid: n for n, vid in enumerate(order)}
    members: dict[Any, list[TaskKey]] = defaultdict(list)
    for vid in order:
        for i in range(graph.vertices[vid].parallelism):
            members[uf.find((vid, i))].append((vid, i))
    first = {root: min((position[v], i) for v, i in ts) for root, ts in members.items()}
    reads_from: dict[Any, set[Any]] = defaultdict(set)
    for edge in graph.edges:
        if edge.partition_type.must_be_pipelined():
            continue
        for a, b in task_pairs(graph, edge):
            ra, rb = uf.find(a), uf.find(b)
            if ra != rb:
                reads_from[rb].add(ra)
    for small, big in graph.holds():  # a held probe producer comes after the build side
        for i in range(graph.vertices[small].parallelism):
            for j in range(graph.vertices[big].parallelism):
                ra, rb = uf.find((small, i)), uf.find((big, j))
                if ra != rb:
                    reads_from[rb].add(ra)
    groups = [members[root] for root in _producers_first(first, reads_from)]
    regions = []
    for n, tasks in enumerate(groups):
        inside = {v for v, _ in tasks}
        names = [str(e.name) for e in pipelined if e.source in inside and e.target in inside]
        group_of = {v: graph.vertices[v].slot_sharing_group for v in inside}
        regions.append(Region(n, tasks, names, group_of))
    return regions


def _producers_first(first: dict[Any, Any], reads_from: dict[Any, set[Any]]) -> list[Any]:
    """The regions (by root) so that each comes after every region it reads from, ties
    broken by the position of their first subtask.  The topological order of vertices
    alone is not enough: a join whose pipelined input was declared first would be put
    before the blocking input it waits for, and that region could never deploy.  Regions
    in a cycle (a region that feeds and reads another) keep the positional order."""
    waiting = {root: len(reads_from.get(root, ())) for root in first}
    feeds: dict[Any, list[Any]] = defaultdict(list)
    for consumer, producers in reads_from.items():
        for producer in producers:
            feeds[producer].append(consumer)
    ready = [(first[root], n, root) for n, root in enumerate(first) if waiting[root] == 0]
    heapq.heapify(ready)
    index = {root: n for n, root in enumerate(first)}
    ordered: list[Any] = []
    while ready:
        _, _, root = heapq.heappop(ready)
        ordered.append(root)
        for consumer in feeds[root]:
            waiting[consumer] -= 1
            if waiting[consumer] == 0:
                heapq.heappush(ready, (first[consumer], index[consumer], consumer))
    placed = set(ordered)
    ordered += sorted((r for r in first if r not in placed), key=lambda r: first[r])
    return ordered


def vertex_regions(graph: JobGraph) -> dict[VertexId, str]:
    uf = _UnionFind()
    for vid in graph.vertices:
        uf.find(vid)
    for e in graph.edges:
        if e.partition_type.must_be_pipelined():
            uf.union(e.source, e.target)
    labels: dict[Any, str] = {}
    result = {}
    for vid in graph.topological_order():
        root = uf.find(vid)
        labels.setdefault(root, f"R{len(labels)}")
        result[vid] = labels[root]
    return result


def check_slots(
    regions: list[Region], vertex_region: dict[VertexId, str], graph: JobGraph, slots: int
) -> None:
    """Raise ``SlotsExceededError`` for the first region needing more than ``slots``."""
    for region in regions:
        if region.slots <= slots:
            continue
        counts: dict[VertexId, int] = defaultdict(int)
        for vid, _ in region.tasks:
            counts[vid] += 1
        parts = ", ".join(f"{graph.vertices[v].name} x{n}" for v, n in counts.items())
        label = vertex_region[region.tasks[0][0]]
        need = region.group_slots()
        groups, fewer = "", ""
        if len(need) > 1:  # slot sharing groups never share a slot: say what each needs
            each = ", ".join(f"'{g}' {n}" for g, n in need.items())
            groups = f" (slot sharing groups {each}: groups never share a slot)"
            fewer = ", put its vertices in fewer slot sharing groups"
        raise SlotsExceededError(
            f"pipelined region {label} ({parts}) needs {region.slots} slots at once{groups} "
            f"but the session has {slots}; set edges {', '.join(region.edges)} to "
            f"hybrid-selective or blocking (edges.<name>.mode in the YAML){fewer}, or raise "
            "slots"
        )
