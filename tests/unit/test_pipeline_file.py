"""Pipeline files with declared inputs (``hybrid_shuffle.pipeline_file``), planned in a
``PlanningSession``: ``explain`` and ``validate --pipeline`` start neither Ray nor Spark,
a wrong edge name exits 2 naming it before anything starts, and every mistake in the
protocol is one sentence naming what to add.  No Ray."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pyarrow as pa
import pytest

import hybrid_shuffle as hs
from hybrid_shuffle.cli import main
from hybrid_shuffle.pipeline_file import UsageError, load_pipeline
from hybrid_shuffle.planning import PlanningOnlyError, PlanningSession

ROOT = Path(__file__).resolve().parents[2]
REVENUE = str(ROOT / "examples" / "pipeline_revenue.py")
REVENUE_YAML = str(ROOT / "configs" / "pipeline_revenue.yaml")
QUICKSTART = str(ROOT / "examples" / "arrow_quickstart.py")
QUICKSTART_YAML = str(ROOT / "configs" / "quickstart.yaml")

#: a small pipeline file with declared inputs; its sources need no Spark
PIPELINE = """
import pyarrow as pa

import hybrid_shuffle as hs

SCHEMAS = {
    "orders": pa.schema([("customer", pa.string()), ("amount", pa.float64())]),
    "customers": pa.schema([("customer", pa.string()), ("segment", pa.string())]),
}


def sources(job):
    orders = pa.table({"customer": ["a", "b", "a"], "amount": [1.0, 2.0, 3.0]})
    customers = pa.table({"customer": ["a", "b"], "segment": ["x", "y"]})
    return {
        "orders": job.from_arrow(orders, name="orders"),
        "customers": job.from_arrow(customers, name="customers"),
    }


def build(session, orders, customers):
    joined = orders.join(customers, on="customer", edge="by_customer")
    totals = joined.key_by("segment", edge="by_segment").aggregate(
        {"amount": ["sum"]}, name="totals"
    )
    return totals.sort("amount_sum", descending=True, edge="to_sort")
"""

CONFIG = "parallelism: 2\nslots: 2\nedges:\n  by_segment: {mode: blocking}\n"


def write(tmp_path: Path, text: str, name: str = "pipeline.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def config_file(tmp_path: Path, text: str = CONFIG) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return str(path)


def stderr_of(capsys: pytest.CaptureFixture[str]) -> str:
    return capsys.readouterr().err.strip()


# -- the shipped examples ------------------------------------------------------------------


def test_explain_of_the_revenue_example_starts_neither_ray_nor_spark() -> None:
    """In a fresh interpreter: after ``explain``, Spark was never imported, Ray never
    started -- nor imported, which keeps the command within a few seconds."""
    probe = textwrap.dedent(
        f"""
        import sys
        from hybrid_shuffle.cli import main
        code = main(["explain", {REVENUE!r}, "--config", {REVENUE_YAML!r}])
        imported = "ray" in sys.modules
        import ray
        print("probe", code, "pyspark" in sys.modules, imported, ray.is_initialized())
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "probe 0 False False False", out.stdout
    for edge in ("customers.right", "by_segment", "to_sort"):
        assert f"  {edge} " in out.stdout
    assert "warning:" not in out.stdout  # the shipped config's modes agree with the rule


def test_validate_pipeline_accepts_the_revenue_example_and_its_config(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["validate", "--pipeline", REVENUE, REVENUE_YAML]) == 0, stderr_of(capsys)
    out = capsys.readouterr().out
    assert out.startswith(f"{REVENUE_YAML}: valid for {REVENUE} (job pipeline_revenue, edges: ")
    for edge in ("customers.right", "by_segment", "to_sort"):
        assert f"{edge}=blocking (yaml)" in out
    assert "warning:" not in out


def test_validate_pipeline_names_an_unknown_edge_and_lists_the_jobs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = Path(REVENUE_YAML).read_text().replace("  by_segment:", "  by_segmnet:")
    bad = config_file(tmp_path, text)
    assert main(["validate", "--pipeline", REVENUE, bad]) == 2
    assert stderr_of(capsys) == (
        "hybrid-shuffle: edges.by_segmnet: no such edge in job 'pipeline_revenue'; edges "
        "are: by_segment, customers.right, to_sort. The plan may have changed with the "
        "data (Spark numbers its exchanges anew when it picks another join): match edges by "
        "what they are with edge_rules (match: {kind, keys, into}) instead of by name"
    )


