"""Whether every region can ever deploy: a blocking edge must not wait on its own region.

A region's subtasks start together, and a consumer of a blocking edge starts only
once the edge's producer subtasks finished.  So a blocking edge whose two ends
are tied into one pipelined region (a diamond whose one side is pipelined and
whose other side ends in a blocking edge) waits for a producer that cannot start
before it: the region can never deploy.  The same holds across regions when the
consumer's region feeds, through any edges, the producer it waits for.

The rule, per subtask as the scheduler deploys: the start of a region comes after
the finish of each producer subtask its blocking inputs read; a subtask finishes
after its region started and after every subtask it reads from finished (it reads
to the end of its inputs).  A blocking edge is undeployable when that order has a
cycle through it.  ``check_deployable`` rejects such a job when it is planned,
naming the edge and the mode changes that would fix it (each one tried).  Plain
Python.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Mapping
from dataclasses import dataclass

from hybrid_shuffle.errors import PlanError
from hybrid_shuffle.plan.graph import JobEdge, JobGraph, VertexId
from hybrid_shuffle.plan.regions import TaskKey, task_pairs
from hybrid_shuffle.shuffle.partition_type import Mode

__all__ = ["check_deployable", "undeployable_edges"]

#: the modes a fix may set, one per kind of consuming constraint
_FIXES = (Mode.PIPELINED, Mode.HYBRID_SELECTIVE, Mode.BLOCKING)


def _kind(edge: JobEdge, override: Mapping[str, Mode]) -> Mode:
    """``pipelined``, ``blocking``, or ``hybrid-selective`` for any hybrid mode."""
    mode = override.get(str(edge.name))
    if mode is not None:
        return mode
    if edge.partition_type.must_be_pipelined():
        return Mode.PIPELINED
    if edge.partition_type.is_blocking():
        return Mode.BLOCKING
    return Mode.HYBRID_SELECTIVE


@dataclass(frozen=True)
class _Start:
    """The start of the region whose root subtask is ``root``."""

    root: TaskKey


@dataclass(frozen=True)
class _Finish:
    """The finish of one subtask."""

    task: TaskKey


_Node = _Start | _Finish


def undeployable_edges(graph: JobGraph, override: Mapping[str, Mode] | None = None) -> list[str]:
    """The blocking edges (by name, in the graph's order) whose consumers would wait
    forever, with the modes in ``override`` (edge name -> mode) in place of the graph's.

    Vertex by vertex first (one subtask each, every edge all-to-all): a cycle between
    subtasks is one between their vertices too, so a graph clear there is clear (the
    usual case, at the cost of its edges, not of their subtask pairs)."""
    modes = {str(e.name): _kind(e, override or {}) for e in graph.edges}
    if not _stuck(graph, modes, coarse=True):
        return []
    return _stuck(graph, modes, coarse=False)


def _stuck(graph: JobGraph, modes: Mapping[str, Mode], coarse: bool) -> list[str]:
    parent: dict[TaskKey, TaskKey] = {}

    def find(x: TaskKey) -> TaskKey:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def pairs_of(edge: JobEdge) -> list[tuple[TaskKey, TaskKey]]:
        return [((edge.source, 0), (edge.target, 0))] if coarse else task_pairs(graph, edge)

    pairs = {str(e.name): pairs_of(e) for e in graph.edges}
    for edge in graph.edges:
        if modes[str(edge.name)] is Mode.PIPELINED:
            for a, b in pairs[str(edge.name)]:
                ra, rb = find(a), find(b)
                if ra != rb:
                    parent[max(ra, rb)] = min(ra, rb)
    # "x before y" arcs of the order the module docstring describes
    after: dict[_Node, set[_Node]] = defaultdict(set)
    for vid, vertex in graph.vertices.items():
        for i in range(1 if coarse else vertex.parallelism):
            after[_Start(find((vid, i)))].add(_Finish((vid, i)))
    for edge in graph.edges:
        blocking = modes[str(edge.name)] is Mode.BLOCKING
        for a, b in pairs[str(edge.name)]:
            after[_Finish(a)].add(_Finish(b))
            if blocking:
                after[_Finish(a)].add(_Start(find(b)))
    component = _components(after)
    return [
        str(e.name)
        for e in graph.edges
        if modes[str(e.name)] is Mode.BLOCKING
        and any(component[_Finish(a)] == component[_Start(find(b))] for a, b in pairs[str(e.name)])
    ]


def _components(arcs: Mapping[_Node, set[_Node]]) -> dict[_Node, int]:
    """Node -> its strongly connected component (Tarjan's, without recursion)."""
    nodes = set(arcs) | {n for targets in arcs.values() for n in targets}
    index: dict[_Node, int] = {}
    low: dict[_Node, int] = {}
    component: dict[_Node, int] = {}
    stack: list[_Node] = []
    on_stack: set[_Node] = set()
    counter, labels = 0, 0
    for start in nodes:
        if start in index:
            continue
        work: list[tuple[_Node, list[_Node]]] = [(start, list(arcs.get(start, ())))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, list(arcs.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component[member] = labels
                    if member == node:
                        break
                labels += 1
    return component


def _path_back(graph: JobGraph, edge: JobEdge) -> list[JobEdge]:
    """The edges of a shortest way from ``edge``'s consumer back to its producer: along
    any edge downstream, or along a pipelined edge either way (within a region)."""
    came: dict[VertexId, JobEdge | None] = {edge.target: None}
    queue = deque([edge.target])
    while queue:
        vid = queue.popleft()
        if vid == edge.source:
            break
        vertex = graph.vertices[vid]
        steps = [(e, e.target) for e in vertex.outputs if e is not edge]
        steps += [(e, e.source) for e in vertex.inputs if e.partition_type.must_be_pipelined()]
        for step, nxt in steps:
            if nxt not in came:
                came[nxt] = step
                queue.append(nxt)
    path: list[JobEdge] = []
    vid = edge.source
    while (back := came.get(vid)) is not None:
        path.append(back)
        vid = back.source if back.target == vid else back.target
    return list(reversed(path))


def _fixes(graph: JobGraph, name: str, candidates: list[JobEdge], before: set[str]) -> list[str]:
    """``edges.<name>.mode <modes>`` for each single mode change (of ``candidates``) that
    makes the whole job deployable; failing any, those that make edge ``name`` deployable
    and no other edge undeployable."""
    whole: dict[str, list[str]] = defaultdict(list)
    partial: dict[str, list[str]] = defaultdict(list)
    for edge in candidates:
        current = _kind(edge, {})
        for mode in _FIXES:
            if mode is current:
                continue
            after = set(undeployable_edges(graph, {str(edge.name): mode}))
            if not after:
                whole[str(edge.name)].append(str(mode))
            elif after <= before - {name}:
                partial[str(edge.name)].append(str(mode))
    return [f"edges.{edge}.mode {' or '.join(modes)}" for edge, modes in (whole or partial).items()]


def check_deployable(graph: JobGraph, vertex_region: Mapping[VertexId, str]) -> None:
    """Raise ``PlanError`` naming the first blocking edge whose consumer would wait
    forever (see the module docstring), its way back, and the mode changes that fix it."""
    stuck = undeployable_edges(graph)
    if not stuck:
        return
    edge = graph.edge(stuck[0])
    path = _path_back(graph, edge)
    names = ", ".join(str(e.name) for e in path)
    same = vertex_region[edge.source] == vertex_region[edge.target]
    if same and all(e.partition_type.must_be_pipelined() for e in path):
        why = (
            f"but pipelined edges ({names}) tie both its ends into region "
            f"{vertex_region[edge.source]}, whose subtasks all start at once, so its consumer "
            "would wait forever for its producer to finish"
        )
    else:
        why = (
            f"but edges {names} lead from its consumer back to its producer's region, so "
            "the two would wait forever for each other"
        )
    fixes = _fixes(graph, str(edge.name), [edge, *path], set(stuck))
    fix = (
        f"change one of: {'; '.join(fixes)} (in the YAML's edges:)"
        if fixes
        else f"set edges.{edge.name}.mode to hybrid-selective"
    )
    raise PlanError(f"job '{graph.job_name}': edge '{edge.name}' is blocking, {why}; {fix}")
