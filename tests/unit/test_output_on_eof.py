"""FLIP-331's output-on-EOF rule in the planner: which edges become batch, and which keep
the mode the user gave them (no Ray)."""

from __future__ import annotations

import pytest

from hybrid_shuffle.config import load_config
from hybrid_shuffle.errors import ConfigError
from hybrid_shuffle.operators import HashJoin
from hybrid_shuffle.plan.graph import ModeOrigin
from hybrid_shuffle.plan.planner import ExchangeSpec, LogicalNode, plan_job, reachable
from hybrid_shuffle.shuffle.routing import Partitioner, PartitionerKind

from .builders import Builder


def rebalanced_revenue(b: Builder, **modes: str) -> LogicalNode:
    """orders -(spread)-> clean -(by_customer)-> totals -(to_sort)-> top"""
    orders = b.source("orders", 2)
    spec = ExchangeSpec(Partitioner(PartitionerKind.ROUND_ROBIN), "spread", modes.get("spread"))
    clean = LogicalNode(next(b.ids), "clean", b.map(orders, "m").operator, [(orders, spec)])
    totals = b.agg(clean, "totals", edge="by_customer", mode=modes.get("by_customer"))
    return b.sort(totals, "top", edge="to_sort", mode=modes.get("to_sort"))


def exchange(sink: LogicalNode, edge: str) -> ExchangeSpec:
    """The exchange named ``edge`` in the job ending at ``sink`` (to set what code sets)."""
    specs = [spec for node in reachable(sink) for _, spec in node.inputs if spec is not None]
    return next(spec for spec in specs if spec.edge == edge)


def test_every_edge_upstream_of_an_aggregate_and_out_of_it_becomes_blocking() -> None:
    plan = plan_job("revenue", rebalanced_revenue(Builder()), load_config(None), slots=8)
    for name in ("spread", "by_customer", "to_sort"):
        edge = plan.graph.edge(name)
        assert (edge.mode, edge.mode_origin) == ("blocking", ModeOrigin.OUTPUT_ON_EOF), name
    assert plan.edge_modes()["spread"][3] == "output-on-eof"
    assert "mode blocking (output-on-eof)" in plan.explain()
    # every vertex is its own region: the job runs in batch mode, stage by stage
    assert len(set(plan.vertex_region.values())) == len(plan.graph.vertices)


def test_batch_mode_picks_the_partition_type_the_rule_gives() -> None:
    cfg = load_config({"shuffle": {"batch_mode": "hybrid-full"}})
    plan = plan_job("revenue", rebalanced_revenue(Builder()), cfg, slots=8)
    assert {e.mode for e in plan.graph.edges} == {"hybrid-full"}


def test_mode_set_in_code_is_kept_and_explain_warns_about_it() -> None:
    job = rebalanced_revenue(Builder(), by_customer="pipelined")
    plan = plan_job("revenue", job, load_config(None), slots=8)
    edge = plan.graph.edge("by_customer")
    assert (edge.mode, edge.mode_origin) == ("pipelined", ModeOrigin.CODE)
    assert plan.graph.edge("spread").mode == "blocking"
    assert plan.explain().splitlines()[-1] == (
        "warning: edge 'by_customer' keeps mode pipelined set in code (mode=), though "
        "'totals' emits only at end of input, so the output-on-EOF rule would make it "
        "blocking; remove that mode to let the rule apply, or if it is on purpose, say so in "
        "YAML: edges: {by_customer: {mode: pipelined, keep: true}}"
    )


def test_mode_set_in_yaml_is_kept_and_explain_warns_about_it() -> None:
    cfg = load_config({"edges": {"spread": {"mode": "hybrid-selective"}}})
    plan = plan_job("revenue", rebalanced_revenue(Builder()), cfg, slots=8)
    edge = plan.graph.edge("spread")
    assert (edge.mode, edge.mode_origin) == ("hybrid-selective", ModeOrigin.YAML)
    assert plan.warnings == [
        "edge 'spread' keeps mode hybrid-selective set in YAML, though 'totals' emits only at "
        "end of input, so the output-on-EOF rule would make it blocking; remove that mode to "
        "let the rule apply, or add keep: true beside it if it is on purpose"
    ]


