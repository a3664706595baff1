"""Project, filter, sort, take-ordered, limits, union, expand, and the wrappers Spark's
code generation adds (which translate to nothing)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hybrid_shuffle.empty_column import EMPTY_SELECT
from hybrid_shuffle.sparkplan.expressions import Unsupported, compile_expression, compile_value
from hybrid_shuffle.sparkplan.operators.registry import register_operator
from hybrid_shuffle.sparkplan.relation import Column, Rel, distinct
from hybrid_shuffle.sparkplan.stage import Stage
from hybrid_shuffle.sparkplan.tree import Node
from hybrid_shuffle.sparkplan.types import column_type

if TYPE_CHECKING:
    from hybrid_shuffle.sparkplan.translate import Translator

__all__ = ["keeps_global_order", "named_output", "order_by", "sort_key"]


@register_operator(
    "WholeStageCodegenExec", "InputAdapter", "ColumnarToRowExec", "RowToColumnarExec"
)
def _transparent(tr: Translator, node: Node, stage: Stage) -> Rel:
    return tr.rel(node.child, stage)


def named_output(tr: Translator, exprs: list[Node], child: Rel) -> tuple[str, list[Column]]:
    """``SELECT``'s items for a list of named expressions over ``child``, and the columns."""
    scope = child.scope(tr.subquery_of_stage)
    items: list[str] = []
    columns: list[Column] = []
    for e in exprs:
        exprid = e.expr_id
        if e.cls == "Alias":
            # also an array or a struct, which the projection carries (``compile_value``)
            sql = compile_value(e.child, scope)
            name = str(e.get("name"))
        elif e.cls == "AttributeReference":
            sql = scope.carried(e)
            name = str(e.get("name"))
        else:
            raise Unsupported(f"a projection of {e.cls}")
        # an attribute projected twice: its second copy is named apart (``distinct``)
        col = distinct([*columns, Column(exprid, name, sql.type, sql.nullable)])[-1]
        items.append(
            f"CAST({sql.text} AS {sql.type.duck}) AS {col.ref}"
            if e.cls == "Alias"
            else f"{sql.text} AS {col.ref}"
        )
        columns.append(col)
    return ", ".join(items) or EMPTY_SELECT, columns


@register_operator("ProjectExec")
def _project(tr: Translator, node: Node, stage: Stage) -> Rel:
    child = tr.rel(node.child, stage)
    exprs = node.exprs("projectList")
    items, columns = named_output(tr, exprs, child)
    # a projection of bare attributes keeps a semi or anti join's rows (``FilterJoins``)
    # and a shuffled join's sides (``InnerJoin``) below it open to the joins above
    bare = all(e.cls == "AttributeReference" for e in exprs)
    filters = child.filters.narrowed(columns) if child.filters is not None and bare else None
    sql = f"SELECT {items} FROM ({child.sql}) AS t"
    inner = child.inner if bare else None  # ``InnerJoin``: its columns are the join's
    return Rel(sql, columns, streams=child.streams, filters=filters, inner=inner)


@register_operator("FilterExec")
def _filter(tr: Translator, node: Node, stage: Stage) -> Rel:
    child = tr.rel(node.child, stage)
    condition = node.expr("condition")
    assert condition is not None
    sql = compile_expression(condition, child.scope(tr.subquery_of_stage))
    return Rel(
        f"SELECT {child.select_list()} FROM ({child.sql}) AS t WHERE {sql.text}",
        child.columns,
        streams=child.streams,
    )


def _orders(tr: Translator, orders: list[Node], rel: Rel) -> list[tuple[str, str]]:
    """Each Spark ``SortOrder`` as (its expression's SQL, ``ASC NULLS FIRST`` or the like):
    direction and null order as given (Spark: ascending puts nulls first, descending
    last)."""
    scope = rel.scope(tr.subquery_of_stage)
    parts = []
    for o in orders:
        sql = compile_expression(o.child, scope)
        direction = "DESC" if o.object("direction") == "Descending" else "ASC"
        nulls = "NULLS LAST" if o.object("nullOrdering") == "NullsLast" else "NULLS FIRST"
        parts.append((sql.text, f"{direction} {nulls}"))
    return parts


