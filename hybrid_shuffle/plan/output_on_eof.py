"""FLIP-331's rule: what emits only at end of input, and everything upstream, runs as batch.

An operator that emits only after all its input ended (``Operator.output_on_eof``:
aggregate, sort, co_group, the sort-merge join) cannot produce a row before its
producers are done, so streaming into it buys nothing: a pipelined edge would
only keep its consumer's slot, and every upstream slot, occupied while nothing
comes out.  The FLIP's answer: the results of such an operator, and the results
of every operator upstream of it, become *batch* partitions, which lets the
scheduler run that part of the job region by region, in batch mode.  The batch
partition type is ``shuffle.batch_mode`` -- ``blocking`` by default, or a hybrid
mode (the FLIP's point 8: Flink's ``execution.batch-shuffle-mode``).

The rule changes only edges whose mode came from the default (or the mode
advisor's ``auto``).  A mode set in code or YAML (by name or by an ``edge_rules:``
entry) is the user's decision and is kept; when it differs from what the
rule would give, the plan carries a warning that ``explain()`` prints, naming
the edge, the operator and how to let the rule apply.  A mode marked ``keep``
(YAML ``edges.NAME.keep: true``, ``ExchangeSpec.keep`` in code) goes against the
rule on purpose: the same fact is then a note, not a warning, so a config that
shows the modes on one job on purpose warns about nothing.  Plain Python, no Ray.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hybrid_shuffle.plan.graph import JobEdge, JobGraph, JobVertex, ModeOrigin, VertexId
from hybrid_shuffle.shuffle.partition_type import partition_type

__all__ = ["KeptModes", "apply_output_on_eof"]


@dataclass(frozen=True)
class KeptModes:
    """The modes set in code or YAML that the rule would have changed, in the plan's
    edge order: unmarked ones (``warnings``) and those marked ``keep`` (``notes``)."""

    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def apply_output_on_eof(graph: JobGraph, batch_mode: str) -> KeptModes:
    """Make the rule's edges ``batch_mode`` (origin ``output-on-eof``); what explain says
    about the explicit modes it left as they are."""
    kept = KeptModes()
    batch = _batch_producers(graph)
    for edge in graph.edges:  # in the plan's order, as explain lists them
        eof = batch.get(edge.source)
        if eof is None:
            continue
        if edge.mode_origin in (ModeOrigin.DEFAULT, ModeOrigin.AUTO):
            edge.partition_type = partition_type(batch_mode)
            edge.mode_origin = ModeOrigin.OUTPUT_ON_EOF
        elif edge.mode != batch_mode and edge.mode_kept:
            kept.notes.append(_on_purpose(edge, eof, batch_mode))
        elif edge.mode != batch_mode:
            kept.warnings.append(_kept(edge, eof, batch_mode))
    return kept


def _output_on_eof(vertex: JobVertex) -> str | None:
    """The name of the first operator of the vertex's chain that emits only at end of
    its input, if any: the vertex's results then come at its end."""
    return next((op.name for op in vertex.operators if op.output_on_eof), None)


def _output_on_eof_for(vertex: JobVertex, edge: JobEdge) -> str | None:
    """The name of the first operator of the vertex's chain that emits nothing before
    ``edge``'s input ended, if any: the operator it feeds, for that input
    (``Operator.output_on_eof_of``: a hash join's probe side streams), or one chained
    after it."""
    fed, *after = vertex.operators[edge.target_operator :]
    if fed.output_on_eof_of(edge.target_input):
        return fed.name
    return next((op.name for op in after if op.output_on_eof), None)


def _batch_producers(graph: JobGraph) -> dict[VertexId, str]:
    """Every vertex whose results the rule makes batch -> the output-on-EOF operator
    that makes it so (its own, or the first one downstream of it).

    An input edge that feeds an operator chained further down (a broadcast join's
    build side, ``JobEdge.target_operator``) is upstream only of the operators from
    that one on, so an aggregate at the head of the chain does not make it batch.  An
    operator is judged per input: a hash join emits while its probe side arrives, so
    only its build side's edge is batch for it."""
    found: dict[VertexId, str] = {}
    #: vertex -> the output-on-EOF operator downstream of its results
    downstream: dict[VertexId, str] = {}
    for vid in reversed(graph.topological_order()):  # consumers before producers
        vertex = graph.vertices[vid]
        after = downstream.get(vid)
        reason = _output_on_eof(vertex) or after
        if reason is not None:
            found[vid] = reason
        for edge in vertex.inputs:
            into = _output_on_eof_for(vertex, edge) or after
            if into is not None:
                downstream.setdefault(edge.source, into)
    return found


def _kept(edge: JobEdge, operator: str, batch_mode: str) -> str:
    """The warning: the fact, and both ways out (let the rule apply, or say it is meant)."""
    if edge.mode_origin is ModeOrigin.CODE:
        where = "in code (mode=)"
        meant = (
            f"if it is on purpose, say so in YAML: edges: {{{edge.name}: {{mode: {edge.mode}, "
            "keep: true}}"
        )
    elif edge.mode_origin is ModeOrigin.RULE:
        where = f"by {edge.origin}"
        meant = "add keep: true to that rule if it is on purpose"
    else:
        where, meant = "in YAML", "add keep: true beside it if it is on purpose"
    return (
        f"edge '{edge.name}' keeps mode {edge.mode} set {where}, though '{operator}' emits "
        f"only at end of input, so the output-on-EOF rule would make it {batch_mode}; "
        f"remove that mode to let the rule apply, or {meant}"
    )


def _on_purpose(edge: JobEdge, operator: str, batch_mode: str) -> str:
    where = {
        ModeOrigin.CODE: "in code (keep=True)",
        ModeOrigin.RULE: f"({edge.origin}, keep: true)",
    }.get(edge.mode_origin, "(keep: true)")
    return (
        f"edge '{edge.name}' keeps mode {edge.mode} on purpose {where}; the output-on-EOF "
        f"rule would make it {batch_mode}, as '{operator}' emits only at end of input"
    )