def test_a_yaml_mode_kept_on_purpose_runs_as_set_and_is_a_note_not_a_warning() -> None:
    cfg = load_config({"edges": {"spread": {"mode": "hybrid-selective", "keep": True}}})
    plan = plan_job("revenue", rebalanced_revenue(Builder()), cfg, slots=8)
    edge = plan.graph.edge("spread")
    assert (edge.mode, edge.mode_origin, edge.mode_kept) == (
        "hybrid-selective",
        ModeOrigin.YAML,
        True,
    )
    assert plan.warnings == []
    assert plan.notes == [
        "edge 'spread' keeps mode hybrid-selective on purpose (keep: true); the output-on-EOF "
        "rule would make it blocking, as 'totals' emits only at end of input"
    ]
    # the rule still applies to the edges with no mode of their own
    assert plan.graph.edge("by_customer").mode_origin is ModeOrigin.OUTPUT_ON_EOF


def test_a_code_mode_kept_on_purpose_is_a_note_and_yaml_keep_covers_a_code_mode() -> None:
    job = rebalanced_revenue(Builder(), by_customer="pipelined")
    exchange(job, "by_customer").keep = True
    plan = plan_job("revenue", job, load_config(None), slots=8)
    assert plan.warnings == []
    assert plan.notes == [
        "edge 'by_customer' keeps mode pipelined on purpose in code (keep=True); the "
        "output-on-EOF rule would make it blocking, as 'totals' emits only at end of input"
    ]
    # the warning's advice for a code mode: the same mode in YAML with keep: true
    plain = rebalanced_revenue(Builder(), by_customer="pipelined")
    cfg = load_config({"edges": {"by_customer": {"mode": "pipelined", "keep": True}}})
    plan = plan_job("revenue", plain, cfg, slots=8)
    assert plan.warnings == [] and len(plan.notes) == 1


def test_yaml_wins_over_code_for_keep_as_for_the_mode() -> None:
    """A YAML mode without keep over a code mode with keep: the YAML entry decides, so the
    rule's conflict is a warning again."""
    job = rebalanced_revenue(Builder(), by_customer="pipelined")
    exchange(job, "by_customer").keep = True
    cfg = load_config({"edges": {"by_customer": {"mode": "hybrid-full"}}})
    plan = plan_job("revenue", job, cfg, slots=8)
    assert plan.notes == []
    assert plan.warnings[0].startswith("edge 'by_customer' keeps mode hybrid-full set in YAML")


def test_keep_on_a_mode_the_rule_agrees_with_says_nothing() -> None:
    cfg = load_config({"edges": {"to_sort": {"mode": "blocking", "keep": True}}})
    plan = plan_job("revenue", rebalanced_revenue(Builder()), cfg, slots=8)
    assert plan.warnings == [] and plan.notes == []
    # nor on an edge the rule does not reach (nothing downstream emits only at the end)
    b = Builder()
    orders = b.source("orders", 2)
    spec = ExchangeSpec(Partitioner(PartitionerKind.ROUND_ROBIN), "spread", "pipelined")
    spec.keep = True
    spread = LogicalNode(next(b.ids), "m", b.map(orders, "x").operator, [(orders, spec)])
    plan = plan_job("j", spread, load_config(None), slots=8)
    assert plan.graph.edge("spread").mode_kept
    assert plan.warnings == [] and plan.notes == []


def test_keep_in_code_without_a_mode_is_refused_naming_the_edge() -> None:
    job = rebalanced_revenue(Builder())
    exchange(job, "by_customer").keep = True
    with pytest.raises(ConfigError) as err:
        plan_job("revenue", job, load_config(None), slots=8)
    assert str(err.value) == (
        "edge 'by_customer': keep=True needs the mode it keeps; pass mode= too, or drop keep"
    )


def test_keep_means_the_same_under_default_mode_auto() -> None:
    """The advisor never changes a mode set in code or YAML, so under ``auto`` keep only
    turns the rule's warning into a note, as it does under any other default mode."""
    raw: dict[str, object] = {"shuffle": {"default_mode": "auto"}}
    kept = {"edges": {"spread": {"mode": "pipelined", "keep": True}}}
    plan = plan_job("revenue", rebalanced_revenue(Builder()), load_config({**raw, **kept}), 8)
    spread = plan.graph.edge("spread")
    assert (spread.mode, spread.mode_origin, spread.mode_reason) == (
        "pipelined",
        ModeOrigin.YAML,
        "",
    )
    assert plan.warnings == [] and len(plan.notes) == 1
    unkept = {"edges": {"spread": {"mode": "pipelined"}}}
    plan = plan_job("revenue", rebalanced_revenue(Builder()), load_config({**raw, **unkept}), 8)
    assert plan.graph.edge("spread").mode == "pipelined" and len(plan.warnings) == 1


