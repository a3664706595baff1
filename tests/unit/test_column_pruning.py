"""Column pruning at plan time: what each exchange and source keeps (the job-level
checks against pyarrow are in tests/integration/test_pruning_and_adaptive.py)."""

from __future__ import annotations

import pyarrow as pa

from hybrid_shuffle.config import Config
from hybrid_shuffle.operators import HashJoin, Rename, SortPartition
from hybrid_shuffle.operators.columns import project
from hybrid_shuffle.plan.planner import ExchangeSpec, LogicalNode, plan_job
from hybrid_shuffle.shuffle.routing import Partitioner, PartitionerKind

from .builders import Builder

WIDE = pa.schema([("customer", pa.string()), ("amount", pa.float64()), ("note", pa.string())])


def wide_source(b: Builder, name: str = "src") -> LogicalNode:
    node = b.source(name, 2)
    node.source_schema = WIDE
    return node


def test_aggregate_exchange_keeps_keys_and_aggregated_columns_only() -> None:
    b = Builder()
    agg = b.agg(wide_source(b), "agg", edge="e")
    plan = plan_job("j", agg, Config(), slots=4)
    assert plan.graph.edge("e").columns == frozenset({"customer", "amount"})
    assert plan.source_columns[0] == frozenset({"customer", "amount"})
    assert plan.explain().endswith("region R0->R1, keeps amount, customer")


def test_nothing_is_pruned_above_a_function_or_at_the_sink() -> None:
    b = Builder()
    mapped = b.map(wide_source(b), "map")
    agg = b.agg(mapped, "agg", edge="e")
    plan = plan_job("j", agg, Config(), slots=4)
    assert plan.graph.edge("e").columns == frozenset({"customer", "amount"})
    assert plan.source_columns[0] is None  # the map may read "note"

    b = Builder()
    src = wide_source(b)
    spec = ExchangeSpec(Partitioner(PartitionerKind.RANGE, ("amount",)), "to_sort")
    ordered = LogicalNode(next(b.ids), "sort", SortPartition(["amount"], False, "s"), [(src, spec)])
    plan = plan_job("j", ordered, Config(), slots=4)
    assert plan.graph.edge("to_sort").columns is None  # the result keeps every column


def test_join_keeps_a_column_both_sides_have_when_its_suffixed_name_is_read() -> None:
    join = HashJoin(["k"], "inner", "j")
    left, right = join.input_columns(frozenset({"v_right", "w"}))
    assert left == right == frozenset({"k", "v_right", "v", "w"})
    assert join.input_columns(None) == [None, None]


def test_rename_is_traced_back_to_the_old_names() -> None:
    rename = Rename({"a": "b"}, "r")
    assert rename.input_columns(frozenset({"b", "c"})) == [frozenset({"a", "c"})]


def test_project_keeps_order_and_says_when_nothing_is_dropped() -> None:
    assert project(["a", "b", "c"], frozenset({"c", "a", "zz"})) == ["a", "c"]
    assert project(["a", "b"], frozenset({"a", "b"})) is None
    assert project(["a", "b"], None) is None
