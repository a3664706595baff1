"""Where a selective broadcast join's keys go (``sparkplan.pushed_keys.find``), on plan
trees written as Spark's JSON writes them: down the streamed side, through exchanges and
the kept sides of joins, onto the first operator the key cannot pass, and only below an
exchange; never through an exchange Spark reuses, never from a built side no filter cuts.
No Ray, no Spark."""

from __future__ import annotations

from typing import Any

from hybrid_shuffle.sparkplan.pushed_keys import find
from hybrid_shuffle.sparkplan.tree import Node

EXPR = "org.apache.spark.sql.catalyst.expressions"
PLANS = "org.apache.spark.sql.catalyst.plans"


def _attr(expr_id: int) -> list[dict[str, Any]]:
    return [
        {
            "class": f"{EXPR}.AttributeReference",
            "num-children": 0,
            "name": f"a{expr_id}",
            "dataType": "long",
            "nullable": True,
            "exprId": {"id": expr_id},
        }
    ]


def _scan(*ids: int) -> Node:
    return Node("FileSourceScanExec", {"output": [_attr(i) for i in ids]})


def _filter(child: Node, expr_id: int, selective: bool = True) -> Node:
    test = "GreaterThan" if selective else "IsNotNull"
    condition = [{"class": f"{EXPR}.{test}", "num-children": 1}, *_attr(expr_id)]
    return Node("FilterExec", {"condition": condition}, [child])


def _join(cls: str, left: Node, right: Node, keys: tuple[int, int], kind: str = "Inner") -> Node:
    fields = {
        "leftKeys": [_attr(keys[0])],
        "rightKeys": [_attr(keys[1])],
        "joinType": {"object": f"{PLANS}.{kind}$"},
        "buildSide": {"object": "org.apache.spark.sql.execution.joins.BuildRight$"},
    }
    return Node(cls, fields, [left, right])


def _exchange(child: Node, op_id: int, cls: str = "ShuffleExchangeExec") -> Node:
    return Node(cls, {}, [child], op_id)


def _dimension(op_id: int = 9, selective: bool = True) -> Node:
    """A broadcast of rows (2, 3) a filter on 3 cuts (or only checks for nulls)."""
    return _exchange(_filter(_scan(2, 3), 3, selective), op_id, "BroadcastExchangeExec")


def test_the_keys_go_through_an_exchange_and_a_join_onto_the_scan_that_makes_them() -> None:
    fact = _scan(1, 4)
    other = _scan(5)
    shuffled = _join("SortMergeJoinExec", _exchange(fact, 1), _exchange(other, 2), (4, 5))
    top = _join("BroadcastHashJoinExec", shuffled, _dimension(), (1, 2))
    pushes = find([top], {})
    assert list(pushes) == [id(fact)]
    (push,) = pushes[id(fact)]
    assert push.join is top and push.build.op_id == 9
    assert [key for key, _ in push.keys] == [1]


def test_a_key_renamed_by_a_projection_is_followed_under_its_old_name() -> None:
    fact = _scan(7)
    alias = [{"class": f"{EXPR}.Alias", "num-children": 1, "exprId": {"id": 1}}, *_attr(7)]
    project = Node("ProjectExec", {"projectList": [alias]}, [_exchange(fact, 1)])
    top = _join("BroadcastHashJoinExec", project, _dimension(), (1, 2))
    ((push,),) = find([top], {}).values()
    assert [key for key, _ in push.keys] == [7]
    assert list(find([top], {})) == [id(fact)]


def test_nothing_is_pushed_without_an_exchange_below_the_join() -> None:
    top = _join("BroadcastHashJoinExec", _filter(_scan(1), 1), _dimension(), (1, 2))
    assert find([top], {}) == {}


def test_nothing_is_pushed_from_a_built_side_no_filter_cuts() -> None:
    top = _join(
        "BroadcastHashJoinExec", _exchange(_scan(1), 1), _dimension(selective=False), (1, 2)
    )
    assert find([top], {}) == {}


def test_nothing_is_pushed_through_an_exchange_spark_reuses() -> None:
    shuffle = _exchange(_scan(1), 1)
    top = _join("BroadcastHashJoinExec", shuffle, _dimension(), (1, 2))
    assert find([top], {30: shuffle}) == {}


