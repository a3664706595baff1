"""Reading Spark's plan without Spark: ``toJSON``'s pre-order lists as trees, and the
formatted explain's operator ids, exchange arguments, scan locations and reuses."""

from __future__ import annotations

from typing import Any

from hybrid_shuffle.sparkplan.physical import (
    PhysicalPlan,
    _details,
    _number,
    _subquery_plans,
    _tree_blocks,
    subquery_numbers,
    user_ids,
)
from hybrid_shuffle.sparkplan.tree import Node, parse

FORMATTED = """== Physical Plan ==
* HashAggregate (6)
+- Exchange (5)
   +- * HashAggregate (4)
      +- * Filter (3)
         +- * ColumnarToRow (2)
            +- Scan parquet  (1)


(1) Scan parquet
Output [2]: [k#1L, v#2]
Batched: true
Location: InMemoryFileIndex [file:/data/t/part-0.parquet, file:/data/t/part-1.parquet]
ReadSchema: struct<k:bigint,v:int>

(2) ColumnarToRow [codegen id : 1]
Input [2]: [k#1L, v#2]

(3) Filter [codegen id : 1]
Input [2]: [k#1L, v#2]
Condition : (v#2 > Subquery scalar-subquery#9, [id=#40])

(4) HashAggregate [codegen id : 1]
Input [2]: [k#1L, v#2]

(5) Exchange
Input [2]: [k#1L, sum#7L]
Arguments: hashpartitioning(k#1L, 200), ENSURE_REQUIREMENTS, [plan_id=12]

(6) HashAggregate [codegen id : 2]
Input [2]: [k#1L, sum#7L]

(7) ReusedExchange [Reuses operator id: 5]
Output [2]: [k#20L, sum#21L]

===== Subqueries =====

Subquery:1 Hosting operator id = 3 Hosting Expression = Subquery scalar-subquery#9, [id=#40]
* HashAggregate (9)
+- Scan parquet  (8)

"""


def _node(cls: str, children: int = 0, **fields: Any) -> dict[str, Any]:
    return {"class": f"org.apache.spark.sql.execution.{cls}", "num-children": children, **fields}


def test_pre_order_list_becomes_a_tree_with_children_in_order() -> None:
    root = parse([_node("A", 2), _node("B", 1), _node("C"), _node("D")])
    assert [n.cls for n in root.walk()] == ["A", "B", "C", "D"]
    assert [c.cls for c in root.children] == ["B", "D"]
    assert root.children[0].child.cls == "C"


def test_expression_fields_parse_lazily_and_objects_read_by_short_name() -> None:
    attribute = {
        "class": "org.apache.spark.sql.catalyst.expressions.AttributeReference",
        "num-children": 0,
        "name": "k",
    }
    node = Node(
        "JoinExec",
        {
            "condition": [attribute],
            "leftKeys": [[attribute], [attribute]],
            "joinType": {"object": "org.apache.spark.sql.catalyst.plans.LeftOuter$"},
        },
    )
    condition = node.expr("condition")
    assert condition is not None and condition.cls == "AttributeReference"
    assert len(node.exprs("leftKeys")) == 2
    assert node.object("joinType") == "LeftOuter"
    assert node.expr("missing") is None


def test_tree_blocks_give_main_and_subquery_ids_in_printed_order() -> None:
    main, subqueries = _tree_blocks(FORMATTED)
    assert main == [6, 5, 4, 3, 2, 1]
    assert subqueries == {"scalar-subquery#9": [9, 8]}


def test_details_give_exchange_arguments_scan_roots_and_names() -> None:
    arguments, scans = _details(FORMATTED)
    assert arguments[5] == (
        "Exchange (5) hashpartitioning(k#1L, 200), ENSURE_REQUIREMENTS, [plan_id=12]"
    )
    assert arguments[3] == "Filter (3)"
    assert scans[1].format == "parquet"
    assert scans[1].roots == ["file:/data/t/part-0.parquet", "file:/data/t/part-1.parquet"]


def test_numbering_skips_codegen_wrappers_and_records_reuses() -> None:
    raw = [
        _node("WholeStageCodegenExec", 1),
        _node("aggregate.HashAggregateExec", 1),
        _node("InputAdapter", 1),
        _node("exchange.ShuffleExchangeExec", 1),
        _node("WholeStageCodegenExec", 1),
        _node("aggregate.HashAggregateExec", 1),
        _node("FilterExec", 1),
        _node("ColumnarToRowExec", 1),
        _node("InputAdapter", 1),
        _node("FileSourceScanExec"),
    ]
    plan = PhysicalPlan(parse(raw), {}, FORMATTED, None)
    _number(plan)
    numbered = [(n.cls, n.op_id) for n in plan.root.walk() if n.op_id is not None]
    assert numbered == [
        ("HashAggregateExec", 6),
        ("ShuffleExchangeExec", 5),
        ("HashAggregateExec", 4),
        ("FilterExec", 3),
        ("ColumnarToRowExec", 2),
        ("FileSourceScanExec", 1),
    ]
    assert plan.reuses == {7: 5}