def test_explicit_batch_mode_needs_no_warning() -> None:
    job = rebalanced_revenue(Builder(), to_sort="blocking")
    plan = plan_job("revenue", job, load_config(None), slots=8)
    assert plan.warnings == []


def test_edges_not_upstream_of_an_output_on_eof_operator_keep_the_default() -> None:
    b = Builder()
    left, right = b.source("orders", 2), b.source("customers", 2)
    part = Partitioner(PartitionerKind.HASH, ("customer",))
    join = LogicalNode(
        next(b.ids),
        "joined",
        HashJoin(["customer"], "inner", "joined"),
        [(left, ExchangeSpec(part, "j.left")), (right, ExchangeSpec(part, "j.right"))],
    )
    plan = plan_job("j", join, load_config(None), slots=8)
    assert {(e.mode, e.mode_origin) for e in plan.graph.edges} == {
        ("hybrid-selective", ModeOrigin.DEFAULT)
    }


def test_explain_shows_the_operator_memory_of_stateful_vertices() -> None:
    cfg = load_config({"operators": {"memory": "256 MiB"}})
    text = plan_job("revenue", rebalanced_revenue(Builder()), cfg, slots=8).explain()
    assert "operator memory 256 MiB (totals 256 MiB)" in text
    assert "operator memory 256 MiB (top 256 MiB)" in text


def test_a_broadcast_join_chained_after_an_aggregate_leaves_its_build_side_streaming() -> None:
    """The join is chained behind the aggregate (its build side feeds the chain's second
    operator): the rule batches what flows into the aggregate, not the build side."""
    b = Builder()
    totals = b.agg(b.source("orders", 2), "totals", edge="by_customer")
    dims = b.source("customers", 2)
    spec = ExchangeSpec(Partitioner(PartitionerKind.BROADCAST), "j.right")
    join = LogicalNode(
        next(b.ids),
        "joined",
        HashJoin(["customer"], "left", "joined"),
        [(totals, None), (dims, spec)],
    )
    plan = plan_job("j", join, load_config(None), slots=8)
    (vertex,) = [v for v in plan.graph.vertices.values() if v.name.endswith("joined")]
    assert [op.name for op in vertex.operators] == ["totals", "joined"]
    build = plan.graph.edge("j.right")
    assert (build.target, build.target_operator) == (vertex.id, 1)
    assert (build.mode, build.mode_origin) == ("hybrid-selective", ModeOrigin.DEFAULT)
    assert plan.graph.edge("by_customer").mode_origin is ModeOrigin.OUTPUT_ON_EOF


def hash_joined(b: Builder, streams: bool) -> LogicalNode:
    """probe -(probe)-> joined <-(build)- dim: a translated stage's shuffled hash join,
    whose query streams input 0 (the probe side) when ``streams``."""
    from hybrid_shuffle.operators.sql import SqlQuery

    probe, dim = b.source("facts", 2), b.source("dim", 2)
    query = "SELECT l.customer, l.amount FROM input AS l JOIN input1 AS r USING (customer)"
    join = SqlQuery(query, "joined", inputs=2, streams=streams)
    on = Partitioner(PartitionerKind.HASH, ("customer",))
    return LogicalNode(
        next(b.ids),
        "joined",
        join,
        [(probe, ExchangeSpec(on, "probe")), (dim, ExchangeSpec(on, "build"))],
    )


@pytest.mark.parametrize("default", ["pipelined", "hybrid-selective", "hybrid-full"])
def test_a_hash_join_s_probe_edge_runs_as_set_and_only_its_build_edge_becomes_batch(
    default: str,
) -> None:
    config = load_config({"shuffle": {"default_mode": default}})
    plan = plan_job("join", hash_joined(Builder(), streams=True), config, slots=8)
    probe, build = plan.graph.edge("probe"), plan.graph.edge("build")
    assert (probe.mode, probe.mode_origin) == (default, ModeOrigin.DEFAULT)
    assert (build.mode, build.mode_origin) == ("blocking", ModeOrigin.OUTPUT_ON_EOF)
    text = plan.explain()
    assert f"mode {default} (default)" in text
    assert "joined (sql, streams input 0 once the others ended)" in text


def test_a_join_that_needs_both_sides_whole_makes_both_edges_batch() -> None:
    config = load_config({"shuffle": {"default_mode": "pipelined"}})
    plan = plan_job("join", hash_joined(Builder(), streams=False), config, slots=8)
    assert {e.name: e.mode for e in plan.graph.edges} == {
        "probe": "blocking",
        "build": "blocking",
    }