def test_nothing_is_pushed_below_an_aggregate_nor_onto_a_join() -> None:
    aggregate = Node("HashAggregateExec", {}, [_exchange(_scan(1), 1)])
    above_aggregate = _join("BroadcastHashJoinExec", aggregate, _dimension(), (1, 2))
    assert find([above_aggregate], {}) == {}
    # the key comes from the null-supplying side of a left outer join
    outer = _join("SortMergeJoinExec", _exchange(_scan(4), 1), _exchange(_scan(1), 2), (4, 1))
    outer.fields["joinType"] = {"object": f"{PLANS}.LeftOuter$"}
    top = _join("BroadcastHashJoinExec", outer, _dimension(), (1, 2))
    assert find([top], {}) == {}
    # a nested loop join on the way: left as Spark has it
    loop = Node("BroadcastNestedLoopJoinExec", {}, [_scan(1), _scan(5)])
    above = _exchange(loop, 3)
    assert find([_join("BroadcastHashJoinExec", above, _dimension(), (1, 2))], {}) == {}


def test_a_built_side_cut_by_pushed_keys_pushes_its_own() -> None:
    """TPC-H Q5: the region cuts the nations, whose keys then cut the suppliers."""
    region = _dimension(op_id=20)
    nations = _scan(2, 6)
    nation_side = _exchange(_filter(nations, 2, selective=False), 21, "BroadcastExchangeExec")
    suppliers = _scan(1, 8)
    fact_side = _exchange(suppliers, 22)
    by_nation = _join("BroadcastHashJoinExec", fact_side, nation_side, (1, 2))
    top = _join("BroadcastHashJoinExec", by_nation, region, (6, 2))
    # the region's keys go onto the nations (renamed nothing: key 6 is the nations')
    pushes = find([top], {})
    assert set(pushes) == {id(nations), id(suppliers)}
    assert pushes[id(suppliers)][0].join is by_nation


def _having(exchange_id: int, selective: bool = True, reused: bool = False) -> Node:
    """Spark's right side of ``IN (SELECT k .. GROUP BY k HAVING ..)``, sorted for a
    sort-merge join: a projection of the key over a filter of a final aggregate of an
    exchange (or of a reuse of one) of the partial aggregate's rows."""
    cls = "ReusedExchangeExec" if reused else "ShuffleExchangeExec"
    aggregate = Node("HashAggregateExec", {}, [_exchange(_scan(3, 6), exchange_id, cls)], 40)
    project = Node("ProjectExec", {"projectList": [_attr(3)]}, [_filter(aggregate, 6, selective)])
    return Node("SortExec", {}, [project])


def _semi(left: Node, right: Node, keys: tuple[int, int] = (1, 3)) -> Node:
    join = _join("SortMergeJoinExec", left, right, keys, "LeftSemi")
    del join.fields["buildSide"]
    return join


def test_a_semi_joins_having_side_is_computed_first_and_its_keys_go_onto_the_scan() -> None:
    """TPC-H Q18: ``orders`` semi-joined with the orders an aggregate's HAVING keeps."""
    orders = _scan(1, 2)
    top = _semi(Node("SortExec", {}, [_exchange(orders, 1)]), _having(10))
    pushes = find([top], {})
    assert list(pushes) == [id(orders)]
    (push,) = pushes[id(orders)]
    assert push.computed_first and push.join is top
    assert push.build is top.children[1].child  # below the sort: the projection
    assert [key for key, _ in push.keys] == [1]


def test_a_semi_join_over_a_reused_exchange_of_the_aggregate_pushes_too() -> None:
    lineitem = _scan(1, 5)
    top = _semi(_exchange(lineitem, 20), _having(24, reused=True))
    ((push,),) = find([top], {}).values()
    assert push.computed_first


def test_no_semi_join_pushes_whose_right_side_nothing_cuts_after_its_exchange() -> None:
    # a HAVING that only checks for nulls
    unfiltered = _semi(_exchange(_scan(1), 1), _having(10, selective=False))
    assert find([unfiltered], {}) == {}
    # the right side arrives straight from its exchange (TPC-H Q4's EXISTS): the runtime
    # join switch sees its size, nothing is computed first
    filtered_rows = _exchange(_filter(_scan(3), 3), 10)
    assert find([_semi(_exchange(_scan(1), 1), filtered_rows)], {}) == {}
    # an anti join keeps the rows whose key does not match
    anti = _semi(_exchange(_scan(1), 1), _having(10))
    anti.fields["joinType"] = {"object": f"{PLANS}.LeftAnti$"}
    assert find([anti], {}) == {}


