"""What ``explain()`` says about a plan, once, as data: the text and the JSON are two
renderings of the same ``Explanation``.

Why one source: ``hybrid-shuffle explain --format json`` is read by scripts and the text
by people; if each were built on its own, the two would drift (an edge's origin in one,
not the other).  ``explain_plan`` collects every fact the issue asks for -- per edge the
mode and where it came from, the partitions, the shuffle service and the region; per
vertex the slot sharing group and the operator memory -- and ``Explanation.text`` and
``Explanation.as_dict`` only format it.

Contract of ``as_dict``: plain JSON types only (str, int, None, lists, dicts); keys are
``job``, ``slots_needed``, ``slots``, ``vertices``, ``edges``, ``notes``, ``warnings``,
``speculation``, ``adaptive`` (lines: what ``adaptive.broadcast_bytes`` may change or
changed at run time).  ``speculation`` is ``{"enabled": bool, "vertices": [{"name",
"eligible", "reason"}]}``: which vertices ``failover.speculation`` may give a second
attempt, and for the others why not (``plan.speculation``); the text shows it as a
section only when speculation is enabled.
A note is a fact about the plan that needs nothing done; a warning is something the user
may not have meant (a mode set against the output-on-EOF rule without ``keep``), so a
script can fail on ``warnings`` alone.
A vertex's ``operator_memory`` is the bytes each of its tasks may use for operator state
(``operators.memory``) and ``memory_split`` its share per stateful operator; both are
``None`` / empty for a vertex with no stateful operator, which uses none.  An edge's
``partitions`` is an int, or ``"auto"`` while an adaptive consumer's count is not decided.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hybrid_shuffle._words import plural
from hybrid_shuffle.config import format_size
from hybrid_shuffle.plan.speculation import eligibility

if TYPE_CHECKING:
    from hybrid_shuffle.plan.graph import JobEdge, JobGraph, JobVertex
    from hybrid_shuffle.plan.planner import Plan

__all__ = [
    "EdgeExplanation",
    "Explanation",
    "SpeculationExplanation",
    "VertexExplanation",
    "explain_plan",
]


@dataclass(frozen=True)
class SpeculationExplanation:
    """Which vertices speculative execution may copy (``failover.speculation``)."""

    enabled: bool
    #: (vertex name, why it cannot be speculated or None), producers first
    vertices: tuple[tuple[str, str | None], ...]

    def text(self) -> list[str]:
        if not self.enabled:
            return []
        lines = ["speculation (failover.speculation):"]
        for name, reason in self.vertices:
            verdict = "can be speculated" if reason is None else f"not speculated: {reason}"
            lines.append(f"  {name:<24} {verdict}")
        return lines

    def as_dict(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "vertices": [
                {"name": name, "eligible": reason is None, "reason": reason}
                for name, reason in self.vertices
            ],
        }


@dataclass(frozen=True)
class VertexExplanation:
    """One vertex: a chain of operators that runs as one task per subtask."""

    name: str
    #: the subtasks it runs, or None while an adaptive count is not decided
    parallelism: int | None
    #: the parallelism as explain prints it (with an adaptive vertex's state)
    parallelism_text: str
    #: the pipelined region its subtasks belong to ("R0")
    region: str
    #: its operators, first to last (empty for a plain source)
    operators: tuple[str, ...]
    #: tasks of different groups never share an executor ("default" unless set)
    slot_sharing_group: str
    #: vertices with the same key run subtask i on the same executor
    co_location: str | None
    #: ``operators.memory`` for each task, if the vertex has a stateful operator
    operator_memory: int | None
    #: each stateful operator's even share of ``operator_memory``
    memory_split: tuple[tuple[str, int], ...]
    #: the cache it fills or reads, described ("fills cache 'c' (empty)"), else None
    cache: str | None

    def text(self) -> str:
        ops = " -> ".join(self.operators) or "(source)"
        if self.operator_memory is None:
            memory = ", operator memory none (stateless)"
        else:
            each = ", ".join(f"{name} {format_size(size)}" for name, size in self.memory_split)
            memory = f", operator memory {format_size(self.operator_memory)} ({each})"
        cache = f", {self.cache}" if self.cache else ""
        co_located = f", co-located ({self.co_location})" if self.co_location else ""
        return (
            f"  {self.name:<24} parallelism {self.parallelism_text:<3} "
            f"region {self.region:<4} ops: {ops}{memory}{cache}, "
            f"slot sharing group '{self.slot_sharing_group}'{co_located}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "parallelism": self.parallelism,
            "parallelism_text": self.parallelism_text,
            "region": self.region,
            "operators": list(self.operators),
            "slot_sharing_group": self.slot_sharing_group,
            "co_location": self.co_location,
            "operator_memory": self.operator_memory,
            "memory_split": dict(self.memory_split),
            "cache": self.cache,
        }


@dataclass(frozen=True)
class EdgeExplanation:
    """One exchange, named as YAML's ``edges:`` names it."""

    name: str
    source: str
    target: str
    #: "hash(customer)", "range(amount desc)", "forward", ...
    partitioner: str
    #: the map-side combiner in front of the exchange, if any
    combiner: str | None
    mode: str
    #: where the mode came from: code, yaml, default, output-on-eof, auto, or the rule
    #: that set it (``edge_rules[1]``)
    mode_origin: str
    #: why the planner picked it (origin ``auto``), else None
    mode_reason: str | None
    #: the consumer's subtasks, or "auto" while not decided
    partitions: int | str
    #: the shuffle service that keeps its partitions
    service: str
    #: "R0" inside one pipelined region, "R0->R1" between two
    region: str
    #: the columns the producer sends, if the planner prunes any (else None: all)
    keeps: tuple[str, ...] | None

    def text(self) -> str:
        combine = f" after {self.combiner}" if self.combiner is not None else ""
        reason = f": {self.mode_reason}" if self.mode_reason else ""
        keeps = f", keeps {', '.join(self.keeps)}" if self.keeps is not None else ""
        return (
            f"  {self.name:<20} {self.source} -> {self.target}: {self.partitioner}{combine}, "
            f"mode {self.mode} ({self.mode_origin}{reason}), partitions {self.partitions}, "
            f"service {self.service}, region {self.region}{keeps}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "target": self.target,
            "partitioner": self.partitioner,
            "combiner": self.combiner,
            "mode": self.mode,
            "mode_origin": self.mode_origin,
            "mode_reason": self.mode_reason,
            "partitions": self.partitions,
            "service": self.service,
            "region": self.region,
            "keeps": None if self.keeps is None else list(self.keeps),
        }


