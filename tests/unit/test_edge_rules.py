"""``edge_rules:``: edges matched by what they are (kind, keys, consuming operator), so one
config holds for every plan of a job; ``edges:`` by name still wins (no Ray)."""

from __future__ import annotations

from typing import Any

import pytest

from hybrid_shuffle.config import load_config
from hybrid_shuffle.errors import ConfigError
from hybrid_shuffle.plan.graph import ModeOrigin
from hybrid_shuffle.plan.planner import ExchangeSpec, LogicalNode, plan_job
from hybrid_shuffle.shuffle.routing import Partitioner, PartitionerKind

from .builders import Builder


def revenue(b: Builder) -> LogicalNode:
    """orders -(spread: round-robin into a map)-> clean -(by_customer: hash on customer
    into an aggregate)-> totals -(to_sort: range into a sort)-> top"""
    orders = b.source("orders", 2)
    spec = ExchangeSpec(Partitioner(PartitionerKind.ROUND_ROBIN), "spread")
    clean = LogicalNode(next(b.ids), "clean", b.map(orders, "m").operator, [(orders, spec)])
    totals = b.agg(clean, "totals", edge="by_customer")
    return b.sort(totals, "top", edge="to_sort")


def planned(raw: dict[str, Any]) -> Any:
    return plan_job("revenue", revenue(Builder()), load_config(raw), slots=8)


def test_each_edge_takes_the_first_rule_that_matches_what_it_is() -> None:
    plan = planned(
        {
            "edge_rules": [
                {"match": {"into": "sort"}, "mode": "hybrid-full", "keep": True},
                {"match": {"kind": "hash", "keys": ["customer"]}, "mode": "hybrid-selective"},
                {"match": {"kind": "hash"}, "mode": "pipelined"},  # shadowed by [1]
                {"match": {"into": "udf"}, "mode": "blocking", "partitions": 3},
            ]
        }
    )
    modes = plan.edge_modes()
    assert modes["to_sort"][0] == "hybrid-full" and modes["to_sort"][3] == "edge_rules[0]"
    assert modes["by_customer"][0] == "hybrid-selective"
    assert modes["by_customer"][3] == "edge_rules[1]"
    assert modes["spread"][0] == "blocking" and modes["spread"][3] == "edge_rules[3]"
    assert plan.graph.vertices[plan.graph.edge("spread").target].parallelism == 3
    assert plan.graph.edge("spread").mode_origin is ModeOrigin.RULE
    text = plan.explain()
    assert "mode hybrid-selective (edge_rules[1])" in text
    # a rule shadowed by an earlier one sets nothing: a note, not an error
    assert (
        "note: edge_rules[2] (match: {kind: hash}) sets no edge of job 'revenue': an earlier "
        "rule or an edges: entry sets each edge it matches"
    ) in text


def test_a_rule_that_matches_no_edge_is_a_note_in_explain() -> None:
    plan = planned({"edge_rules": [{"match": {"into": "window"}, "mode": "blocking"}]})
    assert (
        "note: edge_rules[0] (match: {into: window}) matches no edge of job 'revenue'"
        in plan.explain()
    )
    assert {e.mode_origin for e in plan.graph.edges} == {ModeOrigin.OUTPUT_ON_EOF}


def test_an_edges_entry_by_name_wins_over_every_rule() -> None:
    plan = planned(
        {
            "edges": {"by_customer": {"mode": "blocking"}},
            "edge_rules": [{"match": {"kind": "hash"}, "mode": "hybrid-full", "keep": True}],
        }
    )
    edge = plan.graph.edge("by_customer")
    assert (edge.mode, edge.origin) == ("blocking", "yaml")


def test_a_rule_against_the_output_on_eof_rule_warns_naming_the_rule_unless_kept() -> None:
    rule = {"match": {"keys": ["customer"]}, "mode": "pipelined"}
    warned = planned({"edge_rules": [rule]})
    assert warned.warnings == [
        "edge 'by_customer' keeps mode pipelined set by edge_rules[0], though 'totals' emits "
        "only at end of input, so the output-on-EOF rule would make it blocking; remove that "
        "mode to let the rule apply, or add keep: true to that rule if it is on purpose"
    ]
    kept = planned({"edge_rules": [{**rule, "keep": True}]})
    assert kept.warnings == []
    assert any("(edge_rules[0], keep: true)" in note for note in kept.notes)


def test_an_unknown_edge_name_says_the_plan_may_have_changed_and_points_to_edge_rules() -> None:
    with pytest.raises(ConfigError) as error:
        planned({"edges": {"exchange_11": {"mode": "blocking"}}})
    message = str(error.value)
    assert message.startswith("edges.exchange_11: no such edge in job 'revenue'; edges are: ")
    assert "plan may have changed with the data" in message and "edge_rules" in message


@pytest.mark.parametrize(
    ("rules", "says"),
    [
        ({"kind": "hash"}, "edge_rules: must be a list of rules"),
        ([{"mode": "blocking"}], "edge_rules[0]: a rule needs match:"),
        ([{"match": {}, "mode": "blocking"}], "edge_rules[0].match: name at least one of"),
        (
            [{"match": {"kind": "hsh"}, "mode": "blocking"}],
            "edge_rules[0].match.kind: 'hsh' is not one of: hash, broadcast, single, range, "
            "round_robin, gather (did you mean 'hash'?)",
        ),
        ([{"match": {"into": "agg"}, "mode": "blocking"}], "edge_rules[0].match.into: 'agg'"),
        ([{"match": {"keys": []}, "mode": "blocking"}], "edge_rules[0].match.keys: must be"),
        ([{"match": {"kind": "hash"}}], "edge_rules[0]: the rule sets nothing"),
        ([{"match": {"kind": "hash"}, "mod": "blocking"}], "edge_rules[0].mod: unknown key"),
        ([{"match": {"kind": "hash"}, "mode": "fast"}], "edge_rules[0].mode: 'fast' is not"),
        ([{"match": {"kind": "hash"}, "keep": True}], "edge_rules[0].keep: the edge sets no"),
    ],
)
def test_a_bad_rule_is_refused_at_load_naming_its_path(rules: Any, says: str) -> None:
    with pytest.raises(ConfigError, match=None) as error:
        load_config({"edge_rules": rules})
    assert str(error.value).startswith(says), str(error.value)


def test_rules_survive_a_round_trip_through_with_overrides() -> None:
    config = load_config(
        {"edge_rules": [{"match": {"keys": ["a", "b"]}, "mode": "blocking", "partitions": "auto"}]}
    )
    assert config.with_overrides(parallelism=3).edge_rules == config.edge_rules
    assert load_config(config).edge_rules == config.edge_rules
