"""Spark's ``toJSON()`` of a plan or an expression, as a tree.

``TreeNode.toJSON`` writes a tree as a list of its nodes in pre-order; each node
is a dict with ``class``, ``num-children`` and its constructor's fields.  A
field that names a child holds the child's index (``"child": 0``); a field that
holds an expression holds that expression's own pre-order list, and a list of
expressions a list of such lists; a plan that is not a child (a subquery's) is
nested the same way.  ``parse`` rebuilds the tree; ``Node`` reads the fields.
Plain data, no Spark.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EXCHANGES", "WRAPPERS", "Node", "parse"]

#: the operators code generation wraps a plan in, which change nothing of its rows
WRAPPERS = frozenset(
    {"WholeStageCodegenExec", "InputAdapter", "ColumnarToRowExec", "RowToColumnarExec"}
)
#: Spark's two exchanges (a ``ReusedExchange`` is neither: it reads one of them)
EXCHANGES = frozenset({"ShuffleExchangeExec", "BroadcastExchangeExec"})


@dataclass(eq=False)
class Node:
    """One node of a plan or expression tree."""

    cls: str  # the short class name: ``ProjectExec``, ``AttributeReference``
    fields: dict[str, Any]
    children: list[Node] = field(default_factory=list)
    #: the operator id ``explain(mode="formatted")`` prints for it (plan nodes)
    op_id: int | None = None

    def __repr__(self) -> str:
        return f"Node({self.cls}, {len(self.children)} children)"

    @property
    def full_class(self) -> str:
        return str(self.fields.get("class", self.cls))

    def get(self, name: str, default: Any = None) -> Any:
        return self.fields.get(name, default)

    @property
    def expr_id(self) -> int:
        """The expression's ``exprId``: an attribute's (or an alias's) identity across the
        plan, by which operators above read it; -1 for an expression that has none."""
        return int(self.fields.get("exprId", {}).get("id", -1))

    def expr(self, name: str) -> Node | None:
        """The expression held in field ``name`` (``None`` if absent or null)."""
        raw = self.fields.get(name)
        return parse(raw) if isinstance(raw, list) and raw else None

    def exprs(self, name: str) -> list[Node]:
        """The expressions of a list field ``name`` (a list of pre-order lists)."""
        raw = self.fields.get(name) or []
        return [parse(e) for e in raw if isinstance(e, list) and e]

    def object(self, name: str) -> str:
        """The short name of a Scala ``object`` field (``Inner``, ``BuildRight``), or of a
        case class's (``ExistenceJoin``: never its fields)."""
        raw = self.fields.get(name)
        if isinstance(raw, dict) and "object" in raw:
            return str(raw["object"]).rsplit(".", 1)[-1].rstrip("$")
        if isinstance(raw, dict) and "product-class" in raw:  # a case class: its name
            return str(raw["product-class"]).rsplit(".", 1)[-1]
        return "" if raw is None else str(raw)

    def walk(self) -> Iterator[Node]:
        """This node and every descendant, in pre-order."""
        yield self
        for child in self.children:
            yield from child.walk()

    @property
    def child(self) -> Node:
        return self.children[0]


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def parse(nodes: Sequence[dict[str, Any]]) -> Node:
    """The tree of a pre-order node list (``toJSON``'s output, already ``json.loads``-ed)."""
    position = 0

    def take() -> Node:
        nonlocal position
        raw = nodes[position]
        position += 1
        node = Node(_short(str(raw.get("class", "?"))), raw)
        for _ in range(int(raw.get("num-children", 0))):
            node.children.append(take())
        return node

    root = take()
    return root