# -- a shuffled semi or anti join's filtered left side, pushed down its right side -------


def _sorted(exchange: Node) -> Node:
    return Node("SortExec", {}, [exchange])


def test_a_semi_joins_filtered_left_side_cuts_its_right_side() -> None:
    """TPC-H Q4: the orders of a quarter, whose keys cut ``lineitem`` before its exchange."""
    orders = _exchange(_filter(_scan(1, 2), 2), 1)
    lineitem = _scan(3, 4)
    top = _semi(_sorted(orders), _sorted(_exchange(lineitem, 2)))
    pushes = find([top], {})
    assert list(pushes) == [id(lineitem)]
    (push,) = pushes[id(lineitem)]
    assert push.left_side and not push.computed_first
    assert push.join is top and push.build is orders
    assert [(key, built.expr_id) for key, built in push.keys] == [(3, 1)]


def test_an_anti_join_below_a_semi_join_on_its_left_side_cuts_its_right_side_too() -> None:
    """TPC-H Q21: ``l1`` semi-joined with ``l2``, then anti-joined with ``l3``: the keys
    of ``l1``'s exchange (a superset of the semi join's rows) cut both."""
    l1 = _exchange(_filter(_scan(1, 2), 2), 1)
    l2, l3 = _scan(3), _scan(5)
    semi = _semi(_sorted(l1), _sorted(_exchange(l2, 2)))
    anti = _semi(semi, _sorted(_exchange(l3, 3)), keys=(1, 5))
    anti.fields["joinType"] = {"object": f"{PLANS}.LeftAnti$"}
    pushes = find([anti], {})
    assert set(pushes) == {id(l2), id(l3)}
    assert {pushes[id(l3)][0].join is anti, pushes[id(l2)][0].build is l1} == {True}


def test_no_left_side_is_pushed_that_nothing_cuts_or_that_could_change_the_answer() -> None:
    def semi(left: Node, kind: str = "LeftSemi", aware: bool = False) -> Node:
        join = _semi(_sorted(left), _sorted(_exchange(_scan(3), 2)))
        join.fields["joinType"] = {"object": f"{PLANS}.{kind}$"}
        if aware:
            join.fields["isNullAwareAntiJoin"] = True
        return join

    filtered = _filter(_scan(1), 1)
    # a left side only checked for nulls: its keys would cut nothing
    assert find([semi(_exchange(_filter(_scan(1), 1, selective=False), 1))], {}) == {}
    # NOT IN: one null key on the right side empties the answer, so none may be dropped
    assert find([semi(_exchange(filtered, 1), "LeftAnti", aware=True)], {}) == {}
    # an inner join of plain rows, an outer join: left as Spark planned them (the runtime
    # join switch may broadcast such a right side)
    assert find([semi(_exchange(filtered, 1), "Inner")], {}) == {}
    assert find([semi(_exchange(filtered, 1), "LeftOuter")], {}) == {}
    # an exchange Spark reuses on a side: the left side's producer could wait for itself
    assert find([semi(_exchange(filtered, 1, "ReusedExchangeExec"))], {}) == {}


def _grouped(child: Node, key: int, op_id: int) -> Node:
    """An aggregate grouping ``child``'s rows by attribute ``key``."""
    return Node("HashAggregateExec", {"groupingExpressions": [_attr(key)]}, [child], op_id)


def test_an_inner_joins_filtered_left_side_cuts_an_aggregates_input_on_its_right_side() -> None:
    """TPC-H Q17: ``lineitem`` of a few parts joined with the average quantity of every
    part: the parts' keys cut ``lineitem`` below both aggregates of the average, since
    dropping rows by a grouping key drops whole groups."""
    left = _exchange(_filter(_scan(1, 2), 2), 1)
    lineitem = _scan(3, 4)
    partial = _grouped(lineitem, 3, 40)
    right = Node("FilterExec", {}, [_grouped(_exchange(partial, 2), 3, 41)])
    top = _join("SortMergeJoinExec", _sorted(left), _sorted(right), (1, 3))
    pushes = find([top], {})
    assert list(pushes) == [id(lineitem)]
    (push,) = pushes[id(lineitem)]
    assert push.left_side and push.build is left
    # an aggregate grouping by another attribute stops the key: no push
    other = _grouped(_exchange(_grouped(_scan(3, 4), 4, 42), 3), 4, 43)
    assert find([_join("SortMergeJoinExec", _sorted(left), other, (1, 3))], {}) == {}
