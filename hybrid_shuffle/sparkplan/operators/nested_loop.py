"""Nested loop joins: ``BroadcastNestedLoopJoinExec`` and ``CartesianProductExec``.

A broadcast nested loop join reads its build side over a broadcast edge, as a
broadcast hash join does, and joins it with the condition (or none) in every
subtask of the streamed side.  That is exact where each output row comes from one
streamed row (inner; the outer, semi, anti and existence joins that keep the
*streamed* side's rows).  Where the rows kept are the *build* side's (``BuildLeft``
with a left outer, semi, anti or existence join; ``BuildRight`` with a right outer
one; a full outer join either way), a build row is matched or not by the whole
streamed side, which no subtask sees: the join then runs in one task of its own,
``stage_<id>_join``, over the streamed side gathered into it (edge ``gather_<id>``)
and the build side broadcast to it, and its rows go on to the rest of the stage
over a round-robin edge ``spread_<id>``.  Spark plans these joins for small sides.

A cartesian product (Spark's cross join of two sides too big to broadcast, computed
pair of partitions by pair of partitions) reads its right side over a broadcast
edge ``broadcast_<id>`` from a stage of its own, ``stage_<id>_right``: every
subtask of the left side joins all of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hybrid_shuffle.plan.edge_rules import EdgeFacts
from hybrid_shuffle.plan.logical import ExchangeSpec
from hybrid_shuffle.shuffle.routing import Partitioner, PartitionerKind
from hybrid_shuffle.sparkplan.edge_facts import consumer_kind
from hybrid_shuffle.sparkplan.expressions import Unsupported
from hybrid_shuffle.sparkplan.operators.join import join_sql, join_type
from hybrid_shuffle.sparkplan.operators.registry import register_operator
from hybrid_shuffle.sparkplan.relation import Rel
from hybrid_shuffle.sparkplan.stage import Stage
from hybrid_shuffle.sparkplan.tree import Node

if TYPE_CHECKING:
    from hybrid_shuffle.sparkplan.translate import Translator

__all__: list[str] = []

#: the join types that keep (or flag) the rows of the side named
_KEEPS_LEFT = ("LeftOuter", "FullOuter", "LeftSemi", "LeftAnti", "ExistenceJoin")
_KEEPS_RIGHT = ("RightOuter", "FullOuter")


@register_operator(
    "BroadcastNestedLoopJoinExec",
    support="partial",
    note=(
        "every join type, with or without a condition; one keeping its broadcast side "
        "whose condition holds a subquery falls back"
    ),
)
def _nested_loop(tr: Translator, node: Node, stage: Stage) -> Rel:
    build = node.object("buildSide")
    kind = join_type(node)
    if (build == "BuildLeft" and kind in _KEEPS_LEFT) or (
        build == "BuildRight" and kind in _KEEPS_RIGHT
    ):
        return _in_one_task(tr, node, stage, streamed=1 if build == "BuildLeft" else 0)
    left = tr.rel(node.children[0], stage)
    right = tr.rel(node.children[1], stage)
    return join_sql(tr, node, left, right)


def _in_one_task(tr: Translator, node: Node, stage: Stage, streamed: int) -> Rel:
    """The join in one task of its own (see the module docstring), read by ``stage``
    over a round-robin edge."""
    condition = node.expr("condition")
    if condition is not None and any("Subquery" in e.cls for e in condition.walk()):
        raise Unsupported("a nested loop join keeping its broadcast side, with a subquery")
    shown = tr.plan.shown_id(node.op_id or -1)
    what = tr.describe(node)
    joining = Stage(tr.job)
    sides: list[Rel] = []
    for index, child in enumerate(node.children):
        if index != streamed:
            sides.append(tr.rel(child, joining))
            continue
        own = Stage(tr.job)
        rel = tr.rel(child, own)
        stream = own.finish(rel, f"stage_{node.op_id}_streamed", final=False)
        edge = f"gather_{shown}"
        tr.info.edges[edge] = f"the streamed side of {what}, into the one task joining it"
        facts = EdgeFacts("gather", (), "join")
        spec = ExchangeSpec(Partitioner(PartitionerKind.ROUND_ROBIN), edge, None, 1, facts=facts)
        sides.append(joining.read(stream, spec, rel.columns))
    joined = join_sql(tr, node, sides[0], sides[1])
    stream = joining.finish(joined, f"stage_{node.op_id}_join", final=False)
    edge = f"spread_{shown}"
    tr.info.edges[edge] = f"the rows of {what}, joined in one task, to the next operators"
    facts = EdgeFacts("round_robin", (), consumer_kind(node, tr.parents()))
    spec = ExchangeSpec(Partitioner(PartitionerKind.ROUND_ROBIN), edge, facts=facts)
    return stage.read(stream, spec, joined.columns)


@register_operator("CartesianProductExec")
def _cartesian(tr: Translator, node: Node, stage: Stage) -> Rel:
    left = tr.rel(node.children[0], stage)
    own = Stage(tr.job)
    rel = tr.rel(node.children[1], own)
    stream = own.finish(rel, f"stage_{node.op_id}_right", final=False)
    edge = f"broadcast_{tr.plan.shown_id(node.op_id or -1)}"
    tr.info.edges[edge] = f"the right side of {tr.describe(node)}, sent to every subtask"
    facts = EdgeFacts("broadcast", (), "join")
    spec = ExchangeSpec(Partitioner(PartitionerKind.BROADCAST), edge, facts=facts)
    right = stage.read(stream, spec, rel.columns)
    return join_sql(tr, node, left, right)
