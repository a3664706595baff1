"""Joins: broadcast hash, shuffled hash and sort-merge, every join type Spark plans
(inner, the outer three, left semi, left anti with its null-aware form for ``NOT
IN``, existence), with the extra non-equi condition; ``join_sql`` is the SQL of all
of them and of the nested loop joins (``nested_loop``).

The strategy Spark chose decides the edges (its exchanges), not the SQL: a
broadcast side arrives over a broadcast edge, a shuffled one over a hash edge,
and the join itself is the same SQL join in every case.  A hash join (broadcast or
shuffled) streams the side it does not build (``Rel.streams``): its rows flow
through the stage's query as they arrive once the built side ended, so the edge
into that side is not output-on-EOF.  A sort-merge join is the same SQL join, run by
DuckDB as a hash join, so it streams one side too (``streamed_side``).  Keys never match
null, as in Spark (a ``<=>`` key is planned by Spark as ``coalesce`` and ``isnull``
keys).

A left semi and a (not null-aware) left anti join are DuckDB's ``SEMI JOIN`` and
``ANTI JOIN``, whose meaning is ``EXISTS``'s and ``NOT EXISTS``'s: written as a
correlated ``EXISTS`` with a non-equi condition (TPC-H Q21's ``l_suppkey <>``),
DuckDB decorrelates it into a delim join, and a semi join feeding such a delim join
could not spill within the task's ``memory_limit`` (Q21 at SF10 ran out of 512 MiB);
as a join it is one hash join that spills.

An existence join (Spark's plan of ``EXISTS``/``IN (subquery)`` under ``OR``, in a
projection or in an aggregate's ``FILTER``) is the left side and a non-null boolean
``exists``: whether some right row meets the condition.  Spark already wrote the
null semantics of ``IN`` into that condition (``(a = b) OR isnull(a = b)`` where
``NOT IN`` needs them), so the flag is SQL's ``EXISTS`` of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hybrid_shuffle.empty_column import EMPTY_SELECT
from hybrid_shuffle.sparkplan.expressions import Unsupported, compile_expression
from hybrid_shuffle.sparkplan.operators.registry import register_operator
from hybrid_shuffle.sparkplan.relation import Column, FilterJoins, InnerJoin, Rel
from hybrid_shuffle.sparkplan.stage import Stage
from hybrid_shuffle.sparkplan.tree import Node, parse
from hybrid_shuffle.sparkplan.types import BOOLEAN

if TYPE_CHECKING:
    from hybrid_shuffle.sparkplan.translate import Translator

__all__ = ["join_sql", "join_type", "streamed_side"]

#: the joins whose sides arrive hash-partitioned (``InnerJoin``)
_SHUFFLED = frozenset({"SortMergeJoinExec", "ShuffledHashJoinExec"})
_SQL_JOINS = {
    "Inner": "JOIN",
    "LeftOuter": "LEFT JOIN",
    "RightOuter": "RIGHT JOIN",
    "FullOuter": "FULL JOIN",
    "Cross": "JOIN",
}


def _nullable(columns: list[Column]) -> list[Column]:
    return [Column(c.id, c.name, c.type, True) for c in columns]


def join_type(node: Node) -> str:
    """The short name of a join's ``joinType`` (``Inner``, ``LeftOuter``,
    ``ExistenceJoin``; a cartesian product, which has none, is ``Inner``)."""
    raw = node.get("joinType")
    if raw is None:
        return "Inner"
    if isinstance(raw, dict) and "product-class" in raw:  # a case class: ExistenceJoin(exists)
        return str(raw["product-class"]).rsplit(".", 1)[-1]
    return node.object("joinType")


def _existence_flag(node: Node) -> Column:
    """The ``exists`` column an existence join adds to its left side."""
    raw = node.get("joinType")
    exists_nodes = raw.get("exists") if isinstance(raw, dict) else None
    if not isinstance(exists_nodes, list) or not exists_nodes:
        raise Unsupported("an existence join whose flag column the plan does not name")
    flag = parse(exists_nodes)
    return Column(flag.expr_id, str(flag.get("name")), BOOLEAN, False)


def join_sql(tr: Translator, node: Node, left: Rel, right: Rel) -> Rel:
    """The SQL of join ``node`` (of any strategy) of ``left`` and ``right``, as one
    task's query over what it reads of each side."""
    kind = join_type(node)
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
    if kind in _SQL_JOINS:
        columns = left.columns + right.columns
        if kind in ("RightOuter", "FullOuter"):
            columns = _nullable(left.columns) + right.columns
        if kind in ("LeftOuter", "FullOuter"):
            columns = columns[: len(left.columns)] + _nullable(right.columns)
        select = ", ".join(c.ref for c in columns) or EMPTY_SELECT
        return Rel(f"SELECT {select} FROM {l_sql} {_SQL_JOINS[kind]} {r_sql} ON {on}", columns)
    exists = f"EXISTS (SELECT 1 FROM {r_sql} WHERE {on})"
    if kind == "LeftSemi" or (kind == "LeftAnti" and not node.get("isNullAwareAntiJoin")):
        return _filter_join("SEMI JOIN" if kind == "LeftSemi" else "ANTI JOIN", left, r_sql, on)
    if kind == "LeftAnti":
        return _null_aware_anti(node, left, right, scope, l_sql, r_sql, on)
    if kind == "ExistenceJoin":
        col = _existence_flag(node)
        items = ", ".join([*(c.ref for c in left.columns), f"{exists} AS {col.ref}"])
        return Rel(f"SELECT {items} FROM {l_sql}", [*left.columns, col])
    raise Unsupported(f"the join type {kind}")