def test_validate_checks_edge_rules_and_notes_a_rule_that_sets_no_edge(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = config_file(tmp_path, "edge_rules:\n  - match: {into: agregate}\n    mode: blocking\n")
    assert main(["validate", bad]) == 2
    assert stderr_of(capsys) == (
        "hybrid-shuffle: edge_rules[0].match.into: 'agregate' is not one of: join, aggregate, "
        "sort, window, limit, union, udf (did you mean 'aggregate'?)"
    )
    rules = (
        "job: pipeline_revenue\nedge_rules:\n"
        "  - match: {kind: hash, into: aggregate}\n    mode: blocking\n"
        "  - match: {into: window}\n    mode: blocking\n"
    )
    good = config_file(tmp_path, rules)
    assert main(["validate", good]) == 0
    assert "edge_rules: 2" in capsys.readouterr().out
    assert main(["validate", "--pipeline", REVENUE, good]) == 0, stderr_of(capsys)
    out = capsys.readouterr().out
    assert "by_segment=blocking (edge_rules[0])" in out
    assert "note: edge_rules[1] (match: {into: window}) matches no edge of job" in out


def test_validate_pipeline_names_an_unknown_vertex(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = config_file(tmp_path, "vertices:\n  revenu: {parallelism: 2}\n")
    assert main(["validate", "--pipeline", REVENUE, bad]) == 2
    message = stderr_of(capsys)
    assert message.startswith("hybrid-shuffle: vertices.revenu: no such operator in job")
    assert "revenue" in message and "customers" in message


def test_validate_without_pipeline_checks_the_config_alone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["validate", REVENUE_YAML]) == 0
    assert capsys.readouterr().out.startswith(f"{REVENUE_YAML}: valid (job pipeline_revenue,")


def test_explain_of_the_quickstart_plans_its_job_named_as_the_config_says(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["explain", QUICKSTART, "--config", QUICKSTART_YAML]) == 0
    # no ConfigWarning: the job is named 'revenue', as the config's job: says
    assert [w for w in caught if issubclass(w.category, hs.ConfigWarning)] == []
    out = capsys.readouterr().out
    assert out.startswith("job 'revenue': ")
    assert "by_customer" in out and "mode pipelined (yaml)" in out
    assert "to_sort" in out and "partitions 8" in out


def test_run_of_a_file_with_schemas_fails_on_a_wrong_edge_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = config_file(tmp_path, "edges:\n  by_segmnet: {mode: blocking}\n")
    assert main(["run", REVENUE, "--config", bad]) == 2
    assert stderr_of(capsys).startswith(
        "hybrid-shuffle: edges.by_segmnet: no such edge in job 'pipeline_revenue'"
    )
    ray = sys.modules.get("ray")
    assert ray is None or not ray.is_initialized()


# -- the protocol: what is called with what ------------------------------------------------


def test_explain_builds_on_stand_ins_and_run_on_what_sources_makes(tmp_path: Path) -> None:
    pipeline = load_pipeline(write(tmp_path, PIPELINE))
    assert pipeline.declares_inputs
    config = hs.load_config(config_file(tmp_path))
    planned = pipeline.plan_stream(PlanningSession(config))
    assert planned.job.name == "pipeline"  # no job: in the config -> the file's stem
    data = planned.explain_data()
    assert {e["name"]: e["mode"] for e in data["edges"]}["by_segment"] == "blocking"
    # sources() with from_arrow works in a planning session too: the inputs it returns
    # are checked and handed to build by name
    real = pipeline.stream(PlanningSession(config))
    assert real.explain_data()["edges"] == data["edges"]


def test_the_job_is_named_by_the_config(tmp_path: Path) -> None:
    pipeline = load_pipeline(write(tmp_path, PIPELINE))
    config = hs.load_config({"job": "sales"})
    assert pipeline.plan_stream(PlanningSession(config)).job.name == "sales"


def test_a_build_that_starts_spark_is_refused_while_planning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spark = "def build(session, orders, customers):\n    return session.spark.range(3)\n"
    path = write(tmp_path, PIPELINE.split("def build", 1)[0] + spark)
    assert main(["explain", path, "--config", config_file(tmp_path)]) == 2
    assert stderr_of(capsys) == (
        "hybrid-shuffle: session.spark: a planning session (explain, validate, run's check "
        "before start-up) starts no Ray or Spark; make real inputs in the pipeline file's "
        "sources(job), which only run calls"
    )


def test_the_planning_session_refuses_to_run_a_job() -> None:
    session = PlanningSession({"parallelism": 2})
    stream = session.job("j").from_schema(pa.schema([("x", pa.int64())]), name="x")
    with pytest.raises(PlanningOnlyError, match=r"^running job 'j' \(collect, to_arrow"):
        stream.collect()
    with pytest.raises(PlanningOnlyError, match=r"^from_spark 'df': a planning session"):
        session.job("j").from_spark(object(), name="df")
    with pytest.raises(PlanningOnlyError, match=r"^cache\(\): "):
        stream.cache()
    with pytest.raises(PlanningOnlyError, match=r"^session.executors: "):
        _ = session.executors


def test_planning_slots_come_from_the_config_else_ray_num_cpus() -> None:
    assert PlanningSession({"slots": 3}).slots == 3
    assert PlanningSession({"ray": {"num_cpus": 5}}).slots == 5
    assert PlanningSession({}).slots >= 1


def test_from_schema_refuses_what_is_not_a_schema() -> None:
    job = PlanningSession({}).job("j")
    with pytest.raises(hs.PlanError, match=r"^from_schema 'x': got a dict; pass a pyarrow"):
        job.from_schema({"a": pa.int64()}, name="x")
    stream = job.from_schema(pa.schema([("a", pa.int64())]), name="x", parallelism=3)
    assert stream.explain_data()["vertices"][0]["parallelism"] == 3


# -- old-form files ------------------------------------------------------------------------

OLD_FORM = """
import pyarrow as pa


def build(session):
    table = pa.table({"customer": ["a", "b"], "amount": [1.0, 2.0]})
    job = session.job("revenue")
    orders = job.from_arrow(table, name="orders")
    return orders.key_by("customer", edge="by_customer").aggregate({"amount": ["sum"]})
"""


def test_validate_plans_an_old_form_file_that_needs_no_spark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, OLD_FORM)
    assert main(["validate", "--pipeline", path, config_file(tmp_path, "job: revenue\n")]) == 0
    assert "(job revenue, edges: by_customer=blocking (output-on-eof))" in capsys.readouterr().out