@dataclass(frozen=True)
class Explanation:
    """A whole plan, as ``explain()`` and ``explain --format json`` show it."""

    job: str
    #: the slots the widest pipelined region needs at once
    slots_needed: int
    #: the slots the session has
    slots: int
    #: vertices, producers first
    vertices: tuple[VertexExplanation, ...]
    #: edges, in the order the planner built them
    edges: tuple[EdgeExplanation, ...]
    #: exchanges left out (a cache read already partitioned for them), then modes set
    #: against the output-on-EOF rule on purpose (``keep``): facts, nothing to fix
    notes: tuple[str, ...]
    #: modes set in code or YAML against the output-on-EOF rule, not marked ``keep``:
    #: maybe a mistake, so each says how to let the rule apply or mark it kept
    warnings: tuple[str, ...]
    #: which vertices can be speculated, and why not the others
    speculation: SpeculationExplanation = SpeculationExplanation(False, ())
    #: what is decided at run time (``adaptive.broadcast_bytes``): per translated shuffled
    #: join, whether it may become a broadcast join and, after a run, whether it did;
    #: then why the others may not
    adaptive: tuple[str, ...] = ()

    def text(self) -> str:
        lines = [
            f"job '{self.job}': {len(self.vertices)} "
            f"{plural(len(self.vertices), 'vertex', 'vertices')}, {len(self.edges)} "
            f"{plural(len(self.edges), 'edge')}, needs {self.slots_needed} "
            f"{plural(self.slots_needed, 'slot')} at once (session has {self.slots})",
            "vertices:",
            *(v.text() for v in self.vertices),
            "edges:",
            *(e.text() for e in self.edges),
            *self.speculation.text(),
            *(f"adaptive: {a}" for a in self.adaptive),
            *(f"note: {n}" for n in self.notes),
            *(f"warning: {w}" for w in self.warnings),
        ]
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "slots_needed": self.slots_needed,
            "slots": self.slots,
            "vertices": [v.as_dict() for v in self.vertices],
            "edges": [e.as_dict() for e in self.edges],
            "notes": list(self.notes),
            "warnings": list(self.warnings),
            "speculation": self.speculation.as_dict(),
            "adaptive": list(self.adaptive),
        }