def order_by(tr: Translator, orders: list[Node], rel: Rel) -> str:
    """``ORDER BY`` items of Spark ``SortOrder``s."""
    return ", ".join(f"{sql} {order}" for sql, order in _orders(tr, orders, rel))


def sort_key(tr: Translator, orders: list[Node], rel: Rel) -> str:
    """One ``BLOB`` whose byte order is the order ``order_by`` sorts in
    (``create_sort_key``, the key DuckDB's own sort compares): a range edge partitions
    on it as one ascending key.  Never null (a null sorts first or last as asked), so
    every row falls in a bucket; NaN is above every number and -0.0 equals 0.0, as in
    Spark."""
    items = ", ".join(f"{sql}, '{order}'" for sql, order in _orders(tr, orders, rel))
    return f"create_sort_key({items})"


#: operators that keep the order of their rows in a task and their partitioning: a
#: global sort below them still orders their output across subtasks
_ORDER_KEEPING = frozenset(
    {
        "ProjectExec",
        "FilterExec",
        "LocalLimitExec",
        "GlobalLimitExec",
        "GenerateExec",
        "WholeStageCodegenExec",
        "InputAdapter",
        "ColumnarToRowExec",
        "RowToColumnarExec",
        "BatchEvalPythonExec",
        "ArrowEvalPythonExec",
    }
)


def keeps_global_order(node: Node) -> bool:
    """Whether ``node``'s rows are sorted across its partitions, partition 0's first (a
    global sort's, through operators that keep it): gathering them into one task then
    takes the producers in order (``Partitioner.in_producer_order``), as Spark reads
    the partitions of a ``SinglePartition`` shuffle or a ``CollectLimit``."""
    while node.cls in _ORDER_KEEPING and node.children:
        node = node.child
    return node.cls == "SortExec" and bool(node.get("global", False))


@register_operator("SortExec")
def _sort(tr: Translator, node: Node, stage: Stage) -> Rel:
    child = tr.rel(node.child, stage)
    if not node.get("global", False):
        return child  # a sort for a merge join or a window: DuckDB does not need it
    keys = order_by(tr, node.exprs("sortOrder"), child)
    return Rel(
        f"SELECT {child.select_list()} FROM ({child.sql}) AS t ORDER BY {keys}", child.columns
    )


@register_operator("TakeOrderedAndProjectExec")
def _take_ordered(tr: Translator, node: Node, stage: Stage) -> Rel:
    """Spark takes each partition's top ``limit`` and merges them in one task, with no
    exchange in the plan: here the partial top-n runs in the child's stage and an edge
    named ``gather_<id>`` brings them to one subtask for the final one."""
    limit = int(node.get("limit"))
    offset = int(node.get("offset", 0) or 0)
    child = tr.rel(node.child, stage)
    keys = order_by(tr, node.exprs("sortOrder"), child)
    local = Rel(
        f"SELECT {child.select_list()} FROM ({child.sql}) AS t ORDER BY {keys} LIMIT {limit}",
        child.columns,
    )
    gathered = tr.gather(local, stage, node)
    keys = order_by(tr, node.exprs("sortOrder"), gathered)
    ordered = Rel(
        f"SELECT {gathered.select_list()} FROM ({gathered.sql}) AS t ORDER BY {keys} "
        f"LIMIT {limit - offset} OFFSET {offset}",
        gathered.columns,
    )
    items, columns = named_output(tr, node.exprs("projectList"), ordered)
    return Rel(f"SELECT {items} FROM ({ordered.sql}) AS t", columns)


