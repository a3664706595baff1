"""What a suite is: its data, its cases, the systems it runs and the oracle it checks.

A suite is one module of ``benchmarks/suites/`` exporting ``SUITE``.  The runner
(``python -m benchmarks run SUITE``) calls ``data(scale, folder)`` then ``run(ctx)``; ``run``
returns its cases as :class:`~benchmarks.harness.Measurement` (one per case and
system: ``workload`` is the case) and a free-form ``summary`` (the suite's own figures,
its ``targets`` if it has some).  A case whose answer was compared with the oracle and
matched has ``checked = True``; a mismatch is the case's ``error``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.harness import Measurement

__all__ = ["Context", "Outcome", "Suite", "mark_checked", "object_store"]


@dataclass(frozen=True)
class Context:
    """What one ``run`` is asked for: ``scale`` in the suite's own unit, the systems
    (a subset of the suite's), the timed runs per case, and where results go."""

    scale: float
    systems: tuple[str, ...]
    runs: int
    out: Path
    label: str
    data: Any = None  #: what ``Suite.data(scale)`` returned


@dataclass
class Outcome:
    cases: list[Measurement]
    summary: dict[str, Any] = field(default_factory=dict)
    #: lines the suite prints after the table (a profile, a per-query breakdown)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    #: the issue the suite answers (its figures and history are in BENCHMARKS.md)
    issue: str
    #: what ``--scale`` counts, its default (the issue-level run) and the smoke-test size
    scale_unit: str
    default_scale: float
    tiny_scale: float
    #: the systems the suite can run; ``engine`` first, then its peers
    systems: tuple[str, ...]
    #: the oracle every answer is checked against (a peer, pyarrow, or a reference)
    oracle: str
    run: Callable[[Context], Outcome]
    default_systems: tuple[str, ...] = ()
    #: prepares the suite's inputs under a folder (``--data``), returns what ``run`` reads
    data: Callable[[float, Path], Any] | None = None
    runs: int = 3

    def pick(self, names: Sequence[str] | None) -> tuple[str, ...]:
        """``--systems``, checked against the suite's (a typo would run nothing)."""
        if not names:
            return self.default_systems or self.systems
        unknown = sorted(set(names) - set(self.systems))
        if unknown:
            raise ValueError(
                f"suite {self.name} has no system {', '.join(unknown)}; "
                f"choose from {', '.join(self.systems)}"
            )
        return tuple(names)


def mark_checked(cases: list[Measurement], which: Callable[[Measurement], bool]) -> None:
    """``checked = True`` on the cases ``which`` names that ran without error (their
    answers were compared with the oracle inside the run: a mismatch is an error)."""
    for m in cases:
        if which(m) and m.seconds and m.error is None:
            m.checked = True


def object_store(scale: float, full: str = "3 GiB") -> str:
    """The object store of a run: ``full`` at the issue-level scales, 300 MiB below
    scale 1 (the smoke runs share the machine)."""
    return full if scale >= 1 else "300 MiB"