def _filter_join(keyword: str, left: Rel, r_sql: str, on: str) -> Rel:
    """``left``'s rows that a semi (or anti) join keeps: one more filter of the rows
    ``left`` filters already, if it does (``FilterJoins``)."""
    before = left.filters
    filters = (
        FilterJoins(before.base, (*before.joins, (keyword, r_sql, on)))
        if before is not None
        else FilterJoins(left, ((keyword, r_sql, on),))
    )
    return Rel(filters.sql(left.columns), left.columns, filters=filters)


def _below_filters(tr: Translator, node: Node, left: Rel, right: Rel) -> Rel | None:
    """An inner broadcast join whose streamed side is some rows of a relation kept by semi
    or anti joins (``FilterJoins``), run on that relation's rows before those joins: the
    same rows (the filters test each row of it alone, whatever it is joined to), and a
    built side a filter cuts (TPC-H Q21's one nation) cuts the rows the filters' hash
    tables are probed with.  A built side no filter cuts (Q21's every supplier) only
    makes the joins' rows wider before the filters, and DuckDB then plans the filters
    over a join's rows worse (Q21 at SF10: 25.8 s against 34.7 s): such a join is
    recorded below the filters (``FilterJoins.base``) but written where Spark put it,
    until a selective one above takes it along.  None where it does not apply: another
    join, a built side sharing a column with the relation (a name it would hide)."""
    if node.cls != "BroadcastHashJoinExec" or join_type(node) not in ("Inner", "Cross"):
        return None
    probe = streamed_side(tr, node)
    sides = [left, right]
    filters = sides[probe].filters
    if filters is None:
        return None
    built = {c.ref for c in sides[1 - probe].columns}
    if built & {c.ref for c in filters.base.columns}:
        return None
    cuts = _built_side_cut(node, probe)
    sides[probe] = filters.base
    inner = join_sql(tr, node, sides[0], sides[1])
    below = FilterJoins(inner, filters.joins, filters.selective or cuts)
    columns = left.columns + right.columns
    sql = below.sql(columns) if below.selective else join_sql(tr, node, left, right).sql
    return Rel(sql, columns, filters=below)


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


@register_operator(
    "BroadcastHashJoinExec",
    "ShuffledHashJoinExec",
    "SortMergeJoinExec",
    note=(
        "every join type Spark plans: inner, left/right/full outer, left semi, left anti "
        "(null-aware too), existence; with an extra condition"
    ),
)
def _hash_join(tr: Translator, node: Node, stage: Stage) -> Rel:
    left = tr.rel(node.children[0], stage)
    right = tr.rel(node.children[1], stage)
    return _join(tr, node, left, right)


def _join(tr: Translator, node: Node, left: Rel, right: Rel) -> Rel:
    """Join ``node`` of ``left`` and ``right``, run where its rows are fewest: on one side
    of a shuffled join below (``_into_side``), below semi and anti joins
    (``_below_filters``), or where Spark put it."""
    joined = (
        _into_side(tr, node, left, right)
        or _below_filters(tr, node, left, right)
        or join_sql(tr, node, left, right)
    )
    joined.streams = (left, right)[streamed_side(tr, node)].streams
    if node.cls in _SHUFFLED and join_type(node) == "Inner":
        if joined.inner is None:
            joined.inner = InnerJoin(node, left, right)
        joined.switch_below = _switch_below(tr, node, left, right)
    return joined


