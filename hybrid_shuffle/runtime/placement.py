"""Which slot each task of a region runs in: groups apart, tasks balanced, locality kept.

Flink's default slot sharing puts subtask i of every vertex of a region into slot
i, which keeps the subtasks joined by forward edges together but piles every
vertex of parallelism 1 onto the first slot: three sources, a union and an
aggregate of parallelism 4 on 4 slots put 5 of their 8 tasks on one executor.
FLIP-370's task-balanced scheduling counts tasks instead.  ``place`` does both:

- each slot sharing group gets slots of its own (as many as its widest vertex
  has subtasks in the region: ``Region.group_slots``), so tasks of different
  groups never share an executor;
- inside a group, vertices are placed widest first, and each subtask goes to its
  slot i unless another slot it may use (a slot holds at most one subtask of a
  vertex) carries fewer tasks, in which case it goes to the least loaded one.
  Wide vertices keep their alignment, narrow ones fill the gaps, and no slot
  holds more than ``ceil(tasks / slots)`` of the group's tasks;
- co-located vertices (``Stream.co_locate_with``) are placed as one: subtask i
  of each goes to the same slot; a co-located subtask whose partner ran in an
  earlier region is *pinned* to that executor (the scheduler waits for it).

``place`` packs tasks into slots; ``prefer_nodes`` then picks, among the free
executors, which executor each packed slot becomes, so that consumers run on the
node that holds most of their input bytes (``runtime.locality``).  It only renames
slots, so every guarantee of the packing holds whatever it picks: groups apart, at
most one subtask of a vertex per executor, no executor above its share, co-located
subtasks together; pinned slots stay where they are.  A slot with nothing to prefer
(or only ties) keeps its executor, so on one node, or when no input exists yet,
placement is exactly ``place``'s.

Plain Python.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Hashable, Mapping, Sequence

from hybrid_shuffle.plan.graph import VertexId
from hybrid_shuffle.plan.regions import DEFAULT_GROUP, TaskKey
from hybrid_shuffle.runtime.locality import Weight

__all__ = ["place", "prefer_nodes"]


def place(
    tasks: Sequence[TaskKey],
    slots: Sequence[int],
    groups: Mapping[VertexId, str] | None = None,
    units: Mapping[VertexId, Hashable] | None = None,
    pinned: Mapping[TaskKey, int] | None = None,
) -> dict[TaskKey, int]:
    """The slot (an executor index from ``slots``) of every task of one region.

    ``groups`` maps a vertex to its slot sharing group (absent: ``default``),
    ``units`` a vertex to its co-location key (absent: placed on its own), and
    ``pinned`` a task to the slot it must take (a co-located subtask whose partner
    ran in an earlier region; the caller acquired those slots).  The caller acquired
    as many slots as the groups need together."""
    groups = groups or {}
    units = units or {}
    pinned = pinned or {}
    # group -> unit -> subtask -> the tasks placed together
    members: dict[str, dict[Hashable, dict[int, list[TaskKey]]]] = defaultdict(dict)
    for task in tasks:
        vertex, subtask = task
        unit = units.get(vertex, vertex)
        by_subtask = members[groups.get(vertex, DEFAULT_GROUP)].setdefault(unit, {})
        by_subtask.setdefault(subtask, []).append(task)
    # every group gets the slots its pinned tasks need, then the rest in order
    own: dict[str, list[int]] = {g: [] for g in members}
    taken: set[int] = set()
    for task, slot in pinned.items():
        group = groups.get(task[0], DEFAULT_GROUP)
        if group in own and slot in slots and slot not in taken:
            own[group].append(slot)
            taken.add(slot)
    spare = [s for s in slots if s not in taken]
    placed: dict[TaskKey, int] = {}
    for group, group_units in members.items():  # groups in the order of their first task
        width = max(len(by_subtask) for by_subtask in group_units.values())
        while len(own[group]) < width:
            own[group].append(spare.pop(0))
        _place_group(group_units, own[group], pinned, placed)
    return placed


def _place_group(
    group_units: dict[Hashable, dict[int, list[TaskKey]]],
    slots: list[int],
    pinned: Mapping[TaskKey, int],
    placed: dict[TaskKey, int],
) -> None:
    load = dict.fromkeys(range(len(slots)), 0)
    index = {slot: i for i, slot in enumerate(slots)}
    ordered = sorted(group_units.values(), key=lambda u: -len(u))  # widest first
    used: list[set[int]] = [set() for _ in ordered]
    todo: list[list[int]] = [sorted(by_subtask) for by_subtask in ordered]

    def put(n: int, subtask: int, chosen: int) -> None:
        members = ordered[n][subtask]
        used[n].add(chosen)
        load[chosen] += len(members)
        for task in members:
            placed[task] = slots[chosen]

    for n, by_subtask in enumerate(ordered):  # pinned subtasks first: they have no choice
        for subtask in list(todo[n]):
            pin = next((pinned[t] for t in by_subtask[subtask] if t in pinned), None)
            if pin in index and index[pin] not in used[n]:
                put(n, subtask, index[pin])
                todo[n].remove(subtask)
    for n in range(len(ordered)):
        for subtask in todo[n]:
            free = [s for s in load if s not in used[n]]
            least = min(load[s] for s in free)
            preferred = subtask % len(slots)
            chosen = (
                preferred
                if preferred in free and load[preferred] == least
                else min(s for s in free if load[s] == least)
            )
            put(n, subtask, chosen)


def prefer_nodes(
    placed: Mapping[TaskKey, int],
    free: Sequence[int],
    nodes: Sequence[str],
    weights: Mapping[TaskKey, Mapping[str, Weight]],
    fixed: Collection[int] = (),
) -> dict[TaskKey, int]:
    """``placed`` (``place``'s answer) with each of its slots moved to the free
    executor on the node holding most of its tasks' input.

    ``free`` is every free executor in the order the slots were taken from it
    (``SlotAllocation.candidates``; ``placed`` used its head), ``nodes`` maps an
    executor index to its node, ``weights`` a task to what each node holds of its
    input (``locality.input_weights``), and ``fixed`` are the executors that must
    stay (pinned co-location partners).  Greedy, largest demand first: a slot's
    demand on a node is the sum of its tasks' weights there; the (slot, node) pairs
    with the most go first, each to the slot's own executor if it is on that node,
    else to the node's first free executor in ``free`` order.  A slot whose nodes
    are all busy, or that prefers none, keeps its executor if no other slot took
    it, else takes the first one left."""
    position = {executor: i for i, executor in enumerate(free)}
    used = sorted(set(placed.values()), key=position.__getitem__)
    demand: dict[int, dict[str, Weight]] = {slot: {} for slot in used}
    for task, slot in placed.items():
        for node, weight in weights.get(task, {}).items():
            demand[slot][node] = demand[slot].get(node, Weight()) + weight
    chosen = {slot: slot for slot in used if slot in fixed}
    taken = set(chosen.values())
    # the node of each free executor first in ``free`` order: ties between nodes go there
    first = {}
    for executor in reversed(free):
        first[nodes[executor]] = position[executor]
    # (slot, node) pairs, most demand first; ties: the earlier slot, then its own node,
    # then the node whose free executor comes first
    pairs = sorted(
        (
            (slot, node)
            for slot in used
            if slot not in chosen
            for node, weight in demand[slot].items()
            if weight > Weight()
        ),
        key=lambda p: (
            _negated(demand[p[0]][p[1]]),
            position[p[0]],
            p[1] != nodes[p[0]],
            first.get(p[1], len(free)),
        ),
    )
    for slot, node in pairs:
        if slot in chosen:
            continue
        there = [e for e in (slot, *free) if nodes[e] == node and e not in taken]
        if there:
            chosen[slot] = there[0]
            taken.add(there[0])
    rest = [slot for slot in used if slot not in chosen]
    for slot in rest:  # keep its own executor, if nobody took it
        if slot not in taken:
            chosen[slot] = slot
            taken.add(slot)
    spare = [e for e in free if e not in taken]
    for slot in rest:
        if slot not in chosen:
            chosen[slot] = spare.pop(0)
    return {task: chosen[slot] for task, slot in placed.items()}


def _negated(weight: Weight) -> tuple[int, int]:
    return (-weight.bytes, -weight.producers)
