"""What a translated Spark exchange is for ``edge_rules``: its kind, its keys by Spark's
names and the operator reading it (``sparkplan.edge_facts``; plain plan trees, no Spark)."""

from __future__ import annotations

import itertools
from typing import Any

from hybrid_shuffle.plan.edge_rules import EdgeFacts
from hybrid_shuffle.sparkplan.edge_facts import consumer_kind, exchange_facts
from hybrid_shuffle.sparkplan.tree import Node


def attribute(name: str) -> list[dict[str, Any]]:
    return [{"class": "AttributeReference", "num-children": 0, "name": name}]


def partitioning(cls: str, *keys: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"class": cls, "num-children": len(keys)}, *(n for key in keys for n in key)]


def exchange(*keys: list[dict[str, Any]], cls: str = "HashPartitioning") -> Node:
    return Node("ShuffleExchangeExec", {"outputPartitioning": partitioning(cls, *keys)})


def chain(*operators: Node) -> dict[int, Node]:
    """``operators`` from the bottom up, each the parent of the one before: the
    ``id(child) -> parent`` map the translation keeps."""
    parents = {}
    for child, parent in itertools.pairwise(operators):
        parent.children.append(child)
        parents[id(child)] = parent
    return parents


def test_a_hash_exchange_under_a_merge_join_s_sort_is_read_by_the_join() -> None:
    shuffle = exchange(attribute("c_custkey"))
    sort = Node("SortExec", {"global": False})
    parents = chain(shuffle, Node("InputAdapter", {}), sort, Node("SortMergeJoinExec", {}))
    assert exchange_facts(shuffle, parents) == EdgeFacts("hash", ("c_custkey",), "join")


def test_keys_are_spark_s_column_names_and_an_expression_key_matches_none() -> None:
    cast = [{"class": "Cast", "num-children": 1}, *attribute("k")]
    shuffle = exchange(attribute("c_mktsegment"), cast)
    parents = chain(shuffle, Node("HashAggregateExec", {}))
    assert exchange_facts(shuffle, parents) == EdgeFacts(
        "hash", ("c_mktsegment", "<expression>"), "aggregate"
    )


def test_range_single_and_broadcast_exchanges_and_what_reads_them() -> None:
    order = [{"class": "SortOrder", "num-children": 1}, *attribute("o_totalprice_sum")]
    ranged = exchange(order, cls="RangePartitioning")
    assert exchange_facts(ranged, chain(ranged, Node("SortExec", {"global": True}))) == (
        EdgeFacts("range", ("o_totalprice_sum",), "sort")
    )
    single = exchange(cls="SinglePartition")
    assert exchange_facts(single, chain(single, Node("WindowExec", {}))).kind == "single"
    broadcast = Node("BroadcastExchangeExec", {})
    parents = chain(broadcast, Node("BroadcastHashJoinExec", {}))
    assert exchange_facts(broadcast, parents) == EdgeFacts("broadcast", (), "join")


def test_projections_and_filters_are_looked_through_and_a_root_has_no_consumer() -> None:
    shuffle = exchange(attribute("k"))
    parents = chain(shuffle, Node("ProjectExec", {}), Node("FilterExec", {}), Node("UnionExec", {}))
    assert consumer_kind(shuffle, parents) == "union"
    lone = exchange(attribute("k"))
    assert consumer_kind(lone, chain(lone, Node("ProjectExec", {}))) is None
    python = exchange(attribute("k"))
    assert consumer_kind(python, chain(python, Node("FlatMapGroupsInPandasExec", {}))) == "udf"
