"""The support table in ``docs/guide/spark-plans.md`` is the one the code generates
(``hybrid_shuffle.sparkplan.support``): adding an expression or an operator, or changing
a support level or note, without regenerating the doc fails here.  No Ray, no Spark."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybrid_shuffle.sparkplan.expressions import TABLE
from hybrid_shuffle.sparkplan.operators import OPERATORS
from hybrid_shuffle.sparkplan.support import BEGIN, END, embedded, render, update

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "guide" / "spark-plans.md"
REGENERATE = "python -m hybrid_shuffle.sparkplan.support --update docs/guide/spark-plans.md"


def test_the_doc_holds_the_generated_table() -> None:
    assert embedded(DOC.read_text(encoding="utf-8")) == render(), (
        f"docs/guide/spark-plans.md's support table is out of date with the code; run: {REGENERATE}"
    )


def test_every_expression_and_operator_is_listed_with_its_level() -> None:
    table = render()
    for name, entry in TABLE.items():
        assert f"| `{name}` | " in table
        assert entry.support.value in table
    for name in OPERATORS:
        assert f"`{name}`" in table


def test_update_rewrites_only_between_the_markers(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(f"# Title\n\nbefore\n\n{BEGIN}\nstale\n{END}\n\nafter\n")
    update(doc)
    text = doc.read_text()
    assert text.startswith("# Title\n\nbefore\n\n") and text.endswith(f"{END}\n\nafter\n")
    assert embedded(text) == render() and "stale" not in text


def test_missing_markers_are_named() -> None:
    with pytest.raises(ValueError, match="markers"):
        embedded("no table here")
