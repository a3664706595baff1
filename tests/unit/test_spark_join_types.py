"""A join's type as Spark's plan JSON writes it: a Scala object (``Inner``), a case class
(``ExistenceJoin(exists)``, whose ``exists`` attribute is the flag column), or nothing (a
cartesian product).  No Ray, no Spark."""

from __future__ import annotations

from typing import Any

import pytest

from hybrid_shuffle.sparkplan.expressions import Unsupported
from hybrid_shuffle.sparkplan.operators.join import _existence_flag, join_type
from hybrid_shuffle.sparkplan.tree import Node

PLANS = "org.apache.spark.sql.catalyst.plans"


def _exists(exprid: int) -> list[dict[str, Any]]:
    return [
        {
            "class": "org.apache.spark.sql.catalyst.expressions.AttributeReference",
            "num-children": 0,
            "name": "exists",
            "dataType": "boolean",
            "nullable": False,
            "exprId": {"id": exprid},
        }
    ]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"object": f"{PLANS}.Inner$"}, "Inner"),
        ({"object": f"{PLANS}.LeftAnti$"}, "LeftAnti"),
        ({"object": f"{PLANS}.FullOuter$"}, "FullOuter"),
        ({"product-class": f"{PLANS}.ExistenceJoin", "exists": _exists(7)}, "ExistenceJoin"),
        (None, "Inner"),
    ],
)
def test_join_type_of_each_form(raw: Any, expected: str) -> None:
    fields = {} if raw is None else {"joinType": raw}
    assert join_type(Node("BroadcastNestedLoopJoinExec", fields)) == expected


def test_the_existence_flag_is_a_non_null_boolean_column() -> None:
    raw = {"product-class": f"{PLANS}.ExistenceJoin", "exists": _exists(42)}
    flag = _existence_flag(Node("BroadcastHashJoinExec", {"joinType": raw}))
    assert (flag.ref, flag.name, flag.nullable) == ("c42", "exists", False)
    assert flag.type.name == "boolean"


def test_an_existence_join_without_its_flag_is_unsupported() -> None:
    raw = {"product-class": f"{PLANS}.ExistenceJoin"}
    with pytest.raises(Unsupported, match="flag column"):
        _existence_flag(Node("BroadcastHashJoinExec", {"joinType": raw}))