OFF = """== Physical Plan ==
* BroadcastHashJoin Inner BuildRight (9)
:- * HashAggregate (4)
:  +- Exchange (3)
:     +- * ColumnarToRow (2)
:        +- Scan parquet  (1)
+- BroadcastExchange (8)
   +- * HashAggregate (7)
      +- ReusedExchange (6)

"""

#: the same query as the user's df.explain(mode="formatted") prints it with adaptive
#: execution on: no columnar transition, and the reused exchange printed as a copy
ON = """== Physical Plan ==
AdaptiveSparkPlan (11)
+- BroadcastHashJoin Inner BuildRight (10)
   :- HashAggregate (3)
   :  +- Exchange (2)
   :     +- Scan parquet  (1)
   +- BroadcastExchange (9)
      +- HashAggregate (8)
         +- Exchange (7)
            +- Scan parquet  (6)

"""


def test_user_ids_follow_the_adaptive_plan_the_user_sees() -> None:
    assert user_ids(OFF, ON) == {9: 10, 4: 3, 3: 2, 1: 1, 8: 9, 7: 8, 6: 7}


def test_user_ids_are_empty_when_the_trees_differ() -> None:
    assert user_ids(OFF, ON.replace("HashAggregate (8)", "SortAggregate (8)")) == {}


_REUSED_HOST = (
    "Subquery:1 Hosting operator id = 3 Hosting Expression = "
    "ReusedSubquery Subquery scalar-subquery#9, [id=#40]"
)

#: Spark 4 pushes a filter's scalar subquery into its scan's data filters too: the
#: filter's copy reuses the scan's, and its section prints no tree of its own
REUSED_OFF = f"""== Physical Plan ==
* Filter (3)
+- * ColumnarToRow (2)
   +- Scan parquet  (1)


(3) Filter [codegen id : 2]
Condition : (v#2 > ReusedSubquery Subquery scalar-subquery#9, [id=#40])

===== Subqueries =====

{_REUSED_HOST}

Subquery:2 Hosting operator id = 1 Hosting Expression = Subquery scalar-subquery#9, [id=#40]
* HashAggregate (5)
+- Scan parquet  (4)

"""

#: the adaptive plan prints the subquery under both hosts
REUSED_ON = """== Physical Plan ==
AdaptiveSparkPlan (4)
+- Filter (2)
   +- Scan parquet  (1)


===== Subqueries =====

Subquery:1 Hosting operator id = 2 Hosting Expression = Subquery subquery#9, [id=#41]
+- HashAggregate (6)
   +- Scan parquet  (5)

Subquery:2 Hosting operator id = 1 Hosting Expression = Subquery subquery#9, [id=#42]
+- HashAggregate (6)
   +- Scan parquet  (5)

"""


def _subquery(plan: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [_node("ScalarSubquery", plan=plan)]


def test_a_subquery_printed_under_two_hosts_is_read_once() -> None:
    _, subqueries = _tree_blocks(REUSED_OFF)
    assert subqueries == {"scalar-subquery#9": [5, 4]}
    assert user_ids(REUSED_OFF, REUSED_ON) == {3: 2, 1: 1, 5: 6, 4: 5}


def test_a_subquery_is_numbered_as_its_section_not_by_its_expression_id() -> None:
    """Spark gives a subquery a new expression id at every analysis; its section's number
    (the first, where two hosts print it) is what stays from one run to the next."""
    assert subquery_numbers(FORMATTED) == {9: 1}
    assert subquery_numbers(REUSED_OFF) == {9: 1}
    assert subquery_numbers(REUSED_ON) == {9: 1}
    two = FORMATTED.replace("scalar-subquery#9", "scalar-subquery#245") + (
        "Subquery:2 Hosting operator id = 6 Hosting Expression = "
        "Subquery scalar-subquery#250, [id=#44]\n* HashAggregate (11)\n"
    )
    assert subquery_numbers(two) == {245: 1, 250: 2}
    plan = PhysicalPlan(parse([_node("A")]), {}, two, None, subqueries=subquery_numbers(two))
    assert plan.subquery_number("scalar-subquery#250") == "2"
    assert plan.subquery_number("scalar-subquery#7") == "7"
    assert plan.subquery_number("subquery") == "subquery"


def test_a_reused_subquery_is_the_subquery_it_reuses() -> None:
    body = [
        _node("SubqueryExec", 1, name="scalar-subquery#9"),
        _node("aggregate.HashAggregateExec", 1),
        _node("FileSourceScanExec"),
    ]
    raw = [
        _node("WholeStageCodegenExec", 1),
        _node("FilterExec", 1, condition=_subquery([_node("ReusedSubqueryExec", child=body)])),
        _node("ColumnarToRowExec", 1),
        _node("FileSourceScanExec", dataFilters=[_subquery(body)]),
    ]
    plan = PhysicalPlan(parse(raw), {}, REUSED_OFF, None)
    _number(plan)
    subqueries = _subquery_plans(plan.root)
    assert [s.cls for s in subqueries] == ["SubqueryExec", "SubqueryExec"]
    for sub in subqueries:
        numbered = [(n.cls, n.op_id) for n in sub.walk()]
        assert numbered == [
            ("SubqueryExec", None),
            ("HashAggregateExec", 5),
            ("FileSourceScanExec", 4),
        ]