def _switch_below(tr: Translator, node: Node, left: Rel, right: Rel) -> FilterJoins | None:
    """A shuffled inner join with a side (or two) whose rows semi or anti joins keep
    (``FilterJoins``), as the join of the sides' rows before those joins, and the joins
    after (``Rel.switch_below``): where a side turns out small at run time, the join runs
    in the tasks producing the other side's rows, before their exchange (TPC-H Q18 at
    SF10: 624 orders joined there with 60M ``lineitem`` rows, of which 4,400 cross the
    exchange instead of all).  None where no side is so filtered, or the sides' rows
    share a column."""
    sides = (left, right)
    if all(side.filters is None for side in sides):
        return None
    bases = [side if side.filters is None else side.filters.base for side in sides]
    if {c.ref for c in bases[0].columns} & {c.ref for c in bases[1].columns}:
        return None
    joins = tuple(j for side in sides if side.filters is not None for j in side.filters.joins)
    return FilterJoins(join_sql(tr, node, *bases), joins)


def _into_side(tr: Translator, node: Node, left: Rel, right: Rel) -> Rel | None:
    """A broadcast inner join whose streamed side is some columns of a shuffled inner join
    (``InnerJoin``) and whose keys and condition read one side of it only, run on that
    side: the same rows, and where a filter cuts the built side (TPC-H Q21's one
    nation), fewer of them reach the shuffled join (and, past ``_below_filters``, the
    semi and anti joins below it: Q21's join stage at SF10, one task's half alone in
    DuckDB, 10.1 s in Spark's order against 3.0 s).  A built side no filter cuts stays
    where Spark put it.  The shuffled join's new relation is recorded as its own
    (``Translator.rewritten``): a split switch cuts it out.  None where it does not
    apply: another join, a built side sharing a column with the shuffled join's."""
    if node.cls != "BroadcastHashJoinExec" or join_type(node) != "Inner":
        return None
    probe = streamed_side(tr, node)
    sides = [left, right]
    inner, built = sides[probe].inner, sides[1 - probe]
    if inner is None or not _built_side_cut(node, probe):
        return None
    below = [inner.left, inner.right]
    refs = {c.ref for side in below for c in side.columns}
    if {c.ref for c in built.columns} & refs or not {c.ref for c in sides[probe].columns} <= refs:
        return None
    condition = node.expr("condition")
    reads = _attribute_ids([*node.exprs("leftKeys"), *node.exprs("rightKeys")])
    reads |= _attribute_ids([condition] if condition is not None else [])
    reads -= {c.id for c in built.columns}
    for index, side in enumerate(below):
        if not reads or not reads <= {c.id for c in side.columns}:
            continue
        pair = [side, built] if probe == 0 else [built, side]
        below[index] = _join(tr, node, pair[0], pair[1])
        joined = _join(tr, inner.node, below[0], below[1])
        tr.rewritten(inner.node, joined)
        columns = left.columns + right.columns
        sql = f"SELECT {', '.join(c.ref for c in columns)} FROM ({joined.sql}) AS t"
        return Rel(sql, columns, inner=joined.inner)
    return None


def _built_side_cut(node: Node, probe: int) -> bool:
    """Whether a filter cuts the built side of broadcast join ``node`` (more than ``IS NOT
    NULL`` checks: ``switchable.selective``); ``probe`` is its streamed side."""
    from hybrid_shuffle.sparkplan.switchable import selective  # it imports this module

    return any(selective(n) for n in node.children[1 - probe].walk())


def _attribute_ids(exprs: list[Node]) -> set[int]:
    """The ids of the attributes ``exprs`` read."""
    return {n.expr_id for e in exprs for n in e.walk() if n.cls == "AttributeReference"}


def streamed_side(tr: Translator, node: Node) -> int:
    """The side (0: left, 1: right) whose rows flow through the join as they arrive: the
    one a hash join does not build.  A broadcast or shuffled hash join says which side it
    builds.  A sort-merge join runs here as DuckDB's hash join too, so it streams the
    side Spark's shuffled hash join would: the left of a left outer, semi, anti or
    existence join, the right of a right outer join, and of an inner or full outer join
    the side Spark estimates larger (the left when it cannot tell)."""
    if node.cls != "SortMergeJoinExec":
        return 1 if node.object("buildSide") == "BuildLeft" else 0
    from hybrid_shuffle.plan.join_switch import build_sides
    from hybrid_shuffle.sparkplan.switchable import estimate  # it imports this module

    kind = join_type(node)
    sides = build_sides(kind)
    if sides == ("left",):
        return 1
    if kind in ("Inner", "Cross", "FullOuter"):
        left, right = (estimate(tr.plan, child) for child in node.children)
        if left is not None and right is not None and left < right:
            return 1
    return 0
