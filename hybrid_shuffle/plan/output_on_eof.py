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
advisor's ``auto``).  A mode set in
code or YAML is the user's decision and is kept; when it differs from what the
rule would give, the plan carries a warning that ``explain()`` prints, naming
the edge, the operator and how to let the rule apply.  Plain Python, no Ray.
"""

from __future__ import annotations

from hybrid_shuffle.plan.graph import JobEdge, JobGraph, JobVertex, ModeOrigin, VertexId
from hybrid_shuffle.shuffle.partition_type import partition_type

__all__ = ["apply_output_on_eof"]


def apply_output_on_eof(graph: JobGraph, batch_mode: str) -> list[str]:
    """Make the rule's edges ``batch_mode`` (origin ``output-on-eof``); the warnings for
    explicit modes it kept."""
    warnings: list[str] = []
    batch = _batch_producers(graph)
    for edge in graph.edges:  # in the plan's order, as explain lists them
        eof = batch.get(edge.source)
        if eof is None:
            continue
        if edge.mode_origin in (ModeOrigin.DEFAULT, ModeOrigin.AUTO):
            edge.partition_type = partition_type(batch_mode)
            edge.mode_origin = ModeOrigin.OUTPUT_ON_EOF
        elif edge.mode != batch_mode:
            warnings.append(_kept(edge, eof, batch_mode))
    return warnings


def _output_on_eof(vertex: JobVertex, start: int = 0) -> str | None:
    """The name of the first output-on-EOF operator of the vertex's chain from operator
    ``start`` on (what an input feeding operator ``start`` flows through), if any."""
    return next((op.name for op in vertex.operators[start:] if op.output_on_eof), None)


def _batch_producers(graph: JobGraph) -> dict[VertexId, str]:
    """Every vertex whose results the rule makes batch -> the output-on-EOF operator
    that makes it so (its own, or the first one downstream of it).

    An input edge that feeds an operator chained further down (a broadcast join's
    build side, ``JobEdge.target_operator``) is upstream only of the operators from
    that one on, so an aggregate at the head of the chain does not make it batch."""
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
            into = _output_on_eof(vertex, edge.target_operator) or after
            if into is not None:
                downstream.setdefault(edge.source, into)
    return found


def _kept(edge: JobEdge, operator: str, batch_mode: str) -> str:
    where = "in code (mode=)" if edge.mode_origin is ModeOrigin.CODE else "in YAML"
    return (
        f"edge '{edge.name}' keeps mode {edge.mode} set {where}, though '{operator}' emits "
        f"only at end of input, so the output-on-EOF rule would make it {batch_mode}; "
        "remove that mode to let the rule apply"
    )
