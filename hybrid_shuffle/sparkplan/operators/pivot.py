"""Spark's ``PivotFirst``: the aggregate function of a ``PIVOT``'s second aggregate.

Spark plans ``PIVOT (agg(x) FOR p IN (v1, .., vn))`` as an aggregate by (keys, p), then
an aggregate by the keys of ``PivotFirst(p, value, [v1, .., vn])``, whose buffer is one
slot per pivot value: ``update`` puts a row's non-null value into the slot of its pivot
value (a pivot value not listed is skipped; a null pivot value matches a listed null),
``merge`` takes the input buffer's non-null slots, the result is the array of slots.

The plan's JSON does not write ``pivotColumnValues``; the buffer attributes are named
after them (``String.valueOf`` of each value's Catalyst form, in the list's order), so
the values are read back from those names, for the pivot types whose names say the
value exactly: integral types and booleans, and strings (a string named ``null`` could
be the null value or the text, so it falls back).  Spark looks a pivot value up in a
hash map of Catalyst values (``equals``): for floating point (``NaN`` equal to itself,
``-0.0`` not equal to ``0.0``), binary (identity) and the other types it differs from
DuckDB's ``=`` or cannot be read back, so those fall back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hybrid_shuffle.sparkplan.expressions import Sql, Unsupported
from hybrid_shuffle.sparkplan.operators.basic import named_output
from hybrid_shuffle.sparkplan.relation import Column, Rel
from hybrid_shuffle.sparkplan.tree import Node
from hybrid_shuffle.sparkplan.types import SparkType, array_of

if TYPE_CHECKING:
    from hybrid_shuffle.sparkplan.translate import Translator

__all__ = ["pivot_labels", "pivot_merge", "pivot_output", "pivot_partial", "pivot_result"]

_INTEGRAL = ("byte", "short", "integer", "long")


def pivot_labels(names: list[str], index: int, functions: int) -> list[str]:
    """Function ``index``'s slot names among the node's buffer ``names``: every function
    of a pivot's aggregate is a ``PivotFirst`` over the same values, so each has an equal
    share of the buffers, in order (anything else falls back)."""
    if functions <= 0 or not names or len(names) % functions:
        raise Unsupported("a PivotFirst whose buffers are not one share per function")
    size = len(names) // functions
    labels = names[index * size : (index + 1) * size]
    if len(set(labels)) != len(labels):
        raise Unsupported("a PivotFirst with repeated pivot values")
    return labels


def _literal(label: str, kind: SparkType) -> str | None:
    """The pivot value named ``label`` as DuckDB SQL, None for the null value."""
    if label == "null":
        if kind.name == "string":
            raise Unsupported("a string PivotFirst value named null (null or the text)")
        return None
    if kind.name in _INTEGRAL:
        try:
            number = int(label)
        except ValueError:
            number = None
        if number is None or str(number) != label:
            raise Unsupported(f"a PivotFirst value named {label!r}")
        return f"CAST({number} AS {kind.duck})"
    if kind.name == "boolean" and label in ("true", "false"):
        return label
    if kind.name == "string":
        return "'" + label.replace("'", "''") + "'"
    raise Unsupported(f"a PivotFirst over a {kind.name} pivot column")


def pivot_partial(args: list[Sql], labels: list[str]) -> list[str]:
    """Rows -> one slot per pivot value: the value of a row of that pivot value (a null
    value leaves the slot as is; if several rows have one, any of them, as in Spark,
    where the last update wins in the input's order)."""
    if len(args) != 2:
        raise Unsupported("a PivotFirst of other than a pivot column and a value")
    pivot, value = args
    slots = []
    for label in labels:
        literal = _literal(label, pivot.type)
        match = f"{pivot.text} IS NULL" if literal is None else f"{pivot.text} = {literal}"
        slots.append(f"last({value.text}) FILTER (WHERE {match} AND {value.text} IS NOT NULL)")
    return slots


def pivot_merge(buffers: list[str]) -> list[str]:
    """Slots -> slots: each slot the input buffers' non-null one."""
    return [f"last({b}) FILTER (WHERE {b} IS NOT NULL)" for b in buffers]


def pivot_result(buffers: list[str], value: SparkType) -> tuple[str, SparkType]:
    """Slots -> the array of the merged slots (a DuckDB list), and its type."""
    if value.opaque:
        raise Unsupported(f"a PivotFirst of {value.name} values")
    kind = array_of(value)
    return f"CAST(list_value({', '.join(pivot_merge(buffers))}) AS {kind.duck})", kind


def pivot_output(tr: Translator, results: list[Node], inner: Rel) -> tuple[str, list[Column]]:
    """``named_output`` of a pivot's final aggregate: its result names the array of slots
    by an ``Alias`` of the aggregate's attribute, which is carried as it is (an array
    column is opaque to the other expressions)."""
    scope = inner.scope(tr.subquery_of_stage)
    items: list[str] = []
    columns: list[Column] = []
    for e in results:
        child = e.child if e.cls == "Alias" else None
        if child is not None and child.cls == "AttributeReference":
            sql = scope.carried(child)
            exprid = e.expr_id
            col = Column(exprid, str(e.get("name")), sql.type, sql.nullable)
            item = f"{sql.text} AS {col.ref}"
        else:
            item, (col,) = named_output(tr, [e], inner)
        if any(c.ref == col.ref for c in columns):
            raise Unsupported("a pivot's aggregate outputting one attribute twice")
        items.append(item)
        columns.append(col)
    return ", ".join(items), columns