def test_validate_of_an_old_form_file_using_spark_says_to_declare_its_inputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "def build(session):\n    return session.spark\n")
    assert main(["validate", "--pipeline", path, config_file(tmp_path)]) == 2
    assert stderr_of(capsys) == (
        f"hybrid-shuffle: pipeline file '{path}' cannot be planned without running it, as its "
        "build(session) needs session.spark; declare its inputs with SCHEMAS and "
        "sources(job) (see docs/guide/pipelines.md)"
    )


def test_an_old_form_build_with_more_parameters_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "def build(session, orders, mode):\n    pass\n")
    assert main(["explain", path, "--config", config_file(tmp_path)]) == 2
    assert stderr_of(capsys) == (
        f"hybrid-shuffle: build() in '{path}' takes 'orders', 'mode' besides the session; "
        "declare its inputs with SCHEMAS and sources(job) (see docs/guide/pipelines.md), or "
        "give them defaults"
    )


# -- mistakes in the file: one sentence each -------------------------------------------------

SCHEMA = 'SCHEMAS = {"orders": pa.schema([("x", pa.int64())])}\n'
SOURCES = 'def sources(job):\n    return {"orders": job.from_arrow(pa.table({"x": [1]}), name="orders")}\n'  # noqa: E501
BUILD = "def build(session, orders):\n    return orders\n"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            SCHEMA + BUILD,
            "pipeline file '{path}' declares SCHEMAS but no sources(job); add def sources(job) "
            "returning the real inputs, one stream per SCHEMAS name (only run calls it)",
        ),
        (
            SOURCES + BUILD,
            "pipeline file '{path}' defines sources(job) but no SCHEMAS; add SCHEMAS = "
            "{{'name': pa.schema([...])}} with the columns of each input sources() returns",
        ),
        (
            SCHEMA + SOURCES + "def build(session, order):\n    return order\n",
            "build() in '{path}' has no parameter 'orders' for the inputs SCHEMAS declares; "
            "define build(session, orders)",
        ),
        (
            SCHEMA + SOURCES + "def build(session, orders, mode):\n    return orders\n",
            "build() in '{path}' takes 'mode', which SCHEMAS does not declare; declare it in "
            "SCHEMAS and sources(job), or give it a default",
        ),
        (
            SCHEMA + SOURCES,
            "pipeline file '{path}' declares SCHEMAS but no build function; define "
            "build(session, orders) returning the stream to run",
        ),
        (
            'SCHEMAS = {"orders": {"x": "int64"}}\n' + SOURCES + BUILD,
            "SCHEMAS['orders'] in '{path}' is a dict; make it a pyarrow schema, like "
            "pa.schema([('id', pa.int64())])",
        ),
        (
            'SCHEMAS = {"my-orders": pa.schema([("x", pa.int64())])}\n' + SOURCES + BUILD,
            "SCHEMAS key 'my-orders' in '{path}' is not a Python name; use one that build() "
            "can take as a parameter, like 'orders'",
        ),
        (
            SCHEMA + "def sources():\n    return {}\n" + BUILD,
            "sources() in '{path}' must take one argument, the job: def sources(job)",
        ),
    ],
    ids=[
        "schemas-without-sources",
        "sources-without-schemas",
        "build-misses-an-input",
        "build-takes-an-undeclared-input",
        "no-build",
        "schema-not-a-schema",
        "name-not-a-parameter",
        "sources-without-the-job",
    ],
)
def test_a_mistake_in_the_file_is_one_sentence_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, message: str
) -> None:
    path = write(tmp_path, "import pyarrow as pa\n" + body)
    assert main(["explain", path, "--config", config_file(tmp_path)]) == 2
    assert stderr_of(capsys) == "hybrid-shuffle: " + message.format(path=path)


