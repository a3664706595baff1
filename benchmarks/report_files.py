"""Where a benchmark's figures go: ``<folder>/<name>.txt`` (the printed report) and
``<name>.json`` (everything measured), so BENCHMARKS.md can cite both."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["write_report"]


def write_report(folder: str | Path, name: str, lines: list[str], summary: dict[str, Any]) -> None:
    """Write the report's ``lines`` and the ``summary`` beside each other, creating
    ``folder`` if need be."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.txt").write_text("\n".join(lines) + "\n")
    (out / f"{name}.json").write_text(json.dumps(summary, indent=2) + "\n")
