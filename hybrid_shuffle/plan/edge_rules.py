"""Which YAML settings an edge gets: its ``edges:`` entry by name, else the first
``edge_rules:`` entry that matches what the edge is.

A translated Spark plan names its edges after the ids ``df.explain()`` prints, and
Spark numbers them anew when the data grows and it plans another join, so a config
that names edges holds for one plan only.  A rule matches an edge by what it is
(``EdgeFacts``): how it routes rows (``kind``), the columns it is partitioned on
(``keys``) and the kind of operator consuming it (``into``).  The translation
says what a Spark exchange is (``ExchangeSpec.facts``); for a hand-built job the
facts come from the edge's partitioner and the operator reading it
(``Operator.operator_kind``).  Plain Python, no Ray.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hybrid_shuffle.config import EdgeConfig, EdgeRule
from hybrid_shuffle.shuffle.routing import Partitioner, PartitionerKind

if TYPE_CHECKING:
    from hybrid_shuffle.operators.base import Operator

__all__ = ["EdgeFacts", "EdgeSettings", "derived_facts", "rule_origin"]

#: the rule kinds of the engine's partitioners (a forward edge is no exchange: no rule)
_KINDS = {
    PartitionerKind.HASH: "hash",
    PartitionerKind.RANGE: "range",
    PartitionerKind.ROUND_ROBIN: "round_robin",
    PartitionerKind.BROADCAST: "broadcast",
}


@dataclass(frozen=True)
class EdgeFacts:
    """What an edge is, as ``edge_rules[i].match`` names it (``config.EDGE_KINDS``,
    ``config.EDGE_CONSUMERS``)."""

    #: how it routes rows; ``None``: no kind a rule names (a forward edge)
    kind: str | None
    #: the columns a hash or range edge is partitioned on, by the user's names
    keys: tuple[str, ...] = ()
    #: the kind of operator consuming it; ``None``: none a rule names (a projection)
    into: str | None = None


def derived_facts(partitioner: Partitioner, consumer: Operator | None) -> EdgeFacts:
    """The facts of a hand-built job's edge: its partitioner's kind and keys, and what
    its consumer declares itself to be."""
    kind = _KINDS.get(partitioner.kind)
    keys = tuple(partitioner.keys) if kind in ("hash", "range") else ()
    into = consumer.operator_kind if consumer is not None else None
    return EdgeFacts(kind, keys, into)


def rule_origin(index: int) -> str:
    """How ``explain()`` and ``EdgeMetrics.mode_origin`` name rule ``index``."""
    return f"edge_rules[{index}]"


class EdgeSettings:
    """The ``edges:`` entries and ``edge_rules:`` that apply to one job, and which
    rules set an edge while it was planned (a rule that set none is a note)."""

    def __init__(self, by_name: Mapping[str, EdgeConfig], rules: tuple[EdgeRule, ...]) -> None:
        self.by_name = by_name
        self.rules = rules
        #: rules that match some edge, and those that set one (the first match of an edge
        #: no ``edges:`` entry names)
        self._matched: set[int] = set()
        self._used: set[int] = set()

    def lookup(self, name: str | None, facts: EdgeFacts) -> tuple[EdgeConfig, int | None]:
        """The settings of the edge ``name`` with ``facts``: its ``edges:`` entry (rule
        ``None``), else the first matching rule's (and its index), else no settings."""
        matching = [
            i
            for i, rule in enumerate(self.rules)
            if rule.match.matches(facts.kind, facts.keys, facts.into)
        ]
        self._matched.update(matching)
        if name is not None and name in self.by_name:
            return self.by_name[name], None
        if not matching:
            return EdgeConfig(), None
        self._used.add(matching[0])
        return self.rules[matching[0]].settings(), matching[0]

    def unused(self, job_name: str) -> list[str]:
        """A note per rule that set no edge of the job (not an error: a rule may be
        written for plans the data does not produce every time)."""
        notes = []
        for i, rule in enumerate(self.rules):
            if i in self._used:
                continue
            what = f"{rule_origin(i)} (match: {rule.match.describe()})"
            if i in self._matched:
                notes.append(
                    f"{what} sets no edge of job '{job_name}': an earlier rule or an edges: "
                    "entry sets each edge it matches"
                )
            else:
                notes.append(f"{what} matches no edge of job '{job_name}'")
        return notes
