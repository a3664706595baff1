"""A translated relation: the SQL of one Spark operator's output inside a stage.

Columns are named ``c<exprId>`` after Spark's attribute ids, so a join's two sides
never clash and every expression finds its attribute by id.  One output may hold
the same attribute twice (``SELECT x, x``, a ``Generate`` that repeats its child's
columns, an aggregate grouping by the value it counts distinctly): the second copy
is ``c<exprId>_1`` (``distinct``), so no relation, and no stage, ever outputs two
columns with one name, and an expression reading that attribute reads the first
copy (both hold the same value).

Spark's own output names may repeat (``SELECT * FROM a CROSS JOIN b``, ``count(*),
count(1)``); they are applied only where the result leaves the engine
(``Stream.collect`` and the rest, through ``Stream.spark_names``).  The last stage
names its columns ``engine_names``: Spark's names where they are unique, a suffixed
copy where one repeats.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hybrid_shuffle.empty_column import EMPTY_SELECT
from hybrid_shuffle.sparkplan.expressions import Scope, Sql, quote
from hybrid_shuffle.sparkplan.tree import Node
from hybrid_shuffle.sparkplan.types import SparkType, column_type

__all__ = [
    "Column",
    "FilterJoins",
    "InnerJoin",
    "Rel",
    "attribute_column",
    "distinct",
    "engine_names",
]


@dataclass(frozen=True)
class Column:
    id: int
    name: str
    type: SparkType
    nullable: bool = True
    #: which copy of attribute ``id`` in one output this is (0: the first; ``distinct``)
    copy: int = 0

    @property
    def ref(self) -> str:
        return f"c{self.id}_{self.copy}" if self.copy else f"c{self.id}"

    def sql(self) -> Sql:
        return Sql(self.ref, self.type, self.nullable)


def distinct(columns: list[Column]) -> list[Column]:
    """``columns`` with every ``ref`` unique: a repeated one becomes the next free copy
    (``c7``, ``c7`` -> ``c7``, ``c7_1``); the first of each keeps its ref."""
    used: set[str] = set()
    out: list[Column] = []
    for column in columns:
        while column.ref in used:
            column = dataclasses.replace(column, copy=column.copy + 1)
        used.add(column.ref)
        out.append(column)
    return out


def engine_names(names: list[str]) -> list[str]:
    """The result's column names inside the engine: Spark's ``names``, with a repeat
    (compared as DuckDB compares names, ignoring case) suffixed ``_2``, ``_3``.. so
    that every name is unique; ``names`` itself is applied when the result leaves."""
    taken = {n.lower() for n in names}
    seen: set[str] = set()
    out: list[str] = []
    for name in names:
        candidate, n = name, 1
        while candidate.lower() in seen or (candidate != name and candidate.lower() in taken):
            n += 1
            candidate = f"{name}_{n}"
        seen.add(candidate.lower())
        out.append(candidate)
    return out


def attribute_column(node: Node) -> Column:
    """The column of an ``AttributeReference`` (or an ``Alias``: its new attribute)."""
    exprid = node.expr_id
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
    """``sql`` (a complete SELECT) and the columns it outputs, in order.

    A relation built with a column twice (the same ``ref``) is renamed on the spot
    (``distinct``, by position), so its SQL never outputs two columns with one name.

    ``streams`` is the stage input whose rows flow through the relation one by one (the
    placeholder token ``Stage.read`` gave it): an input read directly, through
    projections and filters, or as the streamed (probe) side of a hash join.  The stage
    then runs that input through its query as it arrives, once its other inputs ended,
    and the edge into it is not output-on-EOF (``plan.output_on_eof``).  An operator
    that needs all of its input (an aggregate, a sort, a window, a sort-merge join)
    builds its relation without it: ``None``, the conservative default."""

    sql: str
    columns: list[Column]
    streams: str | None = None
    #: the relation as rows of another kept or dropped by semi and anti joins, where a
    #: broadcast inner join above may run below them (``FilterJoins``)
    filters: FilterJoins | None = None
    #: the relation as a shuffled inner join of two others, where a broadcast inner join
    #: above that reads one side only may run on that side (``InnerJoin``)
    inner: InnerJoin | None = None
    #: a shuffled inner join with a side kept by semi and anti joins, as the join run on
    #: that side's rows before them and the filters after (``base``: the join), the form
    #: it takes where it splits off into the tasks producing that side at run time
    #: (``sparkplan.switchable``); its SQL stays Spark's order
    switch_below: FilterJoins | None = None

    def __post_init__(self) -> None:
        unique = distinct(self.columns)
        if unique != self.columns:
            refs = ", ".join(c.ref for c in unique)
            self.sql = f"SELECT * FROM ({self.sql}) AS t({refs})"
            self.columns = unique

    def scope(self, subquery: object = None) -> Scope:
        cols: dict[int, Sql] = {}
        for c in self.columns:  # an attribute held twice: its first copy
            cols.setdefault(c.id, c.sql())
        return Scope(cols, [c.sql() for c in self.columns], subquery)  # type: ignore[arg-type]

    def select_list(self) -> str:
        # no column: a placeholder that keeps the rows (DuckDB has no SELECT of nothing)
        return ", ".join(c.ref for c in self.columns) or EMPTY_SELECT

    def renamed(self, names: list[str]) -> str:
        """The final SELECT: ``names`` (``engine_names``: unique) instead of ``c<id>``."""
        items = ", ".join(
            f"{c.ref} AS {quote(n)}" for c, n in zip(self.columns, names, strict=True)
        )
        return f"SELECT {items or EMPTY_SELECT} FROM ({self.sql}) AS t"


@dataclass(frozen=True)
class FilterJoins:
    """A relation that is ``base``'s rows kept or dropped by left semi and left anti joins
    (``joins``, in order: each its SQL keyword, its other side as ``(...) AS r`` and its
    condition over ``base``'s columns and that side's), narrowed to some of ``base``'s
    columns by projections of bare attributes.

    Such joins only filter ``base``'s rows by a condition on each row, so an inner join
    of the relation with a third one may run first, on ``base``, and the filters after,
    on its rows (``operators.join``): DuckDB plans a semi or anti join as a barrier to
    its join order, so the inner joins written above one run on every row the filters
    keep, however few the inner joins would keep.  An inner join that cuts no row (a side
    no filter cuts) is only recorded in ``base``, for a selective one above it to take
    along; the relation's SQL keeps Spark's order until then."""

    base: Rel
    joins: tuple[tuple[str, str, str], ...]
    #: whether an inner join now in ``base`` has a side a filter cuts: only then does the
    #: relation's SQL run the filters after it (``operators.join``)
    selective: bool = False

    def sql(self, columns: list[Column]) -> str:
        """The filtered rows of ``base``, as ``columns`` (all of ``base``'s or some)."""
        sql = self.base.sql
        for keyword, other, on in self.joins:
            sql = f"SELECT {self.base.select_list()} FROM ({sql}) AS l {keyword} {other} ON {on}"
        if [c.ref for c in columns] == [c.ref for c in self.base.columns]:
            return sql
        return f"SELECT {', '.join(c.ref for c in columns) or EMPTY_SELECT} FROM ({sql}) AS t"

    def narrowed(self, columns: list[Column]) -> FilterJoins | None:
        """These filters under a projection to ``columns``, if all are ``base``'s."""
        refs = {c.ref for c in self.base.columns}
        return self if all(c.ref in refs for c in columns) else None


@dataclass(frozen=True)
class InnerJoin:
    """A relation that is the shuffled (sort-merge or shuffled hash) inner join ``node`` of
    ``left`` and ``right``, narrowed to some of its columns by projections of bare
    attributes.

    A broadcast inner join above it whose keys and condition read one side's columns
    only gives the same rows run on that side, below the shuffled join
    (``operators.join``).  Spark's planner puts a dimension's join where the query text
    joins it, so in TPC-H Q21 at SF10 the one-nation filter ran above the shuffled
    ``orders`` join, on every row of the semi and anti joins below it: run on the
    supplier side, it cuts those joins' probe rows 25-fold (and, past ``FilterJoins``,
    goes below them)."""

    node: Node
    left: Rel
    right: Rel