@pytest.mark.parametrize(
    ("sources", "message"),
    [
        (
            "return [job.from_arrow(TABLE, name='orders')]",
            "sources(job) in '{path}' returned a list; return a dict with one stream for each "
            "name in SCHEMAS (orders)",
        ),
        (
            "return {'order': job.from_arrow(TABLE, name='orders')}",
            "sources(job) in '{path}' returned no stream for 'orders'; return one for each "
            "name in SCHEMAS (orders)",
        ),
        (
            "return {'orders': job.from_arrow(TABLE, name='orders'), 'x': None}",
            "sources(job) in '{path}' returned 'x', which SCHEMAS does not declare; declare it "
            "in SCHEMAS and as a parameter of build(), or leave it out",
        ),
        (
            "return {'orders': TABLE}",
            "sources(job)['orders'] in '{path}' is a Table; make it a stream of the job, like "
            "job.from_spark(df, name='orders') or job.from_arrow(table, name='orders')",
        ),
        (
            "return {'orders': job.session.job('other').from_arrow(TABLE, name='orders')}",
            "sources(job)['orders'] in '{path}' belongs to job 'other', not to the job "
            "sources() was given ('pipeline'); make it with that job",
        ),
        (
            "return {'orders': job.from_arrow(TABLE)}",
            "sources(job)['orders'] in '{path}' is a source named 'source'; name it 'orders' "
            "(name='orders'), as explain names its stand-in",
        ),
        (
            "return {'orders': job.from_arrow(TABLE.drop_columns(['y']), name='orders')}",
            "sources(job)['orders'] in '{path}' has no column 'y' (string), which "
            "SCHEMAS['orders'] declares; make SCHEMAS['orders'] the input's columns, or "
            "select and cast them in sources()",
        ),
        (
            "return {'orders': job.from_arrow(TABLE.cast(WIDE), name='orders')}",
            "sources(job)['orders'] in '{path}' has column 'x' as double, where "
            "SCHEMAS['orders'] declares int64; make SCHEMAS['orders'] the input's columns, or "
            "select and cast them in sources()",
        ),
        (
            "return {'orders': job.from_arrow(TABLE, name='orders').rename({'y': 'z'})}",
            "sources(job)['orders'] in '{path}' has no column 'y' (string), which "
            "SCHEMAS['orders'] declares; make SCHEMAS['orders'] the input's columns, or "
            "select and cast them in sources()",
        ),
    ],
    ids=[
        "not-a-dict",
        "missing-name",
        "extra-name",
        "not-a-stream",
        "other-job",
        "source-named-otherwise",
        "missing-column",
        "other-type",
        "derived-stream-without-a-column",
    ],
)
def test_what_sources_returns_is_checked_against_schemas(
    tmp_path: Path, sources: str, message: str
) -> None:
    """The checks ``run`` makes once ``sources(job)`` returned; run here in a planning
    session, where ``from_arrow`` works too."""
    path = write(
        tmp_path,
        "import pyarrow as pa\n"
        "SCHEMAS = {'orders': pa.schema([('x', pa.int64()), ('y', pa.string())])}\n"
        "TABLE = pa.table({'x': [1], 'y': ['a']})\n"
        "WIDE = pa.schema([('x', pa.float64()), ('y', pa.large_string())])\n"
        f"def sources(job):\n    {sources}\n" + BUILD,
    )
    pipeline = load_pipeline(path)
    session = PlanningSession({})
    with pytest.raises(UsageError) as raised:
        pipeline.stream(session)
    assert str(raised.value) == message.format(path=path)


def test_string_widths_and_column_order_do_not_matter(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "import pyarrow as pa\n"
        "SCHEMAS = {'orders': pa.schema([('x', pa.int64()), ('y', pa.string())])}\n"
        "TABLE = pa.table({'y': pa.array(['a'], pa.large_string()), 'x': [1]})\n"
        "def sources(job):\n    return {'orders': job.from_arrow(TABLE, name='orders')}\n" + BUILD,
    )
    stream = load_pipeline(path).stream(PlanningSession({}))
    assert stream.node.name == "orders"


def test_empty_schemas_declare_no_inputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``SCHEMAS = {}``: no sources needed, and build(session) is planned without Ray."""
    path = write(tmp_path, "SCHEMAS = {}\n" + OLD_FORM)
    assert main(["explain", path, "--config", config_file(tmp_path, "job: revenue\n")]) == 0
    assert "by_customer" in capsys.readouterr().out
