"""The support table of ``docs/guide/spark-plans.md``, generated from the code (as Comet's is).

``render()`` lists every Spark operator class in ``operators.OPERATORS`` with the
module that translates it and its support level (``operators.SUPPORT``: translated
whole, or partly with a note saying which cases fall back), and every Spark
expression class in ``expressions.TABLE`` with its support level and note, as Markdown.  ``python -m
hybrid_shuffle.sparkplan.support`` prints it (``--update FILE`` rewrites the part of
``FILE`` between the ``BEGIN`` and ``END`` marker comments); the doc holds it between
those markers, and a unit test checks the two agree.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hybrid_shuffle.sparkplan.expressions import TABLE, Support
from hybrid_shuffle.sparkplan.operators import OPERATORS, SUPPORT

__all__ = ["BEGIN", "END", "embedded", "render", "update"]

BEGIN = "<!-- BEGIN generated support table: python -m hybrid_shuffle.sparkplan.support -->"
END = "<!-- END generated support table -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    """The operators and expressions the engine translates, as Markdown."""
    lines = [
        f"**Operators** ({len(OPERATORS)} Spark classes; any other runs in Spark; a translated "
        "operator still falls back where one of its expressions does):",
        "",
        "| operator | module (`sparkplan/operators/`) | support | note |",
        "|---|---|---|---|",
    ]
    for name in sorted(OPERATORS, key=lambda n: (OPERATORS[n].__module__, n)):
        family = OPERATORS[name].__module__.rsplit(".", 1)[-1]
        support = SUPPORT[name]
        level = "translated" if support.support == "full" else "**partial**"
        lines.append(f"| `{name}` | `{family}.py` | {level} | {_cell(support.note)} |")
    lines += [
        "",
        f"**Expressions** ({len(TABLE)} Spark classes; any other makes its operator run in Spark):",
        "",
        "| expression | support | note |",
        "|---|---|---|",
    ]
    for name in sorted(TABLE):
        entry = TABLE[name]
        level = entry.support.value
        if entry.support is Support.PARTIAL:
            level = f"**{level}**"
        lines.append(f"| `{name}` | {level} | {_cell(entry.note)} |")
    return "\n".join(lines) + "\n"


def embedded(text: str) -> str:
    """The part of ``text`` between the markers (``ValueError`` if they are missing)."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the markers {BEGIN!r} and {END!r} are not both there, in order")
    return text[start + len(BEGIN) : end].strip("\n") + "\n"


def update(path: str | Path) -> None:
    """Rewrite the table between the markers of the file at ``path``."""
    file = Path(path)
    text = file.read_text(encoding="utf-8")
    embedded(text)  # the markers are there
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    file.write_text(f"{head}{BEGIN}\n{render()}{END}{tail}", encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--update"] and len(sys.argv) == 3:
        update(sys.argv[2])
    else:
        print(render(), end="")
