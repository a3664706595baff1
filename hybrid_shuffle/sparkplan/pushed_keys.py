"""A selective broadcast join's keys, pushed below the exchanges under its other side.

Spark joins a filtered dimension where the query text does: in TPC-H Q7 the two
nation filters sit above the shuffled join of ``lineitem`` and ``orders``, so every
``lineitem`` row of the two years (18M at SF10) crosses the exchange, and only the
join stage drops the 92% whose supplier is of another nation.  Spark's adaptive
execution does not move it either; its runtime filters (``InjectRuntimeFilter``)
would, as a semi join or a Bloom filter built from the filtered side.

Here the built side is small and already broadcast, so its keys go where the rows
that carry the join's key are made: the pre-pass ``find`` follows each streamed key
of such a join down its side of the plan, through operators that keep or drop each
row on its own (projections that pass the key through, filters, sorts, exchanges,
inner joins, the kept side of semi, anti and left outer joins), to the first
operator it cannot pass (a scan, an aggregate, a projection computing the key; not
a join, whose relation other rewrites of the translation read).  If that
operator is below at least one exchange, the translation (``Translator.rel``)
runs it semi-joined with the broadcast: its rows whose key has no match in the
built side are dropped there, before their exchanges.  They are exactly the rows the
join would drop, and no other row changes on the way, so the answer is the same.

The broadcast reaches that stage over an edge of its own, ``exchange_<id>_keys``
(``exchange_<id>`` is the one into the join; a second stage reading it gets
``_keys_2``), explained as what it is.  Nothing is pushed through an exchange that
Spark reuses (the reuser reads the same rows), nor from a built side no filter
cuts (``switchable.selective``: every key would match, and the semi join would
only cost its probes), unless keys pushed onto it cut it (TPC-H Q5's nations, cut
to one region's: their keys then go on down to ``customer`` and ``supplier``).

A shuffled left semi join's keys go down its left side the same way when its right
side is rows a filter keeps of an aggregate (``IN (.. GROUP BY .. HAVING ..)``,
TPC-H Q18): no estimate knows how few, so the translation computes that side first
(``Push.computed_first``, ``sparkplan.built_first``); ``adaptive.semi_join_filters``
turns it off.

A shuffled semi or anti join's left keys go down its right side when a filter cuts the
rows of the exchange they come from (``Push.left_side``: TPC-H Q4's orders of one
quarter, Q21's late ``lineitem`` rows; through the kept side of a join above it, as
Q21's anti join reads its semi join's): a right row whose key none of those rows has
could match no left row, so neither join changes.  Not a null-aware anti join (``NOT
IN``: one null key on the right empties the answer), and nothing where an exchange
Spark reuses is on either side (the left side's producer could end up waiting for
itself).  That producer writes its rows to the right side's stage too, over
``exchange_<id>_keys``; the translation keeps the push only where the left side is
estimated small and the right side not (``translate._left_first``), under the same
``adaptive.semi_join_filters`` and its cap on keys.  An inner join's left keys go
down its right side the same way when they pass an aggregate that groups by them on
the way (TPC-H Q17's average quantity of every part, cut to the few parts its left
side joins): dropping its input's rows by a grouping key drops whole groups, which the
join would drop.  An inner join's right side of plain rows is left to the runtime join
switch, which may broadcast it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from hybrid_shuffle.sparkplan.tree import EXCHANGES, WRAPPERS, Node

__all__ = ["Push", "find"]

#: operators that pass every row of their child through as it is (or drop it alone)
_ROWWISE = WRAPPERS | {"FilterExec", "SortExec"}
_JOINS = frozenset({"BroadcastHashJoinExec", "ShuffledHashJoinExec", "SortMergeJoinExec"})
#: join type -> the sides a row of which is kept or dropped alone (0: left, 1: right)
_KEPT_SIDES = {
    "Inner": (0, 1),
    "LeftSemi": (0,),
    "LeftAnti": (0,),
    "LeftOuter": (0,),
    "RightOuter": (1,),
}


@dataclass(frozen=True)
class Push:
    """Join ``join``'s built side ``build`` (a broadcast exchange, or a reuse of one),
    semi-joined to the output of the operator it is pushed onto: ``keys`` pairs each
    attribute id of that output with the built side's key expression it must match.
    ``computed_first``: ``build`` is a shuffled semi join's right side, rows its stage
    keeps of an aggregate (see the module docstring), which the translation computes in a
    stage of its own before the join's."""

    join: Node
    build: Node
    keys: tuple[tuple[int, Node], ...]
    computed_first: bool = False
    #: ``build`` is a shuffled semi, anti or inner join's left side, the exchange it
    #: arrives over: its producer's rows also go to the stage pushed onto, over a
    #: broadcast edge (see the module docstring)
    left_side: bool = False


