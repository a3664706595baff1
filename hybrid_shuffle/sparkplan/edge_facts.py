"""What a translated edge is, for ``edge_rules:`` (``plan.edge_rules.EdgeFacts``).

Spark numbers its exchanges anew whenever it plans a job differently (a sort-merge
join instead of a broadcast join once a table grows), so a config naming
``exchange_11`` holds for one plan only.  A rule names what does not move: the
partitioning Spark chose (``kind``: ``hashpartitioning`` is ``hash``,
``SinglePartition`` ``single``, ``rangepartitioning`` ``range``,
``RoundRobinPartitioning`` ``round_robin``, a ``BroadcastExchange`` ``broadcast``;
the engine's own one-task steps are ``gather``), the columns it partitions on by
their Spark names (``keys``, as ``df.explain()`` prints them without their ``#id``;
a key that is an expression, not a column, is written ``<expression>`` and
matches no ``keys`` rule), and the operator reading the edge (``into``): the
first operator above the exchange that is not a projection, a filter, a sort
Spark adds for a merge join or a window, or a wrapper of code generation.
"""

from __future__ import annotations

from collections.abc import Mapping

from hybrid_shuffle.plan.edge_rules import EdgeFacts
from hybrid_shuffle.sparkplan.tree import Node

__all__ = ["ROW_BY_ROW", "consumer_kind", "exchange_facts", "key_names"]

#: Spark's partitionings -> the rule kinds
_PARTITIONINGS = {
    "HashPartitioning": "hash",
    "SinglePartition": "single",
    "RangePartitioning": "range",
    "RoundRobinPartitioning": "round_robin",
}
#: operators that change nothing of the rows, or only per row
ROW_BY_ROW = frozenset(
    {
        "WholeStageCodegenExec",
        "InputAdapter",
        "ColumnarToRowExec",
        "RowToColumnarExec",
        "ProjectExec",
        "FilterExec",
    }
)
#: operators an edge passes through on its way to the operator it feeds
_THROUGH = ROW_BY_ROW | {"AQEShuffleReadExec", "ShuffleQueryStageExec", "BroadcastQueryStageExec"}
#: Spark operators -> what ``edge_rules[i].match.into`` calls them
_KINDS: Mapping[str, str] = {
    **dict.fromkeys(
        (
            "BroadcastHashJoinExec",
            "ShuffledHashJoinExec",
            "SortMergeJoinExec",
            "BroadcastNestedLoopJoinExec",
            "CartesianProductExec",
        ),
        "join",
    ),
    **dict.fromkeys(
        ("HashAggregateExec", "SortAggregateExec", "ObjectHashAggregateExec"), "aggregate"
    ),
    "SortExec": "sort",
    **dict.fromkeys(("WindowExec", "WindowGroupLimitExec"), "window"),
    **dict.fromkeys(
        ("GlobalLimitExec", "LocalLimitExec", "CollectLimitExec", "TakeOrderedAndProjectExec"),
        "limit",
    ),
    "UnionExec": "union",
    **dict.fromkeys(
        (
            "BatchEvalPythonExec",
            "ArrowEvalPythonExec",
            "MapInPandasExec",
            "PythonMapInArrowExec",
            "MapInArrowExec",
            "FlatMapGroupsInPandasExec",
            "FlatMapCoGroupsInPandasExec",
            "AggregateInPandasExec",
            "WindowInPandasExec",
        ),
        "udf",
    ),
}


def consumer_kind(node: Node, parents: Mapping[int, Node]) -> str | None:
    """What ``edge_rules`` calls the operator reading ``node``'s rows (``parents``:
    ``id(child)`` -> its parent), or ``None`` if none of the list reads them."""
    parent = parents.get(id(node))
    while parent is not None and (
        parent.cls in _THROUGH or (parent.cls == "SortExec" and not parent.get("global", False))
    ):
        parent = parents.get(id(parent))
    return None if parent is None else _KINDS.get(parent.cls)


def key_names(keys: list[Node]) -> tuple[str, ...]:
    """Partitioning or sort keys by their Spark names (``<expression>`` for one that is
    not a column)."""
    names = []
    for key in keys:
        if key.cls == "SortOrder":
            key = key.child
        names.append(str(key.get("name")) if key.cls == "AttributeReference" else "<expression>")
    return tuple(names)


def exchange_facts(exchange: Node, parents: Mapping[int, Node]) -> EdgeFacts:
    """The facts of a ``ShuffleExchange`` or ``BroadcastExchange`` read by the operator
    above it."""
    into = consumer_kind(exchange, parents)
    if exchange.cls == "BroadcastExchangeExec":
        return EdgeFacts("broadcast", (), into)
    partitioning = exchange.expr("outputPartitioning")
    name = partitioning.cls if partitioning is not None else "SinglePartition"
    kind = _PARTITIONINGS.get(name)
    keys = key_names(partitioning.children) if partitioning is not None else ()
    return EdgeFacts(kind, keys if kind in ("hash", "range") else (), into)
