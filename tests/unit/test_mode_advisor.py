"""``shuffle.default_mode: auto``: the mode the planner picks per edge, and why, no Ray."""

from __future__ import annotations

from hybrid_shuffle.config import load_config
from hybrid_shuffle.operators import MapBatches
from hybrid_shuffle.plan.graph import ModeOrigin
from hybrid_shuffle.plan.planner import ExchangeSpec, LogicalNode, Plan, plan_job
from hybrid_shuffle.shuffle.routing import Partitioner, PartitionerKind

from .builders import Builder


def keyed(b: Builder, up: LogicalNode, name: str) -> LogicalNode:
    spec = ExchangeSpec(Partitioner(PartitionerKind.HASH, ("customer",)), name)
    return LogicalNode(next(b.ids), name, MapBatches(lambda t: t, name), [(up, spec)])


def three_stages(b: Builder) -> LogicalNode:
    return keyed(b, keyed(b, b.map(b.source("orders", 8), "clean"), "second"), "third")


def plan(sink: LogicalNode, slots: int, **shuffle: object) -> Plan:
    config = load_config({"parallelism": 8, "shuffle": {"default_mode": "auto", **shuffle}})
    return plan_job("j", sink, config, slots)


def modes(p: Plan) -> dict[str, tuple[str, str]]:
    return {e.name: (str(e.mode), str(e.mode_origin)) for e in p.graph.edges}


def test_with_slots_enough_every_auto_edge_is_pipelined_and_says_its_region_fits() -> None:
    p = plan(three_stages(Builder()), slots=16, buffer_size="64 KiB")
    assert modes(p) == {"second": ("pipelined", "auto"), "third": ("pipelined", "auto")}
    assert "mode pipelined (auto: its region fits: 8 of 16 slots, 4 MiB of 32 MiB a slot)" in (
        p.explain()
    )


def test_with_slots_short_auto_edges_become_hybrid_selective_until_the_regions_fit() -> None:
    p = plan(three_stages(Builder()), slots=2)
    assert {m for m, _ in modes(p).values()} == {"hybrid-selective"}
    assert p.slots_needed <= 2
    assert "would need 8 slots at once (the session has 2)" in p.explain()


def test_edges_upstream_of_an_aggregate_follow_the_output_on_eof_rule() -> None:
    b = Builder()
    p = plan(b.agg(keyed(b, b.source("orders", 8), "second"), "totals", "by_customer"), 16)
    assert modes(p) == {
        "second": ("blocking", "output-on-eof"),
        "by_customer": ("blocking", "output-on-eof"),
    }


def test_an_edge_kept_in_the_external_store_is_hybrid_full_and_code_modes_stay() -> None:
    b = Builder()
    second = keyed(b, b.map(b.source("orders", 8), "clean"), "second")
    third = keyed(b, second, "third")
    assert third.lineage[0][1] is not None
    third.lineage[0][1].mode = "blocking"
    config = load_config(
        {
            "parallelism": 8,
            "shuffle": {"default_mode": "auto"},
            "edges": {"second": {"service": "external"}},
        }
    )
    p = plan_job("j", third, config, 16)
    assert modes(p) == {"second": ("hybrid-full", "auto"), "third": ("blocking", "code")}
    assert p.graph.edge("second").mode_origin is ModeOrigin.AUTO


def test_a_region_whose_buffers_could_pass_the_memory_budget_gets_a_hybrid_edge() -> None:
    """Two 8 x 8 edges of 4 credits of 4 MiB: 256 MiB a slot, over a 2 GiB budget's share
    of 16 slots (128 MiB); one edge becomes hybrid-selective and each region left holds
    128 MiB, which fits."""
    p = plan(three_stages(Builder()), slots=16, memory_budget="2 GiB")
    assert sorted(m for m, _ in modes(p).values()) == ["hybrid-selective", "pipelined"]
    text = p.explain()
    assert (
        "its region's buffers could reach 256 MiB a slot (its share of shuffle.memory_budget "
        "is 128 MiB)" in text
    )
    assert "its region fits: 8 of 16 slots, 128 MiB of 128 MiB a slot" in text