def find(tops: list[Node], originals: dict[int, Node]) -> dict[int, list[Push]]:
    """``id(operator)`` -> the pushes onto its output, over the plan trees ``tops`` (the
    plan and its subqueries'); ``originals``: each ``ReusedExchange``'s id -> the
    exchange it reads (nothing is pushed through one that is read twice)."""
    mentions: dict[int, frozenset[int]] = {}
    pushes: dict[int, list[Push]] = {}
    reused = {node.op_id for node in originals.values() if node.op_id is not None}
    for top in tops:
        for node in top.walk():
            found = _semi_push(node, reused, mentions) or _left_push(node, reused, mentions)
            if found is not None:
                pushes.setdefault(id(found[0]), []).append(found[1])
    joins = [n for top in tops for n in top.walk() if n.cls == "BroadcastHashJoinExec"]
    # a built side cut by a push (TPC-H Q5's nations, by the region) is selective too:
    # looked at again until no join's keys move
    while True:
        cut = set(pushes)
        unpushed = []
        for join in joins:
            found = _push(join, originals, reused, mentions, cut)
            if found is None:
                unpushed.append(join)
            else:
                target, push = found
                pushes.setdefault(id(target), []).append(push)
        if set(pushes) == cut:
            return pushes
        joins = unpushed


def _push(
    join: Node,
    originals: dict[int, Node],
    reused: set[int],
    mentions: dict[int, frozenset[int]],
    cut: set[int],
) -> tuple[Node, Push] | None:
    from hybrid_shuffle.sparkplan.operators.join import join_type
    from hybrid_shuffle.sparkplan.switchable import selective

    if join.get("isNullAwareAntiJoin"):
        return None
    kind = join_type(join)
    probe = 1 if join.object("buildSide") == "BuildLeft" else 0
    if kind not in ("Inner", "LeftSemi") or (kind == "LeftSemi" and probe != 0):
        return None
    build = _unwrapped(join.children[1 - probe])
    if build.cls not in ("BroadcastExchangeExec", "ReusedExchangeExec"):
        return None
    built_rows = originals.get(build.op_id or -1, build)  # a reuse: the exchange it reads
    if not any(selective(n) or id(n) in cut for n in built_rows.walk()):
        return None
    return _traced(join, probe, build, reused, mentions)


def _semi_push(
    join: Node, reused: set[int], mentions: dict[int, frozenset[int]]
) -> tuple[Node, Push] | None:
    """A shuffled left semi join's push (``Push.computed_first``), if its right side is
    rows of an aggregate a filter above it cuts (``IN (... GROUP BY .. HAVING ..)``)."""
    from hybrid_shuffle.sparkplan.operators.join import join_type
    from hybrid_shuffle.sparkplan.switchable import SHUFFLED_JOINS

    if join.cls not in SHUFFLED_JOINS or join_type(join) != "LeftSemi":
        return None
    if len(join.children) != 2:
        return None
    build = join.children[1]
    while build.cls in WRAPPERS | {"SortExec"} and len(build.children) == 1:
        build = build.child
    if not _cut_after_aggregate(build):
        return None
    found = _traced(join, 0, build, reused, mentions)
    if found is None:
        return None
    target, push = found
    return target, replace(push, computed_first=True)