def explain_plan(plan: Plan) -> Explanation:
    """Every fact ``explain()`` shows about ``plan``, gathered once."""
    g = plan.graph
    vertices = tuple(_vertex(plan, g.vertices[vid]) for vid in g.topological_order())
    edges = tuple(_edge(plan, e) for e in g.edges)
    why_not = eligibility(g)
    speculation = SpeculationExplanation(
        plan.config.failover.speculation.enabled,
        tuple((g.vertices[vid].name, why_not[vid]) for vid in g.topological_order()),
    )
    return Explanation(
        g.job_name,
        plan.slots_needed,
        plan.slots,
        vertices,
        edges,
        tuple(plan.notes),
        tuple(plan.warnings),
        speculation,
        _adaptive(g),
    )


def _adaptive(g: JobGraph) -> tuple[str, ...]:
    """Each candidate join's state (``plan.join_switch``), then the joins that are not."""
    states = [s.change.describe() if s.change else s.describe() for s in g.join_switches]
    return (*states, *g.join_notes)


def _vertex(plan: Plan, v: JobVertex) -> VertexExplanation:
    # the vertex's stateful operators: its chain and the combiners in front of its exchanges
    stateful = [op for op in v.operators if op.uses_memory]
    stateful += [e.combiner for e in v.outputs if e.combiner and e.combiner.uses_memory]
    memory = plan.config.operators.memory if stateful else None
    share = memory // len(stateful) if memory is not None else 0
    return VertexExplanation(
        name=v.name,
        parallelism=None if v.awaits_parallelism else v.parallelism,
        parallelism_text=v.describe_parallelism(),
        region=plan.vertex_region[v.id],
        operators=tuple(op.describe() for op in v.operators),
        slot_sharing_group=v.slot_sharing_group,
        co_location=v.co_location,
        operator_memory=memory,
        memory_split=tuple((op.name, share) for op in stateful),
        cache=_cache_role(v),
    )


def _cache_role(vertex: JobVertex) -> str | None:
    """The cache a vertex fills (its output is kept after the job) or reads (instead of
    computing its lineage)."""
    if vertex.cache_fill is not None:
        return f"fills {vertex.cache_fill.describe()}"
    if vertex.cache_read is not None:
        cache = vertex.cache_read
        first = "" if cache.readable else f": job '{cache.job.name}' fills it first"
        return f"reads {cache.describe()}{first}"
    return None


def _edge(plan: Plan, e: JobEdge) -> EdgeExplanation:
    g = plan.graph
    dst = g.vertices[e.target]
    region = (
        plan.vertex_region[e.source]
        if e.partition_type.must_be_pipelined()
        else f"{plan.vertex_region[e.source]}->{plan.vertex_region[e.target]}"
    )
    return EdgeExplanation(
        name=e.name,
        source=g.vertices[e.source].name,
        target=dst.name,
        partitioner=e.partitioner.describe() + (", read whole" if e.reads_whole else ""),
        combiner=e.combiner.name if e.combiner is not None else None,
        mode=str(e.mode),
        mode_origin=e.origin,
        mode_reason=e.mode_reason or None,
        partitions="auto" if dst.awaits_parallelism else dst.parallelism,
        service=e.service,
        region=region,
        keeps=tuple(sorted(e.columns)) if e.columns is not None else None,
    )
