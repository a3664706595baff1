"""Balanced placement of a region's tasks on its slots (FLIP-370), no Ray."""

from __future__ import annotations

import math

from hybrid_shuffle.plan.graph import VertexId
from hybrid_shuffle.runtime.placement import place


def tasks(*parallelisms: int) -> list[tuple[VertexId, int]]:
    return [(VertexId(v), i) for v, p in enumerate(parallelisms) for i in range(p)]


def test_wide_vertices_keep_subtask_i_in_slot_i_so_forward_edges_stay_local() -> None:
    placed = place(tasks(4, 4, 4), [10, 11, 12, 13])
    for vertex in range(3):
        assert [placed[(VertexId(vertex), i)] for i in range(4)] == [10, 11, 12, 13]


def test_no_slot_takes_more_than_its_share_and_a_slot_holds_one_subtask_per_vertex() -> None:
    for shape in [(1, 1, 1, 1, 4), (2, 1, 3, 1, 4, 1), (1,) * 7 + (3,), (4, 2, 2, 1, 1)]:
        slots = list(range(max(shape)))
        placed = place(tasks(*shape), slots)
        load = {s: list(placed.values()).count(s) for s in slots}
        assert max(load.values()) <= math.ceil(sum(shape) / len(slots)), (shape, load)
        for vertex, p in enumerate(shape):
            chosen = [placed[(VertexId(vertex), i)] for i in range(p)]
            assert len(set(chosen)) == p