def _left_push(
    join: Node, reused: set[int], mentions: dict[int, frozenset[int]]
) -> tuple[Node, Push] | None:
    """A shuffled semi or anti join's left keys pushed down its right side (``Push.
    left_side``), if a filter cuts the rows of the exchange its left side's keys come
    from: a right row whose key none of them has cannot change the answer.  An inner
    join's, only through an aggregate grouping by them (see the module docstring)."""
    from hybrid_shuffle.sparkplan.operators.join import join_type
    from hybrid_shuffle.sparkplan.switchable import SHUFFLED_JOINS, selective

    kind = join_type(join)
    if join.cls not in SHUFFLED_JOINS or kind not in ("LeftSemi", "LeftAnti", "Inner"):
        return None
    if join.get("isNullAwareAntiJoin") or len(join.children) != 2:
        return None  # NOT IN: a right row with a null key empties the answer
    # the left side's producer must wait for nothing of the right side: a reused exchange
    # on either side may be the other's (Spark computes it once)
    if any(_reads_reuse(side, reused) for side in join.children):
        return None
    exchange: Node | None = None
    reached: set[int] = set()  # the left keys that reach ``exchange`` as they are
    for key in join.exprs("leftKeys"):
        found = _exchange_of(join.children[0], key, mentions)
        if found is not None and (exchange is None or found is exchange):
            exchange = found
            reached.add(key.expr_id)
    if exchange is None or not any(selective(n) for n in exchange.walk()):
        return None
    aggregates: list[Node] = []
    traced = _traced(join, 1, exchange, reused, mentions, aggregates)
    # an inner join's right side of plain rows is the runtime join switch's to broadcast;
    # an aggregate's groups are cut in its input, before it aggregates and shuffles it
    if traced is None or (kind == "Inner" and not aggregates):
        return None
    target, push = traced
    keys = tuple((k, built) for k, built in push.keys if built.expr_id in reached)
    return (target, replace(push, keys=keys, left_side=True)) if keys else None


def _exchange_of(node: Node, key: Node, memo: dict[int, frozenset[int]]) -> Node | None:
    """The shuffle exchange below ``node`` that attribute ``key`` comes from unrenamed,
    through operators that keep or drop each row alone (and the kept sides of joins):
    every row ``node`` outputs has the key of one of the exchange's rows."""
    from hybrid_shuffle.sparkplan.operators.join import join_type

    if key.cls != "AttributeReference":
        return None
    while True:
        passes = node.cls == "ProjectExec" and _passed_through(node, key.expr_id) == key.expr_id
        if node.cls in _ROWWISE or passes:
            node = node.child
        elif node.cls in _JOINS:
            sides = [i for i, c in enumerate(node.children) if key.expr_id in _mentioned(c, memo)]
            if len(sides) != 1 or sides[0] not in _KEPT_SIDES.get(join_type(node), ()):
                return None
            node = node.children[sides[0]]
        else:
            return node if node.cls == "ShuffleExchangeExec" else None


def _reads_reuse(node: Node, reused: set[int]) -> bool:
    return any(n.cls == "ReusedExchangeExec" or n.op_id in reused for n in node.walk())


def _cut_after_aggregate(node: Node) -> bool:
    """Whether ``node`` is rows of a final aggregate over an exchange, through
    projections and filters of which one is selective (``switchable.selective``)."""
    from hybrid_shuffle.sparkplan.switchable import AGGREGATES, SHUFFLE_EXCHANGES, selective

    cut = False
    while node.cls in WRAPPERS | {"ProjectExec", "FilterExec"} and len(node.children) == 1:
        cut = cut or selective(node)
        node = node.child
    if not cut or node.cls not in AGGREGATES or len(node.children) != 1:
        return False
    return _unwrapped(node.child).cls in SHUFFLE_EXCHANGES


