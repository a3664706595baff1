"""``hybrid-shuffle explain`` and ``run``, in-process through ``cli.main`` on the module's
Ray: the text names every edge's mode and where it came from, and ``--format json`` parses
into the same edges and modes; a pipeline file with declared inputs runs on what its
``sources(job)`` makes and explains on stand-ins (``Job.from_schema``), which run to zero
rows.  (Explain without Ray: ``tests/unit/test_pipeline_file.py``.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import hybrid_shuffle as hs
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


# -- pipeline files with declared inputs (hybrid_shuffle.pipeline_file) --------------------

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
QUICKSTART_YAML = str(ROOT / "configs" / "quickstart.yaml")

#: examples/arrow_quickstart.py's SCHEMAS and build, on 2,000 orders instead of 1M
SMALL_QUICKSTART = f"""
import sys

sys.path.insert(0, {str(EXAMPLES)!r})
from arrow_quickstart import SCHEMAS, build, orders_source


def sources(job):
    return {{"orders": orders_source(job, rows=2_000)}}
"""

#: declared inputs whose sources() must never be called by explain
STAND_INS_ONLY = """
import pyarrow as pa

SCHEMAS = {"orders": pa.schema([("customer", pa.string()), ("amount", pa.float64())])}


def sources(job):
    raise AssertionError("explain called sources()")


def build(session, orders):
    totals = orders.key_by("customer", edge="by_customer").aggregate({"amount": ["sum"]})
    return totals.sort("amount_sum", descending=True, edge="to_sort")
"""


def test_run_of_the_quickstart_protocol_makes_its_inputs_and_runs(
    local_ray: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pipeline = tmp_path / "small_quickstart.py"
    pipeline.write_text(SMALL_QUICKSTART)
    code = main(["run", str(pipeline), "--config", QUICKSTART_YAML, "--no-progress"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "amount_sum" in out and "amount_count" in out
    assert "edge by_customer" in out and "edge to_sort" in out
    assert "ConfigWarning" not in err  # the job is 'revenue', as the config's job: says


def test_explain_with_an_address_plans_the_stand_ins_with_the_clusters_slots(
    local_ray: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pipeline = tmp_path / "stand_ins.py"
    pipeline.write_text(STAND_INS_ONLY)
    config = tmp_path / "job.yaml"
    config.write_text("parallelism: 2\n")
    code = main(["explain", str(pipeline), "--config", str(config), "--address", "auto"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.startswith("job 'stand_ins': ")  # no job: in the config: the file's stem
    assert "(session has 2)" in out  # the module's Ray has 2 CPUs


@pytest.fixture(scope="module")
def session(local_ray: None) -> Iterator[hs.Session]:
    with hs.Session({"parallelism": 2, "slots": 2}) as s:
        yield s


def test_from_schema_collects_zero_rows_with_the_schema(session: hs.Session) -> None:
    schema = pa.schema([("customer", pa.string()), ("amount", pa.float64())])
    job = session.job("empty")
    table = job.from_schema(schema, name="orders").to_arrow()
    assert table.num_rows == 0
    assert table.schema == schema


def test_a_job_on_from_schema_runs_to_an_empty_result(session: hs.Session) -> None:
    orders = pa.schema([("customer", pa.string()), ("amount", pa.float64())])
    customers = pa.schema([("customer", pa.string()), ("segment", pa.string())])
    job = session.job("empty")
    joined = job.from_schema(orders, name="orders").join(
        job.from_schema(customers, name="customers"), on="customer"
    )
    totals = joined.key_by("segment").aggregate({"amount": ["sum"]}, name="totals")
    table = totals.to_arrow()
    assert table.num_rows == 0
    assert table.column_names == ["segment", "amount_sum"]
