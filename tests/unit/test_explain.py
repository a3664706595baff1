"""``explain()`` and ``explain_data()``: one source, every fact the user guide promises per
edge (mode and its origin, partitions, service, region) and per vertex (slot sharing
group, operator memory), no Ray."""

from __future__ import annotations

import json

from hybrid_shuffle.config import load_config
from hybrid_shuffle.operators import MapBatches
from hybrid_shuffle.plan.planner import ExchangeSpec, LogicalNode, Plan, plan_job
from hybrid_shuffle.shuffle.routing import Partitioner, PartitionerKind

from .builders import Builder


def keyed(b: Builder, up: LogicalNode, name: str, mode: str | None = None) -> LogicalNode:
    """A stateless operator behind a hash edge named ``name``."""
    spec = ExchangeSpec(Partitioner(PartitionerKind.HASH, ("customer",)), name, mode)
    return LogicalNode(next(b.ids), name, MapBatches(lambda t: t, name), [(up, spec)])


def every_origin(config: dict[str, object] | None = None) -> Plan:
    """orders -(from_code)-> from_code -(from_yaml)-> from_yaml -(by_default)-> by_default
    then an aggregate behind ``by_customer`` (output-on-eof), with an external edge."""
    b = Builder()
    first = keyed(b, b.source("orders", 2), "from_code", mode="hybrid-full")
    second = keyed(b, first, "from_yaml")
    third = keyed(b, second, "by_default")
    sink = b.agg(third, "totals", edge="by_customer")
    raw = {
        "job": "j",
        "shuffle": {"default_mode": "pipelined"},
        "edges": {"from_yaml": {"mode": "hybrid-selective", "service": "external"}},
        **(config or {}),
    }
    return plan_job("j", sink, load_config(raw), slots=8)


def edge_lines(text: str) -> dict[str, str]:
    lines = text.split("edges:\n", 1)[1].splitlines()
    return {line.split()[0]: line for line in lines if line.startswith("  ")}


def vertex_lines(text: str) -> list[str]:
    block = text.split("vertices:\n", 1)[1].split("edges:\n", 1)[0]
    return block.splitlines()


def test_explain_shows_the_mode_origin_of_every_edge() -> None:
    lines = edge_lines(every_origin().explain())
    assert "mode hybrid-full (code)" in lines["from_code"]
    assert "mode hybrid-selective (yaml)" in lines["from_yaml"]
    assert "mode blocking (output-on-eof)" in lines["by_customer"]
    # upstream of the aggregate, an edge with no mode of its own follows the rule too
    assert "(output-on-eof)" in lines["by_default"]


def test_explain_shows_the_default_origin_and_the_advisor_s_reason() -> None:
    b = Builder()
    plain = keyed(b, b.source("orders", 2), "plain")
    text = plan_job("j", plain, load_config(None), slots=8).explain()
    assert "mode hybrid-selective (default)" in edge_lines(text)["plain"]
    auto = load_config({"shuffle": {"default_mode": "auto"}})
    b = Builder()
    text = plan_job("j", keyed(b, b.source("orders", 2), "plain"), auto, slots=8).explain()
    assert "(auto: its region fits" in edge_lines(text)["plain"]


def test_every_edge_names_partitions_service_and_region_and_every_vertex_its_group() -> None:
    text = every_origin().explain()
    for name, line in edge_lines(text).items():
        assert ", partitions 2, service " in line, name
        assert ", region R" in line, name
    assert "service external" in edge_lines(text)["from_yaml"]
    assert "service executor-local" in edge_lines(text)["from_code"]
    for line in vertex_lines(text):
        assert "slot sharing group 'default'" in line
        assert "operator memory " in line
    assert "operator memory 512 MiB (totals 512 MiB)" in text
    assert "operator memory none (stateless)" in text


def test_explain_data_is_json_with_the_same_edges_modes_and_origins_as_the_text() -> None:
    plan = every_origin()
    data = json.loads(json.dumps(plan.explain_data()))
    lines = edge_lines(plan.explain())
    assert [e["name"] for e in data["edges"]] == list(lines)
    for edge in data["edges"]:
        line = lines[edge["name"]]
        assert f"mode {edge['mode']} ({edge['mode_origin']}" in line
        assert f"partitions {edge['partitions']}, service {edge['service']}" in line
        assert f"region {edge['region']}" in line
    assert {e["name"]: e["mode_origin"] for e in data["edges"]} == {
        "from_code": "code",
        "from_yaml": "yaml",
        "by_default": "output-on-eof",
        "by_customer": "output-on-eof",
    }
    assert [v["name"] for v in data["vertices"]] == plan.vertex_names()
    totals = next(v for v in data["vertices"] if v["name"] == "totals")
    assert totals["operator_memory"] == 512 * 2**20
    assert totals["memory_split"] == {"totals": 512 * 2**20}
    assert totals["slot_sharing_group"] == "default"
    assert data["job"] == "j" and data["slots"] == 8
    assert data["warnings"] == plan.warnings and data["notes"] == plan.notes


def test_explain_data_of_an_undecided_adaptive_consumer_says_auto() -> None:
    b = Builder()
    sink = b.agg(b.source("orders", 2), "totals", edge="e", partitions="auto")
    plan = plan_job("j", sink, load_config(None), slots=8)
    data = plan.explain_data()
    assert data["edges"][0]["partitions"] == "auto"
    assert next(v for v in data["vertices"] if v["name"] == "totals")["parallelism"] is None
    assert "partitions auto" in plan.explain()


def test_a_kept_mode_is_a_note_and_an_unkept_one_a_warning_in_text_and_json() -> None:
    """``by_yaml`` keeps its mode on purpose (``keep: true``), ``by_customer`` is set in
    YAML without keep: the first is a ``note:`` line and in ``notes``, the second a
    ``warning:`` line and in ``warnings``; both run as set."""
    b = Builder()
    first = keyed(b, b.source("orders", 2), "by_yaml")
    sink = b.agg(first, "totals", edge="by_customer")
    config = load_config(
        {
            "edges": {
                "by_yaml": {"mode": "hybrid-full", "keep": True},
                "by_customer": {"mode": "pipelined"},
            }
        }
    )
    plan = plan_job("j", sink, config, slots=8)
    note = (
        "edge 'by_yaml' keeps mode hybrid-full on purpose (keep: true); the output-on-EOF "
        "rule would make it blocking, as 'totals' emits only at end of input"
    )
    data = json.loads(json.dumps(plan.explain_data()))
    assert data["notes"] == [note]
    assert len(data["warnings"]) == 1 and data["warnings"][0].startswith("edge 'by_customer'")
    text = plan.explain().splitlines()
    assert text[-2:] == [f"note: {note}", f"warning: {data['warnings'][0]}"]
    modes = {e["name"]: (e["mode"], e["mode_origin"]) for e in data["edges"]}
    assert modes == {"by_yaml": ("hybrid-full", "yaml"), "by_customer": ("pipelined", "yaml")}


def test_a_plan_whose_every_conflict_is_kept_has_no_warning_line() -> None:
    b = Builder()
    sink = b.agg(keyed(b, b.source("orders", 2), "by_yaml"), "totals", edge="by_customer")
    kept = {"mode": "hybrid-selective", "keep": True}
    config = load_config({"edges": {"by_yaml": kept, "by_customer": kept}})
    plan = plan_job("j", sink, config, slots=8)
    assert plan.explain_data()["warnings"] == []
    assert "warning:" not in plan.explain()
    assert [line for line in plan.explain().splitlines() if line.startswith("note: ")] == [
        f"note: {n}" for n in plan.notes
    ]
    assert len(plan.notes) == 2