def _traced(
    join: Node,
    probe: int,
    build: Node,
    reused: set[int],
    mentions: dict[int, frozenset[int]],
    aggregates: list[Node] | None = None,
) -> tuple[Node, Push] | None:
    """The operator below ``join``'s side ``probe`` its keys reach, and the push onto it
    (``aggregates``: see ``_trace``)."""
    streamed_keys = join.exprs("rightKeys" if probe else "leftKeys")
    built_keys = join.exprs("leftKeys" if probe else "rightKeys")
    target: Node | None = None
    keys: list[tuple[int, Node]] = []
    for streamed, built in zip(streamed_keys, built_keys, strict=True):
        if streamed.cls != "AttributeReference":
            continue
        traced = _trace(join.children[probe], streamed.expr_id, reused, mentions, aggregates)
        if traced is None or (target is not None and traced[0] is not target):
            continue
        target = traced[0]
        keys.append((traced[1], built))
    if target is None:
        return None
    return target, Push(join, build, tuple(keys))


def _trace(
    node: Node,
    key: int,
    reused: set[int],
    mentions: dict[int, frozenset[int]],
    aggregates: list[Node] | None = None,
) -> tuple[Node, int] | None:
    """The operator, below at least one exchange, whose output is the first on the way
    down from ``node`` that attribute ``key`` (renamed on the way) cannot pass, and the
    key's id there; None if there is none.  Given a list ``aggregates``, the key passes
    an aggregate it is a grouping attribute of (dropping rows by it drops whole groups),
    and the aggregates passed are appended to it."""
    crossed = False
    while True:
        if node.cls in _ROWWISE:
            node = node.child
        elif aggregates is not None and _groups_by(node, key):
            aggregates.append(node)
            node = node.child
        elif node.cls in EXCHANGES:
            if node.op_id in reused:
                return None
            crossed, node = True, node.child
        elif node.cls == "ProjectExec":
            passed = _passed_through(node, key)
            if passed is None:
                break
            key, node = passed, node.child
        elif node.cls in _JOINS:
            from hybrid_shuffle.sparkplan.operators.join import join_type

            sides = [i for i, c in enumerate(node.children) if key in _mentioned(c, mentions)]
            if len(sides) != 1 or sides[0] not in _KEPT_SIDES.get(join_type(node), ()):
                return None  # a join's output keeps its other relations: left as Spark has it
            node = node.children[sides[0]]
        elif node.cls.endswith("JoinExec") or node.cls == "CartesianProductExec":
            return None  # a nested loop join, a product: left as Spark has it too
        else:
            break
    return (node, key) if crossed else None


def _groups_by(node: Node, key: int) -> bool:
    """Whether ``node`` is an aggregate with attribute ``key`` among its grouping
    attributes (as it is, so its output names it as its input does)."""
    from hybrid_shuffle.sparkplan.switchable import AGGREGATES

    if node.cls not in AGGREGATES or len(node.children) != 1:
        return False
    return any(
        g.cls == "AttributeReference" and g.expr_id == key
        for g in node.exprs("groupingExpressions")
    )


def _passed_through(project: Node, key: int) -> int | None:
    """The id of the child's attribute projection ``project`` outputs as ``key``
    (itself, or under an alias); None if it computes it."""
    for item in project.exprs("projectList"):
        if item.cls == "AttributeReference" and item.expr_id == key:
            return key
        if item.cls == "Alias" and item.expr_id == key:
            inner = item.child
            return inner.expr_id if inner.cls == "AttributeReference" else None
    return None


def _unwrapped(node: Node) -> Node:
    while node.cls in WRAPPERS and node.children:
        node = node.child
    return node


def _mentioned(node: Node, memo: dict[int, frozenset[int]]) -> frozenset[int]:
    """Every attribute id ``node``'s subtree names anywhere in its fields: an attribute
    a join's output takes from one side is named in that side's subtree only."""
    found = memo.get(id(node))
    if found is None:
        ids = set(_ids(node.fields))
        for child in node.children:
            ids |= _mentioned(child, memo)
        found = memo[id(node)] = frozenset(ids)
    return found


def _ids(value: Any) -> Iterator[int]:
    if isinstance(value, dict):
        expr_id = value.get("exprId")
        if isinstance(expr_id, dict) and "id" in expr_id:
            yield int(expr_id["id"])
        for item in value.values():
            yield from _ids(item)
    elif isinstance(value, list):
        for item in value:
            yield from _ids(item)
