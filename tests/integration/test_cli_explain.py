"""``hybrid-shuffle explain``, in-process through ``cli.main`` on the module's Ray: the text
names every edge's mode and where it came from, and ``--format json`` parses into the same
edges and modes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hybrid_shuffle.cli import main

PIPELINE = """
import pyarrow as pa

import hybrid_shuffle as hs


def build(session: hs.Session) -> hs.Stream:
    table = pa.table({"customer": ["a", "b", "a"], "amount": [1.0, 2.0, 3.0]})
    job = session.job("revenue")
    orders = job.from_arrow(table, name="orders", parallelism=2)
    spread = orders.rebalance(edge="spread", mode="hybrid-full")
    totals = spread.key_by("customer", edge="by_customer").aggregate(
        {"amount": ["sum"]}, name="totals"
    )
    return totals.sort("amount_sum", descending=True, edge="to_sort")
"""

CONFIG = """
job: revenue
parallelism: 2
slots: 2
edges:
  by_customer: {mode: hybrid-selective, service: external}
"""

ORIGINS = {"spread": "code", "by_customer": "yaml", "to_sort": "output-on-eof"}


@pytest.fixture
def files(tmp_path: Path) -> tuple[str, str]:
    pipeline = tmp_path / "pipeline.py"
    pipeline.write_text(PIPELINE)
    config = tmp_path / "job.yaml"
    config.write_text(CONFIG)
    return str(pipeline), str(config)


def explain(files: tuple[str, str], capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    pipeline, config = files
    assert main(["explain", pipeline, "--config", config, *extra]) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def test_explain_shows_the_mode_origin_of_every_edge(
    local_ray: None, files: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    text = explain(files, capsys)
    edges = {
        line.split()[0]: line
        for line in text.split("edges:\n", 1)[1].splitlines()
        if line[:2] == "  "
    }
    assert set(edges) == set(ORIGINS)
    for name, origin in ORIGINS.items():
        assert f"({origin})" in edges[name] or f"({origin}:" in edges[name], edges[name]
    assert "service external" in edges["by_customer"]
    assert "service executor-local" in edges["to_sort"]
    assert "slot sharing group 'default'" in text


def test_explain_format_json_parses_with_the_same_edges_and_modes_as_the_text(
    local_ray: None, files: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    text = explain(files, capsys)
    data = json.loads(explain(files, capsys, "--format", "json"))
    assert {e["name"]: e["mode_origin"] for e in data["edges"]} == ORIGINS
    for edge in data["edges"]:
        assert f"{edge['name']}" in text
        assert f"mode {edge['mode']} ({edge['mode_origin']}" in text
    assert data["job"] == "revenue"
    assert [v["name"] for v in data["vertices"]] == [
        line.split()[0]
        for line in text.split("vertices:\n", 1)[1].split("edges:\n", 1)[0].splitlines()
    ]
