"""Every config in ``configs/`` plans its example's job with no warning (issue 26).

A new user runs the examples with the project's own configs first; a ``warning:`` line
there teaches them to ignore warnings.  So for each file in ``configs/`` this module
names the example whose job it configures (``SHIPPED``; a file left out fails
``test_every_shipped_config_has_its_example_here``) and plans that job with it: no
``warning:`` in explain (a mode set against the output-on-EOF rule on purpose is
marked ``keep: true``, and is then a note), no ``ConfigWarning`` (``job:`` is the
example's job, so its ``edges:`` apply), and no ``keep: true`` where the rule agrees
(it would note nothing).  Pipeline files are planned as ``hybrid-shuffle explain``
plans them, on schema-only stand-ins in a ``PlanningSession``: no Ray, no Spark.  The
main job is a PySpark DataFrame, so its configs are planned in
``tests/spark/test_bridge.py``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hybrid_shuffle.config import Config, ConfigWarning, load_config
from hybrid_shuffle.pipeline_file import load_pipeline
from hybrid_shuffle.planning import PlanningSession

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
#: where a config whose example needs Spark is planned
SPARK_TEST = "tests/spark/test_bridge.py::test_the_main_job_s_config_plans_it_with_no_warning"


@dataclass(frozen=True)
class Example:
    """The example a shipped config is for."""

    #: the example file, from the repository's root
    path: str
    #: None: a pipeline file, planned here; else the test that plans it (it needs Spark)
    planned_in: str | None = None


#: every file in configs/ -> the example whose job it configures
SHIPPED = {
    # ./dev main: the PySpark DataFrame through session.from_dataframe, on Spark 3.5 and
    # Spark 4 alike (./dev main --spark 4): its edge_rules match edges by what they are
    "main.yaml": Example("examples/main_job.py", planned_in=SPARK_TEST),
    # docs/guide/api.md's step-by-step job is this example's build()
    "quickstart.yaml": Example("examples/arrow_quickstart.py"),
    # hybrid-shuffle run|explain examples/pipeline_revenue.py --config configs/pipeline_revenue.yaml
    "pipeline_revenue.yaml": Example("examples/pipeline_revenue.py"),
}
PIPELINE_FILES = sorted(name for name, example in SHIPPED.items() if example.planned_in is None)


def planned(example: Example, config: Config) -> tuple[dict[str, Any], str]:
    """``explain_data()`` and ``explain()`` of the example's job under ``config``, planned
    as ``hybrid-shuffle explain EXAMPLE --config CONFIG`` plans it; a ``ConfigWarning`` is
    an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        stream = load_pipeline(str(ROOT / example.path)).plan_stream(PlanningSession(config))
        return stream.explain_data(), stream.explain()


def test_every_shipped_config_has_its_example_here() -> None:
    shipped = sorted(p.name for p in CONFIGS.glob("*.yaml"))
    missing = [name for name in shipped if name not in SHIPPED]
    assert missing == [], (
        f"configs/{', configs/'.join(missing)}: not in SHIPPED ({__name__}); name the "
        "example whose job it configures, so that it is planned with it"
    )
    for name, example in SHIPPED.items():
        assert (ROOT / example.path).is_file(), f"{name}: {example.path} does not exist"


@pytest.mark.parametrize("name", PIPELINE_FILES)
def test_a_shipped_config_plans_its_example_with_no_warning(name: str) -> None:
    path = CONFIGS / name
    if not path.exists():
        pytest.skip(f"configs/{name} is not in the repository yet")
    config = load_config(path)
    data, text = planned(SHIPPED[name], config)
    assert data["warnings"] == [], f"configs/{name}: {data['warnings']}"
    assert "warning:" not in text
    assert config.job in (None, data["job"])
    kept = sorted(edge for edge, entry in config.edges.items() if entry.keep)
    noted = sorted(edge for edge in config.edges if any(f"'{edge}'" in n for n in data["notes"]))
    assert kept == noted, f"configs/{name}: keep: true on a mode the rule agrees with"


def test_the_quickstart_keeps_its_pipelined_edge_on_purpose_and_says_so() -> None:
    """``by_customer`` is pipelined into an aggregate, against the rule, to show a
    pipelined region: a note with ``keep: true``, the warning this module guards against
    without it."""
    config = load_config(CONFIGS / "quickstart.yaml")
    data, _ = planned(SHIPPED["quickstart.yaml"], config)
    modes = {e["name"]: (e["mode"], e["mode_origin"]) for e in data["edges"]}
    assert modes["by_customer"] == ("pipelined", "yaml")
    assert [n for n in data["notes"] if "'by_customer'" in n] == [
        "edge 'by_customer' keeps mode pipelined on purpose (keep: true); the output-on-EOF "
        "rule would make it blocking, as 'totals' emits only at end of input"
    ]
    unkept = config.with_overrides(edges={**config.edges, "by_customer": {"mode": "pipelined"}})
    data, text = planned(SHIPPED["quickstart.yaml"], unkept)
    assert len(data["warnings"]) == 1 and "warning: edge 'by_customer' keeps mode" in text