@register_operator("LocalLimitExec", "GlobalLimitExec")
def _limit(tr: Translator, node: Node, stage: Stage) -> Rel:
    child = tr.rel(node.child, stage)
    limit = int(node.get("limit"))
    offset = int(node.get("offset", 0) or 0)
    if limit < 0 and not offset:
        return child
    # Spark's limit counts the rows it skips; a limit of -1 is none (``OFFSET`` alone)
    return Rel(
        f"SELECT {child.select_list()} FROM ({child.sql}) AS t{_limit_clause(limit, offset)}",
        child.columns,
    )


def _limit_clause(limit: int, offset: int) -> str:
    """`` LIMIT n OFFSET m`` of Spark's ``limit`` (which counts the ``offset`` rows it
    skips; negative: no limit) and ``offset``."""
    text = f" LIMIT {max(limit - offset, 0)}" if limit >= 0 else ""
    return text + (f" OFFSET {offset}" if offset else "")


@register_operator("CollectLimitExec")
def _collect_limit(tr: Translator, node: Node, stage: Stage) -> Rel:
    limit = int(node.get("limit"))
    offset = int(node.get("offset", 0) or 0)
    child = tr.rel(node.child, stage)
    # each task keeps its first ``limit`` rows (no limit: ``OFFSET`` alone, -1), and the
    # gathered rows skip the ``offset`` first (in the child's order, as Spark's partitions)
    head = f" LIMIT {limit}" if limit >= 0 else ""
    local = Rel(f"SELECT {child.select_list()} FROM ({child.sql}) AS t{head}", child.columns)
    gathered = tr.gather(local, stage, node, keeps_global_order(node.child))
    return Rel(
        f"SELECT {gathered.select_list()} FROM ({gathered.sql}) AS t{_limit_clause(limit, offset)}",
        gathered.columns,
    )


@register_operator("UnionExec")
def _union(tr: Translator, node: Node, stage: Stage) -> Rel:
    """``UNION ALL`` of the children, named as the first child's columns (Spark's rule)."""
    rels = [tr.rel(c, stage) for c in node.children]
    first = rels[0].columns
    # Spark widens nullability, and the types are already equal
    parts = []
    for r in rels:
        items = ", ".join(f"{c.ref} AS {f.ref}" for c, f in zip(r.columns, first, strict=True))
        parts.append(f"SELECT {items or r.select_list()} FROM ({r.sql}) AS t")
    return Rel(" UNION ALL ".join(f"({p})" for p in parts), first)


@register_operator("ExpandExec")
def _expand(tr: Translator, node: Node, stage: Stage) -> Rel:
    """Each input row once per projection (grouping sets, several distinct aggregates)."""
    child = tr.rel(node.child, stage)
    outputs = [_attribute(o) for o in node.exprs("output")]
    projections = node.get("projections") or _jvm_projections(tr, node)
    scope = child.scope(tr.subquery_of_stage)
    from hybrid_shuffle.sparkplan.tree import parse

    parts = []
    for projection in projections:
        exprs = [parse(e) for e in projection]
        items = []
        for e, col in zip(exprs, outputs, strict=True):
            sql = compile_expression(e, scope)
            items.append(f"CAST({sql.text} AS {col.type.duck}) AS {col.ref}")
        parts.append(f"SELECT {', '.join(items)} FROM ({child.sql}) AS t")
    return Rel(" UNION ALL ".join(f"({p})" for p in parts), outputs)


def _jvm_projections(tr: Translator, node: Node) -> list[list[Any]]:
    """An Expand's projections read from its JVM operator, one expression's JSON at a
    time: the plan's JSON holds null for those of several distinct aggregates."""
    import json

    from hybrid_shuffle.sparkplan.physical import jvm_node

    rows = jvm_node(tr.plan, node).projections()
    return [
        [json.loads(row.apply(j).toJSON()) for j in range(row.length())]
        for row in (rows.apply(i) for i in range(rows.length()))
    ]


def _attribute(node: Node) -> Column:
    return Column(
        node.expr_id,
        str(node.get("name")),
        column_type(node.get("dataType")),
        bool(node.get("nullable", True)),
    )
