"""Chaining, modes, regions and the slot check: the planner alone, no Ray."""

from __future__ import annotations

import pytest

from hybrid_shuffle.config import ConfigWarning, load_config
from hybrid_shuffle.errors import ConfigError, PlanError, SlotsExceededError
from hybrid_shuffle.plan.graph import ModeOrigin
from hybrid_shuffle.plan.planner import LogicalNode, plan_job
from hybrid_shuffle.shuffle.routing import PartitionerKind

from .builders import Builder


def revenue(b: Builder, by_customer: str | None = None, to_sort: str | None = None) -> LogicalNode:
    clean = b.map(b.source("orders", 4), "clean")
    totals = b.agg(clean, "totals", edge="by_customer", mode=by_customer)
    return b.sort(totals, "top", edge="to_sort", mode=to_sort)


def test_forward_operators_of_equal_parallelism_chain_into_one_vertex() -> None:
    plan = plan_job("revenue", revenue(Builder()), load_config(None), slots=8)
    names = [v.name for v in plan.graph.vertices.values()]
    assert names == ["orders->clean", "totals", "top"]
    assert [e.name for e in plan.graph.edges] == ["by_customer", "to_sort"]


def test_unnamed_exchange_gets_a_stable_generated_name() -> None:
    b = Builder()
    node = b.agg(b.map(b.source("orders", 2), "clean"), "totals")
    first = plan_job("j", node, load_config(None), slots=8)
    b2 = Builder()
    node2 = b2.agg(b2.map(b2.source("orders", 2), "clean"), "totals")
    second = plan_job("j", node2, load_config(None), slots=8)
    assert [e.name for e in first.graph.edges] == ["clean->totals"]
    assert [e.name for e in second.graph.edges] == ["clean->totals"]


def test_pipelined_all_to_all_edge_glues_every_subtask_into_one_region() -> None:
    cfg = load_config({"parallelism": 4, "shuffle": {"default_mode": "blocking"}})
    plan = plan_job("revenue", revenue(Builder(), by_customer="pipelined"), cfg, slots=8)
    sizes = sorted(len(r.tasks) for r in plan.regions)
    # orders->clean x4 + totals x4 glued; each of the 4 sort subtasks alone
    assert sizes == [1, 1, 1, 1, 8]
    # slot sharing: one subtask of each vertex per slot
    assert plan.slots_needed == 4
    big = max(plan.regions, key=lambda r: len(r.tasks))
    assert big.edges == ["by_customer"]


def test_blocking_edges_make_one_region_per_subtask() -> None:
    cfg = load_config({"parallelism": 4, "shuffle": {"default_mode": "blocking"}})
    plan = plan_job("revenue", revenue(Builder()), cfg, slots=2)
    assert all(len(r.tasks) == 1 for r in plan.regions)
    assert len(plan.regions) == 12
    # producers deploy before consumers
    order = [plan.graph.vertices[r.tasks[0][0]].name for r in plan.regions]
    assert order == ["orders->clean"] * 4 + ["totals"] * 4 + ["top"] * 4


def test_forward_edge_into_a_union_pairs_subtasks_pointwise() -> None:
    b = Builder()
    node = b.union(b.source("a", 3), b.source("b", 3))
    cfg = load_config({"shuffle": {"default_mode": "pipelined"}})
    plan = plan_job("u", node, cfg, slots=8)
    kinds = {e.partitioner.kind for e in plan.graph.edges}
    assert kinds == {PartitionerKind.FORWARD}
    assert sorted(len(r.tasks) for r in plan.regions) == [3, 3, 3]


def test_pipelined_region_larger_than_slots_fails_naming_region_and_edges() -> None:
    cfg = load_config({"parallelism": 4})
    job = revenue(Builder(), by_customer="pipelined", to_sort="pipelined")
    with pytest.raises(SlotsExceededError) as err:
        plan_job("revenue", job, cfg, slots=2)
    message = str(err.value)
    assert message.startswith("pipelined region R0 (orders->clean x4, totals x4, top x4)")
    assert "needs 4 slots at once but the session has 2" in message
    assert "set edges by_customer, to_sort to hybrid-selective or blocking" in message


def test_yaml_mode_wins_over_code_and_explain_shows_where_it_came_from() -> None:
    cfg = load_config({"job": "revenue", "edges": {"by_customer": {"mode": "hybrid-full"}}})
    plan = plan_job("revenue", revenue(Builder(), by_customer="blocking"), cfg, slots=8)
    assert plan.graph.edge("by_customer").mode == "hybrid-full"
    assert plan.graph.edge("to_sort").mode == "blocking"  # out of an aggregate: FLIP-331
    text = plan.explain()
    assert "by_customer" in text and "mode hybrid-full (yaml)" in text
    assert "range(amount_sum)" in text and "mode blocking (output-on-eof)" in text


def test_yaml_partitions_set_the_consumer_parallelism() -> None:
    cfg = load_config({"job": "revenue", "edges": {"to_sort": {"partitions": 8}}})
    plan = plan_job("revenue", revenue(Builder()), cfg, slots=8)
    assert plan.graph.vertices[plan.graph.edge("to_sort").target].parallelism == 8


def test_unknown_yaml_edge_is_rejected_with_the_list_of_edges() -> None:
    cfg = load_config({"job": "revenue", "edges": {"by_custmer": {"mode": "blocking"}}})
    with pytest.raises(ConfigError) as err:
        plan_job("revenue", revenue(Builder()), cfg, slots=8)
    assert str(err.value) == (
        "edges.by_custmer: no such edge in job 'revenue'; edges are: by_customer, to_sort. "
        "The plan may have changed with the data (Spark numbers its exchanges anew when it "
        "picks another join): match edges by what they are with edge_rules (match: {kind, "
        "keys, into}) instead of by name"
    )


def test_yaml_edges_of_another_job_are_not_applied_and_one_warning_names_both_jobs() -> None:
    cfg = load_config({"job": "other", "edges": {"nope": {"mode": "blocking"}}})
    with pytest.warns(ConfigWarning, match="job 'other'.*job 'revenue'") as caught:
        plan = plan_job("revenue", revenue(Builder()), cfg, slots=8)
        plan_job("revenue", revenue(Builder()), cfg, slots=8)  # planned again: no new warning
    assert len(caught) == 1
    assert {e.mode_origin for e in plan.graph.edges} == {ModeOrigin.OUTPUT_ON_EOF}


def test_wrong_mode_in_code_names_the_edge() -> None:
    with pytest.raises(ConfigError, match="edge 'by_customer': mode 'pipelind' is not a mode"):
        plan_job("revenue", revenue(Builder(), by_customer="pipelind"), load_config(None), 8)


def test_missing_key_column_is_named_before_running() -> None:
    b = Builder()
    node = b.agg(b.source("orders", 2), "totals", edge="by_k", keys=("custmer",))
    with pytest.raises(PlanError, match="custmer"):
        plan_job("j", node, load_config(None), slots=8)


def test_vertices_of_the_same_name_get_distinct_names() -> None:
    b = Builder()
    union = b.union(b.source("source", 2), b.source("source", 2), b.source("source", 2))
    plan = plan_job("j", union, load_config(None), slots=8)
    assert sorted(v.name for v in plan.graph.vertices.values()) == [
        "source",
        "source_2",
        "source_3",
        "union",
    ]
