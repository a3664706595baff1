"""A translated relation: the SQL of one Spark operator's output inside a stage.

Columns are named ``c<exprId>`` after Spark's attribute ids, which are unique in
a plan, so a join's two sides never clash and every expression finds its
attribute by id.  The last stage renames them to Spark's names.
"""

from __future__ import annotations

from dataclasses import dataclass

from hybrid_shuffle.sparkplan.expressions import Scope, Sql, quote
from hybrid_shuffle.sparkplan.tree import Node
from hybrid_shuffle.sparkplan.types import SparkType, column_type

__all__ = ["Column", "Rel", "attribute_column"]


@dataclass(frozen=True)
class Column:
    id: int
    name: str
    type: SparkType
    nullable: bool = True

    @property
    def ref(self) -> str:
        return f"c{self.id}"

    def sql(self) -> Sql:
        return Sql(self.ref, self.type, self.nullable)


def attribute_column(node: Node) -> Column:
    """The column of an ``AttributeReference`` (or an ``Alias``: its new attribute)."""
    exprid = int(node.get("exprId", {}).get("id", -1))
    if node.cls == "Alias":
        from hybrid_shuffle.sparkplan.expressions.core import Unsupported

        raise Unsupported("an alias where an attribute is expected")
    return Column(
        exprid,
        str(node.get("name")),
        column_type(node.get("dataType")),
        bool(node.get("nullable", True)),
    )


@dataclass
class Rel:
    """``sql`` (a complete SELECT) and the columns it outputs, in order."""

    sql: str
    columns: list[Column]

    def scope(self, subquery: object = None) -> Scope:
        cols = {c.id: c.sql() for c in self.columns}
        return Scope(cols, [c.sql() for c in self.columns], subquery)  # type: ignore[arg-type]

    def select_list(self) -> str:
        # no column: a placeholder that keeps the rows (DuckDB has no SELECT of nothing)
        return ", ".join(c.ref for c in self.columns) or "NULL AS __hs_empty"

    def renamed_to_spark(self) -> str:
        """The final SELECT: Spark's column names instead of ``c<id>``."""
        items = ", ".join(f"{c.ref} AS {quote(c.name)}" for c in self.columns)
        return f"SELECT {items} FROM ({self.sql}) AS t"
