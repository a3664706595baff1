"""A region that could never deploy is a ``PlanError`` when the job is planned (issue 37):
a blocking edge inside a pipelined region, or one waiting on its own consumer through
other regions, named with the mode changes that fix it; no Ray."""

from __future__ import annotations

import pytest

from hybrid_shuffle.config import load_config
from hybrid_shuffle.errors import PlanError
from hybrid_shuffle.operators import Identity, MapBatches
from hybrid_shuffle.plan.deployable import undeployable_edges
from hybrid_shuffle.plan.planner import ExchangeSpec, LogicalNode, Plan, plan_job
from hybrid_shuffle.shuffle.partition_type import Mode
from hybrid_shuffle.shuffle.routing import Partitioner, PartitionerKind

from .builders import Builder

#: the diamond's edges: two branches out of one source, joined again
EDGES = ("left_branch", "right_branch", "rejoin.left", "rejoin.right")


def diamond(modes: dict[str, str], parallelism: int = 2) -> Plan:
    """src -left_branch-> left -rejoin.left-> union, src -right_branch-> right
    -rejoin.right-> union; every edge hash-partitioned, its mode from the YAML."""
    b = Builder()
    src = b.source("src", parallelism)

    def exchange(up: LogicalNode, edge: str) -> ExchangeSpec:
        return ExchangeSpec(Partitioner(PartitionerKind.HASH, ("customer",)), edge)

    def branch(name: str, edge: str) -> LogicalNode:
        op = MapBatches(lambda t: t, name)
        return LogicalNode(next(b.ids), name, op, [(src, exchange(src, edge))])

    left, right = branch("left", "left_branch"), branch("right", "right_branch")
    union = LogicalNode(
        next(b.ids),
        "union",
        Identity("union", num_inputs=2),
        [(left, exchange(left, "rejoin.left")), (right, exchange(right, "rejoin.right"))],
    )
    raw = {"job": "diamond", "edges": {name: {"mode": mode} for name, mode in modes.items()}}
    return plan_job("diamond", union, load_config(raw), slots=8)


def all_pipelined(**changes: str) -> dict[str, str]:
    return {**{name: "pipelined" for name in EDGES}, **changes}


def test_a_blocking_edge_inside_a_pipelined_diamond_is_a_plan_error_naming_it() -> None:
    with pytest.raises(PlanError) as err:
        diamond(all_pipelined(**{"rejoin.right": "blocking"}))
    message = str(err.value)
    assert message.startswith("job 'diamond': edge 'rejoin.right' is blocking, but pipelined")
    assert "(rejoin.left, left_branch, right_branch) tie both its ends into region R0" in message
    # the fixes offered are the ones that work: this edge streamed, or the other path cut
    assert "edges.rejoin.right.mode pipelined or hybrid-selective" in message
    assert "edges.left_branch.mode hybrid-selective or blocking" in message
    assert "edges.rejoin.left.mode hybrid-selective or blocking" in message
    # cutting the blocking edge's own side would leave the two regions waiting on each other
    assert "edges.right_branch.mode" not in message
    assert "\n" not in message


@pytest.mark.parametrize(
    "fix",
    [
        {"rejoin.right": "pipelined"},
        {"rejoin.right": "hybrid-selective"},
        {"rejoin.right": "blocking", "left_branch": "blocking"},
        {"rejoin.right": "blocking", "rejoin.left": "hybrid-full"},
    ],
)
def test_each_offered_fix_plans(fix: dict[str, str]) -> None:
    plan = diamond(all_pipelined(**fix))
    assert undeployable_edges(plan.graph) == []


def test_two_regions_waiting_on_each_other_through_blocking_edges_are_a_plan_error() -> None:
    # src, left and union are one region; right, between two blocking edges, another:
    # union waits for right, which waits for src, which starts with union
    modes = all_pipelined(**{"right_branch": "blocking", "rejoin.right": "blocking"})
    with pytest.raises(PlanError) as err:
        diamond(modes)
    message = str(err.value)
    assert message.startswith("job 'diamond': edge 'right_branch' is blocking, but edges ")
    assert "lead from its consumer back to its producer's region" in message
    # only changes that make the whole job deployable: streaming right_branch alone would
    # pull right into the region with rejoin.right still blocking inside it
    assert "edges.rejoin.right.mode hybrid-selective;" in message
    assert "edges.right_branch.mode" not in message
    for fix in [{"rejoin.right": "hybrid-selective"}, {"left_branch": "blocking"}]:
        assert undeployable_edges(diamond({**modes, **fix}).graph) == []


def test_a_region_that_waits_only_for_a_finished_part_of_another_deploys() -> None:
    # src and union are one region (rejoin pipelined); right waits for src to finish over
    # a blocking edge and feeds union over a hybrid one: src finishes on its own, so
    # union's region need not wait for right (a region-level cycle, but no deadlock)
    b = Builder()
    src = b.source("src", 2)
    spec = ExchangeSpec(Partitioner(PartitionerKind.HASH, ("customer",)), "to_right", "blocking")
    right = LogicalNode(next(b.ids), "right", MapBatches(lambda t: t, "right"), [(src, spec)])
    union = LogicalNode(
        next(b.ids),
        "union",
        Identity("union", num_inputs=2),
        [
            (src, ExchangeSpec(Partitioner(PartitionerKind.HASH, ("customer",)), "direct")),
            (right, ExchangeSpec(Partitioner(PartitionerKind.HASH, ("customer",)), "back")),
        ],
    )
    raw = {"job": "j", "edges": {"direct": {"mode": "pipelined"}, "back": {"mode": "hybrid-full"}}}
    plan = plan_job("j", union, load_config(raw), slots=8)
    assert (
        plan.vertex_region[plan.graph.edge("direct").source] == plan.vertex_region[plan.graph.sink]
    )
    assert undeployable_edges(plan.graph) == []
    # the same job with the hybrid edge blocking deadlocks: union would wait for right
    assert undeployable_edges(plan.graph, {"back": Mode.BLOCKING}) == ["to_right", "back"]


def test_a_plain_blocking_exchange_deploys() -> None:
    b = Builder()
    node = b.agg(b.source("orders", 2), "totals", edge="by_customer", mode="blocking")
    plan = plan_job("j", node, load_config(None), slots=8)
    assert undeployable_edges(plan.graph) == []  # a plain blocking exchange is fine
    assert "by_customer" in plan.explain()
