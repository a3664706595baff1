"""Slot sharing groups and co-location (Flink's), planned and placed, no Ray."""

from __future__ import annotations

import pytest

from hybrid_shuffle.config import load_config
from hybrid_shuffle.errors import ConfigError, PlanError, SlotsExceededError
from hybrid_shuffle.plan.graph import VertexId
from hybrid_shuffle.plan.planner import LogicalNode, Plan, plan_job
from hybrid_shuffle.runtime.placement import place

from .builders import Builder


def plan(sink: LogicalNode, slots: int = 16) -> Plan:
    return plan_job("j", sink, load_config({"parallelism": 4}), slots)


def groups(p: Plan) -> dict[str, str]:
    return {v.name: v.slot_sharing_group for v in p.graph.vertices.values()}


def test_a_group_is_inherited_downstream_until_set_again_and_splits_chains() -> None:
    b = Builder()
    clean = b.map(b.source("orders", 4), "clean")
    clean.slot_sharing_group = "etl"
    totals = b.agg(b.map(clean, "enrich"), "totals")
    top = b.sort(totals, "top")
    top.slot_sharing_group = "serve"
    p = plan(top)
    assert groups(p) == {
        "orders": "default",
        "clean->enrich": "etl",  # chained with each other, not with the source
        "totals": "etl",
        "top": "serve",
    }
    assert "slot sharing group 'etl'" in p.explain()


def test_an_operator_reading_two_groups_is_in_the_default_one() -> None:
    b = Builder()
    left, right = b.source("a", 2), b.source("b", 2)
    left.slot_sharing_group, right.slot_sharing_group = "x", "y"
    assert groups(plan(b.union(left, right)))["union"] == "default"


def test_a_pipelined_region_needs_each_groups_widest_vertex_and_the_error_names_them() -> None:
    b = Builder()
    src = b.source("orders", 4)
    totals = b.agg(src, "totals", mode="pipelined", partitions=3)
    totals.slot_sharing_group = "agg"
    p = plan(totals)
    assert p.slots_needed == 4 + 3
    with pytest.raises(SlotsExceededError) as err:
        plan(totals, slots=6)
    message = str(err.value)
    assert "needs 7 slots" in message and "slot sharing groups 'default' 4, 'agg' 3" in message
    assert "fewer slot sharing groups" in message


def test_groups_get_slots_of_their_own_and_no_slot_takes_more_than_its_share() -> None:
    tasks = [(VertexId(v), i) for v, p in [(0, 4), (1, 4), (2, 1), (3, 2)] for i in range(p)]
    group_of = {VertexId(0): "a", VertexId(1): "b", VertexId(2): "a", VertexId(3): "b"}
    placed = place(tasks, list(range(8)), group_of)
    a = {placed[t] for t in tasks if group_of[t[0]] == "a"}
    b = {placed[t] for t in tasks if group_of[t[0]] == "b"}
    assert not a & b and len(a) == len(b) == 4
    load = [list(placed.values()).count(s) for s in range(8)]
    assert max(load) == 2


def test_co_located_vertices_run_subtask_i_on_one_slot() -> None:
    tasks = [(VertexId(v), i) for v in range(3) for i in range(3)]
    placed = place(tasks, [5, 6, 7], {}, {VertexId(0): "k", VertexId(2): "k"})
    for i in range(3):
        assert placed[(VertexId(0), i)] == placed[(VertexId(2), i)]


def test_co_location_needs_one_parallelism_and_one_group() -> None:
    b = Builder()
    first = b.agg(b.source("a", 2), "first", partitions=2)
    second = b.agg(b.source("b", 2), "second", partitions=3)
    first.co_location = second.co_location = "k"
    with pytest.raises(PlanError, match="same fixed parallelism"):
        plan(b.union(first, second))
    second_ok = b.agg(b.source("c", 2), "third", partitions=2)
    second_ok.co_location, second_ok.slot_sharing_group = "k", "other"
    first.co_location = "k"
    with pytest.raises(PlanError, match="put them in one group"):
        plan(b.union(first, second_ok))


def test_the_yaml_vertices_section_sets_groups_and_parallelism_over_code() -> None:
    b = Builder()
    clean = b.map(b.source("orders", 4), "clean")
    clean.slot_sharing_group = "code"
    totals = b.agg(clean, "totals", partitions=4)
    config = load_config(
        {
            "parallelism": 4,
            "vertices": {
                "clean": {"slot_sharing_group": "yaml"},
                "totals": {"parallelism": 3, "slot_sharing_group": "agg"},
            },
        }
    )
    p = plan_job("j", totals, config, 16)
    assert groups(p) == {"orders": "default", "clean": "yaml", "totals": "agg"}
    assert {v.name: v.parallelism for v in p.graph.vertices.values()}["totals"] == 3


def test_the_yaml_vertices_section_names_unknown_operators_and_refuses_source_parallelism() -> None:
    b = Builder()
    totals = b.agg(b.source("orders", 2), "totals")
    typo = load_config({"vertices": {"totls": {"parallelism": 2}}})
    with pytest.raises(ConfigError, match=r"vertices\.totls: no such operator .*totals"):
        plan_job("j", totals, typo, 16)
    source = load_config({"vertices": {"orders": {"parallelism": 3}}})
    with pytest.raises(ConfigError, match="is a source"):
        plan_job("j", totals, source, 16)
    with pytest.raises(ConfigError, match="slot_sharing_group"):
        load_config({"vertices": {"totals": {"slot_sharing_group": ""}}})
