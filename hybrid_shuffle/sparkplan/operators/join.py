"""Joins: broadcast hash, shuffled hash, sort-merge and broadcast nested loop, every
join type Spark plans (inner, the outer three, left semi, left anti with its
null-aware form for ``NOT IN``, existence), with the extra non-equi condition.

The strategy Spark chose decides the edges (its exchanges), not the SQL: a
broadcast side arrives over a broadcast edge, a shuffled one over a hash edge,
and the join itself is the same SQL join in every case.  Keys never match
null, as in Spark; ``<=>`` keys are compiled as ``IS NOT DISTINCT FROM``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hybrid_shuffle.sparkplan.expressions import Unsupported, compile_expression
from hybrid_shuffle.sparkplan.operators.registry import register_operator
from hybrid_shuffle.sparkplan.relation import Column, Rel
from hybrid_shuffle.sparkplan.stage import Stage
from hybrid_shuffle.sparkplan.tree import Node
from hybrid_shuffle.sparkplan.types import BOOLEAN

if TYPE_CHECKING:
    from hybrid_shuffle.sparkplan.translate import Translator

__all__: list[str] = []

_SQL_JOINS = {
    "Inner": "JOIN",
    "LeftOuter": "LEFT JOIN",
    "RightOuter": "RIGHT JOIN",
    "FullOuter": "FULL JOIN",
    "Cross": "JOIN",
}


def _nullable(columns: list[Column]) -> list[Column]:
    return [Column(c.id, c.name, c.type, True) for c in columns]


def _join(tr: Translator, node: Node, stage: Stage, left: Rel, right: Rel) -> Rel:
    join_type = node.object("joinType")
    if join_type == "ExistenceJoin":
        raw = node.get("joinType") or {}
        exists_nodes = raw.get("exists") if isinstance(raw, dict) else None
        if not isinstance(exists_nodes, list):
            raise Unsupported("an existence join whose flag column the plan does not name")
        from hybrid_shuffle.sparkplan.tree import parse

        flag = parse(exists_nodes)
        join_type = "ExistenceJoin"
    both = Rel("", left.columns + right.columns)
    scope = both.scope(tr.subquery_of_stage)
    conditions = [
        f"({compile_expression(lk, scope).text} = {compile_expression(rk, scope).text})"
        for lk, rk in zip(node.exprs("leftKeys"), node.exprs("rightKeys"), strict=True)
    ]
    extra = node.expr("condition")
    if extra is not None:
        conditions.append(compile_expression(extra, scope).text)
    on = " AND ".join(conditions) or "TRUE"
    l_sql, r_sql = f"({left.sql}) AS l", f"({right.sql}) AS r"
    if join_type in _SQL_JOINS:
        columns = left.columns + right.columns
        if join_type in ("RightOuter", "FullOuter"):
            columns = _nullable(left.columns) + right.columns
        if join_type in ("LeftOuter", "FullOuter"):
            columns = columns[: len(left.columns)] + _nullable(right.columns)
        select = ", ".join(c.ref for c in columns) or "NULL AS __hs_empty"
        return Rel(f"SELECT {select} FROM {l_sql} {_SQL_JOINS[join_type]} {r_sql} ON {on}", columns)
    exists = f"EXISTS (SELECT 1 FROM {r_sql} WHERE {on})"
    left_list = left.select_list()
    if join_type == "LeftSemi":
        return Rel(f"SELECT {left_list} FROM {l_sql} WHERE {exists}", left.columns)
    if join_type == "LeftAnti":
        if node.get("isNullAwareAntiJoin"):
            return _null_aware_anti(node, left, right, scope, l_sql, r_sql, on)
        return Rel(f"SELECT {left_list} FROM {l_sql} WHERE NOT {exists}", left.columns)
    if join_type == "ExistenceJoin":
        col = Column(
            int(flag.get("exprId", {}).get("id", -1)), str(flag.get("name")), BOOLEAN, False
        )
        return Rel(f"SELECT {left_list}, {exists} AS {col.ref} FROM {l_sql}", [*left.columns, col])
    raise Unsupported(f"the join type {join_type}")


def _null_aware_anti(node, left, right, scope, l_sql, r_sql, on) -> Rel:  # type: ignore[no-untyped-def]
    """``NOT IN (subquery)``: no row if the subquery has a null key; a row with a null key
    only if the subquery is empty."""
    (lk,) = node.exprs("leftKeys")
    (rk,) = node.exprs("rightKeys")
    lkey = compile_expression(lk, scope).text
    rkey = compile_expression(rk, scope).text
    sql = (
        f"SELECT {left.select_list()} FROM {l_sql} WHERE "
        f"NOT EXISTS (SELECT 1 FROM {r_sql} WHERE {on}) "
        f"AND NOT EXISTS (SELECT 1 FROM {r_sql} WHERE {rkey} IS NULL) "
        f"AND ({lkey} IS NOT NULL OR NOT EXISTS (SELECT 1 FROM {r_sql}))"
    )
    return Rel(sql, left.columns)


@register_operator("BroadcastHashJoinExec", "ShuffledHashJoinExec", "SortMergeJoinExec")
def _hash_join(tr: Translator, node: Node, stage: Stage) -> Rel:
    left = tr.rel(node.children[0], stage)
    right = tr.rel(node.children[1], stage)
    return _join(tr, node, stage, left, right)


@register_operator("BroadcastNestedLoopJoinExec", "CartesianProductExec")
def _nested_loop(tr: Translator, node: Node, stage: Stage) -> Rel:
    if node.cls == "CartesianProductExec":
        raise Unsupported("a cartesian product of two unshuffled sides")
    left = tr.rel(node.children[0], stage)
    right = tr.rel(node.children[1], stage)
    build = node.object("buildSide")
    join_type = node.object("joinType")
    # every subtask sees all of the broadcast side: a join that emits its unmatched rows
    # would emit them once per subtask
    if (
        build == "BuildLeft"
        and join_type in ("LeftOuter", "FullOuter", "LeftSemi", "LeftAnti", "ExistenceJoin")
    ) or (build == "BuildRight" and join_type in ("RightOuter", "FullOuter")):
        raise Unsupported(f"a nested loop {join_type} join that keeps the broadcast side's rows")
    return _join(tr, node, stage, left, right)
