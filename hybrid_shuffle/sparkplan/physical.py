"""A DataFrame's physical plan as the translation reads it: the plan as JSON, its
formatted operator ids, the Parquet files its scans read, and a subtree as a DataFrame
(for a fallback).

Every call into the JVM of the translation is here, the same for each Spark version;
the names that differ between versions come from the version's shim (``shim``,
``spark35``, ``spark4``).  The plan is planned afresh with adaptive execution off: an
adaptive plan is only final after it ran, and its exchanges are what the engine runs
instead.  That planning runs in a clone of the user's session (``cloneSession``: its
settings, views and functions, copied in about 2 ms) with the setting changed there
only, so the user's session never sees it, not even from another thread.  The user's
own plan, adaptive, is asked for at the same time on a second thread, for the operator
ids ``df.explain(mode="formatted")`` shows (the engine names its edges by them): Spark
plans and prints each in 50-150 ms, and the two run on two cores at once.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from hybrid_shuffle.errors import PlanError
from hybrid_shuffle.spark.gateway_sockets import tcp_nodelay
from hybrid_shuffle.sparkplan.expressions._zones import mark_session_zone
from hybrid_shuffle.sparkplan.expressions.arithmetic import EVAL_MODE_FIELD
from hybrid_shuffle.sparkplan.expressions.collections import ELEMENTS_FIELD
from hybrid_shuffle.sparkplan.expressions.predicates import IN_SET_FIELD
from hybrid_shuffle.sparkplan.expressions.strings import ESCAPE_FIELD
from hybrid_shuffle.sparkplan.shim import shim_for
from hybrid_shuffle.sparkplan.tree import Node, parse

__all__ = [
    "Attribute",
    "PhysicalPlan",
    "ScanFiles",
    "jvm_node",
    "local_path",
    "output_attributes",
    "partition_files",
    "physical_plan",
    "python_commands",
    "spark_error",
    "subtree_dataframe",
]

_ADAPTIVE = "spark.sql.adaptive.enabled"
_METADATA_LENGTH = "spark.sql.maxMetadataStringLength"
#: seconds Spark may take to plan and print the user's own plan, once the engine's copy
#: is planned (Spark plans a TPC-H query in well under a second)
_USER_PLAN_TIMEOUT = 300.0
#: the thread that asks Spark for the user's own plan (one py4j connection, kept)
_USER_PLAN = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hybrid-shuffle-user-plan")
_HEADER = re.compile(r"^\((\d+)\) (.+)$")
_SCAN = re.compile(r"^Scan (\w+)")
_LOCATION = re.compile(r"^Location: \w+(?:\(\d+ paths?\))?\s*\[(.*)\]$")
_SKIPPED = frozenset({"WholeStageCodegenExec", "InputAdapter"})
_TREE_LINE = re.compile(r"^[\s:|+\-]*(?:\*\s)?(.+?)\s\((\d+)\)\s*$")
_REUSES = re.compile(r"^\((\d+)\) \w+ \[Reuses operator id: (\d+)\]")
#: a subquery section's header; the adaptive plan names it ``subquery#35``, the other
#: ``scalar-subquery#35``
_SUBQUERY = re.compile(
    r"^Subquery:(\d+) Hosting operator id = \d+ Hosting Expression = .*?(\S*subquery#(\d+))"
)


@dataclass
class ScanFiles:
    """A file scan as the formatted plan prints it: ``Scan parquet`` and its location."""

    format: str
    roots: list[str]


@dataclass
class PhysicalPlan:
    """What the translation reads of one DataFrame's plan."""

    root: Node
    #: formatted id of a ReusedExchange -> the id of the exchange it reuses
    reuses: dict[int, int]
    #: the formatted explain text (shown by ``explain()`` next to the engine's plan)
    formatted: str
    #: the JVM plan, for fallback subtrees
    jvm_plan: Any
    #: file scan id -> its format and root paths
    scans: dict[int, ScanFiles] = field(default_factory=dict)
    #: ``id(node)`` -> its JVM operator, as far as looked up (``jvm_node``)
    jvm_nodes: dict[int, Any] = field(default_factory=dict)
    #: seconds Spark took to plan (and print) the query
    spark_seconds: float = 0.0
    #: operator id -> the id ``df.explain(mode="formatted")`` shows the user, where the
    #: session's settings (adaptive execution) make them differ (``user_ids``)
    shown: dict[int, int] = field(default_factory=dict)
    #: seconds spent reading the JSON and the formatted text
    parse_seconds: float = 0.0
    #: operator id -> its name and arguments as ``explain(mode="formatted")`` prints
    arguments: dict[int, str] = field(default_factory=dict)
    #: ``id(node)`` -> Spark's estimate of its bytes, as far as asked (``switchable``):
    #: a join's sides are asked by its translation and by the run-time switch, and a scan
    #: by every join above it
    sizes: dict[int, int | None] = field(default_factory=dict)
    #: ``id(node)`` -> a Parquet scan's rows as Arrow by its footers, its required columns
    #: only, as far as asked (``switchable._parquet_bytes``)
    parquet_bytes: dict[int, int | None] = field(default_factory=dict)
    #: a scalar subquery's expression id (``scalar-subquery#245``: 245) -> the number the
    #: user's ``df.explain(mode="formatted")`` gives it (``Subquery:1``; see
    #: ``subquery_numbers``)
    subqueries: dict[int, int] = field(default_factory=dict)

    def shown_id(self, op_id: int) -> int:
        """The id the user's ``df.explain(mode="formatted")`` prints for ``op_id``."""
        return self.shown.get(op_id, op_id)

    def subquery_number(self, name: str) -> str:
        """The number the user's formatted plan gives the scalar subquery ``name``
        (``scalar-subquery#245``), or its expression id where the text does not list it."""
        tail = name.rsplit("#", 1)[-1]
        found = self.subqueries.get(int(tail)) if tail.isdigit() else None
        return tail if found is None else str(found)

    def trees(self) -> list[Node]:
        """The plan's root and every subquery's plan."""
        return [self.root, *_subquery_plans(self.root)]

    def nodes_by_id(self) -> dict[int, Node]:
        found: dict[int, Node] = {}
        for top in self.trees():
            for n in top.walk():
                if n.op_id is not None:
                    found.setdefault(n.op_id, n)
        return found


def spark_error(error: BaseException) -> str | None:
    """Spark's own one-line message of a rejected query (an ``AnalysisException`` or a
    ``ParseException``), without the plan, the query or the Java stack Spark appends;
    ``None`` if it is not one."""
    name = type(error).__name__
    if name in ("AnalysisException", "ParseException", "IllegalArgumentException"):
        import pyspark

        attribute = shim_for(pyspark.__version__).error_description
        text = str(getattr(error, attribute, None) or str(error))
        # its first line: what follows is the analysed plan (``;\n'Project [...]``), the
        # query with a caret under the error (``== SQL ==``) or the Java stack
        lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
        first = lines[0] if lines else type(error).__name__
        return " ".join(first.rstrip(";").split())
    return None


def physical_plan(df: Any) -> PhysicalPlan:
    """``df``'s physical plan, planned with adaptive execution off (see the module
    docstring)."""
    spark = df.sparkSession
    tcp_nodelay(spark)  # the plan's JSON and texts leave the JVM without 40 ms stalls
    shim = shim_for(str(spark.version))
    jvm = spark._jvm
    started = time.perf_counter()
    mode = jvm.org.apache.spark.sql.execution.ExplainMode.fromString("formatted")
    user_conf = spark._jsparkSession.sessionState().conf()
    user_plan: Future[str] | None = None
    if str(user_conf.getConfString(_ADAPTIVE, "true")).strip().lower() == "true":
        # the ids the user sees in df.explain(mode="formatted") are the adaptive plan's
        user_plan = _USER_PLAN.submit(_formatted_user_plan, df, mode)
    session = spark._jsparkSession.cloneSession()
    conf = session.sessionState().conf()
    conf.setConfString(_ADAPTIVE, "false")
    conf.setConfString(_METADATA_LENGTH, "1000000000")  # the scans' locations in full
    # the plan Spark analysed when the DataFrame was made: planned afresh without parsing
    # or analysing again (an analysed plan skips the analyser), and as the DataFrame
    # means it (a view replaced since is not looked up again)
    analysed = df._jdf.queryExecution().analyzed()
    execution = shim.dataset_of_rows(jvm, session, analysed).queryExecution()
    jvm_plan = execution.executedPlan()
    text = str(jvm_plan.toJSON())
    zone = str(conf.sessionLocalTimeZone())  # a timestamp literal's text is in it
    formatted = str(execution.explainString(mode))
    shown = None if user_plan is None else _waited(user_plan)
    planned = time.perf_counter()
    raw = json.loads(text)
    mark_session_zone(raw, zone)
    mark_jvm_fields(raw, jvm_plan, text)
    root = parse(raw)
    plan = PhysicalPlan(root, {}, formatted, jvm_plan)
    _number(plan)
    plan.arguments, plan.scans = _details(formatted)
    plan.subqueries = subquery_numbers(formatted)
    if shown is not None:
        plan.shown = user_ids(formatted, shown)
        # the user's numbers where the user's plan lists every subquery (never a mix of
        # the two texts' numbers, which could give two subqueries one name)
        user = subquery_numbers(shown)
        if user.keys() >= plan.subqueries.keys():
            plan.subqueries = user
    plan.spark_seconds = planned - started
    plan.parse_seconds = time.perf_counter() - planned
    return plan


def _formatted_user_plan(df: Any, mode: Any) -> str:
    """``df.explain(mode)``'s text, from the user's own session (on ``_USER_PLAN``'s
    thread: its py4j connection is set like the driver's first)."""
    tcp_nodelay(df.sparkSession)
    return str(df._jdf.queryExecution().explainString(mode))


def _waited(user_plan: Future[str]) -> str:
    """The user's plan's text, waiting at most ``_USER_PLAN_TIMEOUT`` for Spark."""
    try:
        return user_plan.result(timeout=_USER_PLAN_TIMEOUT)
    except TimeoutError:
        raise PlanError(
            f"Spark did not plan the DataFrame within {_USER_PLAN_TIMEOUT:g} s; its driver "
            "is overloaded or stuck, so check its log and memory (spark.driver.memory)"
        ) from None


_LIKE = "org.apache.spark.sql.catalyst.expressions.Like"
_IN_SET = "org.apache.spark.sql.catalyst.expressions.InSet"
_LITERAL = "org.apache.spark.sql.catalyst.expressions.Literal"


def mark_jvm_fields(raw: Any, jvm_plan: Any, text: str) -> None:
    """Fill in what the plan's JSON (``raw``, ``text`` its text) writes as null, read from
    the JVM: a ``Like``'s escape character (``ESCAPE_FIELD``: ``a LIKE b ESCAPE '/'``
    matched with the default backslash is a wrong answer), an ``InSet``'s values
    (``IN_SET_FIELD``) and an array literal's elements (``ELEMENTS_FIELD``), each as a
    ``Literal``'s JSON, as Spark writes literals, and integer arithmetic's evaluation
    mode (``EVAL_MODE_FIELD``: ``try_add`` is null on overflow where ``+`` wraps).

    An operator's expressions of that class are read from its JVM expressions in
    pre-order, the order ``toJSON`` writes them; where the two counts differ (one inside
    a subquery's plan), the JSON's are left unmarked and their translation falls back.
    Only a plan holding one of these classes pays for the calls into the JVM."""
    readers = [
        (match, read)
        for match, read, present in (
            (_Match(_LIKE), _escape_of, f'"{_LIKE}"' in text),
            (_Match(_IN_SET), _values_of, f'"{_IN_SET}"' in text),
            (_Match(_LITERAL, kind="array"), _elements_of, '"type":"array"' in text),
            (_Match(*_ARITHMETIC), _eval_mode_of, _integral_arithmetic(raw, text)),
        )
        if present
    ]
    if not readers or not isinstance(raw, list):
        return
    jvm_operators = _pre_order(jvm_plan)
    if len(jvm_operators) != len(raw):
        return
    for node, jvm in zip(raw, jvm_operators, strict=True):
        for match, read in readers:
            marked = _json_expressions(node, match, [])
            if not marked:
                continue
            found: list[Any] = []
            for expression in _seq(jvm.expressions()):
                _jvm_expressions(expression, match, found)
            if len(found) != len(marked):
                continue
            for entry, expression in zip(marked, found, strict=True):
                try:
                    entry.update(read(expression))
                except _Unreadable:
                    continue


class _Match:
    """Expressions of one of the classes ``classes`` (of the type named ``kind`` where
    given)."""

    def __init__(self, *classes: str, kind: str | None = None) -> None:
        self.classes = frozenset(classes)
        self.kind = kind

    def json(self, value: dict[str, Any]) -> bool:
        if value.get("class") not in self.classes:
            return False
        kind = value.get("dataType")
        return self.kind is None or (isinstance(kind, dict) and kind.get("type") == self.kind)

    def jvm(self, expression: Any) -> bool:
        if str(expression.getClass().getName()) not in self.classes:
            return False
        return self.kind is None or str(expression.dataType().typeName()) == self.kind


#: the arithmetic whose ``evalMode`` (``try_add``: TRY) the JSON writes as null
_ARITHMETIC = tuple(
    f"org.apache.spark.sql.catalyst.expressions.{name}" for name in ("Add", "Subtract", "Multiply")
)
_INTEGRAL = ('"dataType":"integer"', '"dataType":"long"', '"dataType":"short"', '"dataType":"byte"')


def _integral_arithmetic(raw: Any, text: str) -> bool:
    """Whether a plan may hold integer arithmetic, whose ``try_`` form (null on overflow)
    differs from the default (it wraps): the only case the evaluation mode changes.  An
    ``Add``/``Subtract``/``Multiply`` is of its left operand's type; where every one's
    is known from the JSON and is not an integer (TPC-H's decimal arithmetic), the plan
    pays no call into the JVM for it."""
    if not (any(f'"{c}"' in text for c in _ARITHMETIC) and any(t in text for t in _INTEGRAL)):
        return False
    return any(_integral_at(found, i) for found, i in _arithmetic_nodes(raw))


def _arithmetic_nodes(value: Any) -> Iterator[tuple[list[Any], int]]:
    """Each ``Add``/``Subtract``/``Multiply`` of the JSON: the expression list (written
    in pre-order) it is in, and its index there."""
    if isinstance(value, dict):
        for v in value.values():
            yield from _arithmetic_nodes(v)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            if isinstance(v, dict) and v.get("class") in _ARITHMETIC:
                yield value, i
            yield from _arithmetic_nodes(v)


def _integral_at(expressions: list[Any], index: int) -> bool:
    """Whether the arithmetic at ``index`` may be of an integer type: its left operand
    (the next expression in pre-order) followed through nested arithmetic to one whose
    JSON names its type (an attribute, a literal, a cast); unknown counts as may."""
    i = index + 1
    while i < len(expressions):
        node = expressions[i]
        if not isinstance(node, dict):
            return True
        kind = node.get("dataType")
        if isinstance(kind, str):
            return kind in _INTEGRAL_NAMES
        if node.get("class") not in _ARITHMETIC:
            return True
        i += 1
    return True


_INTEGRAL_NAMES = frozenset({"integer", "long", "short", "byte"})


def _eval_mode_of(arithmetic: Any) -> dict[str, Any]:
    return {EVAL_MODE_FIELD: str(arithmetic.evalMode().toString())}


def _escape_of(like: Any) -> dict[str, Any]:
    return {ESCAPE_FIELD: str(like.escapeChar())}


def _values_of(in_set: Any) -> dict[str, Any]:
    """An ``InSet``'s values as the JSON of ``Literal``s of its child's type."""
    kind = in_set.child().dataType()
    values = []
    iterator = in_set.hset().iterator()
    while iterator.hasNext():
        values.append([_literal_json(iterator.next(), kind)])
    return {IN_SET_FIELD: values}


def _elements_of(literal: Any) -> dict[str, Any]:
    """An array literal's elements as the JSON of ``Literal``s of its element type (the
    JSON writes the array as its ``toString``, which does not say where a string ends)."""
    kind = literal.dataType().elementType()
    array = literal.value()
    if array is None:
        return {}
    elements = []
    for i in range(int(array.numElements())):
        value = None if array.isNullAt(i) else array.get(i, kind)
        elements.append([_literal_json(value, kind)])
    return {ELEMENTS_FIELD: elements}


def _literal_json(value: Any, kind: Any) -> dict[str, Any]:
    """The JSON ``Literal`` writes of a Catalyst ``value`` of the type ``kind`` (its
    ``toString``); ``_Unreadable`` for a type whose text this does not reproduce (a date,
    a timestamp: Spark formats those)."""
    name = str(kind.typeName())
    if value is None:
        text = None
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, int | float) and name not in ("date", "timestamp", "timestamp_ntz"):
        text = repr(value)
    elif name.startswith("decimal"):
        exact = value.toJavaBigDecimal()  # py4j gives a BigDecimal as a Python Decimal
        text = format(exact, "f") if isinstance(exact, Decimal) else str(exact.toPlainString())
    elif name == "string":
        text = str(value.toString())
    else:
        raise _Unreadable(name)
    return {
        "class": _LITERAL,
        "num-children": 0,
        "value": text,
        "dataType": json.loads(str(kind.json())),
    }


class _Unreadable(Exception):
    """A value ``_values_of`` does not write as Spark's JSON would."""


def _pre_order(jvm: Any) -> list[Any]:
    found = [jvm]
    for child in _seq(jvm.children()):
        found.extend(_pre_order(child))
    return found


def _json_expressions(value: Any, match: _Match, out: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The JSON nodes ``match`` takes in ``value``, in the order written."""
    if isinstance(value, dict):
        if match.json(value):
            out.append(value)
        for v in value.values():
            _json_expressions(v, match, out)
    elif isinstance(value, list):
        for v in value:
            _json_expressions(v, match, out)
    return out


def _jvm_expressions(expression: Any, match: _Match, out: list[Any]) -> list[Any]:
    """The JVM expressions ``match`` takes in ``expression``'s tree, in pre-order."""
    if match.jvm(expression):
        out.append(expression)
    for child in _seq(expression.children()):
        _jvm_expressions(child, match, out)
    return out


def _details(formatted: str) -> tuple[dict[int, str], dict[int, ScanFiles]]:
    """From the formatted details: per operator id its name and ``Arguments:`` (an
    exchange's partitioning), and per file scan its format and root paths."""
    found: dict[int, str] = {}
    scans: dict[int, ScanFiles] = {}
    current: int | None = None
    for line in formatted.splitlines():
        header = _HEADER.match(line)
        if header:
            current = int(header.group(1))
            found[current] = f"{header.group(2).split(' [')[0].strip()} ({current})"
            scan = _SCAN.match(header.group(2))
            if scan:
                scans[current] = ScanFiles(scan.group(1), [])
        elif current is None:
            continue
        elif line.startswith("Arguments: "):
            found[current] = f"{found[current]} {line[len('Arguments: ') :]}"
        elif line.startswith("Location: ") and current in scans:
            match = _LOCATION.match(line)
            if match:
                scans[current].roots = [p.strip() for p in match.group(1).split(", ") if p]
    return found, scans


@dataclass(frozen=True)
class _Line:
    """One operator of a printed tree: its id, its name and how deep it is printed."""

    id: int
    name: str
    column: int


def _tree_lines(formatted: str) -> tuple[list[_Line], dict[str, list[_Line]]]:
    """The operators of the main tree in the order printed (pre-order), and per subquery
    name (``scalar-subquery#721``) those of its tree."""
    main: list[_Line] = []
    subqueries: dict[str, list[_Line]] = {}
    current: list[_Line] | None = None
    in_tree = False
    #: the column of an InMemoryTableScan's name while the cached plan Spark prints under
    #: it (InMemoryRelation and its own tree, not children in the JSON) is skipped
    cached: int | None = None
    for line in formatted.splitlines():
        if line.startswith("== Physical Plan =="):
            current, in_tree, cached = main, True, None
            continue
        match = _SUBQUERY.match(line)
        if match:
            block = subqueries.setdefault(match.group(2), [])
            # a subquery hosted by two operators (Spark 4: a filter and the scan it is
            # pushed into) is printed under each, with the same ids: read it once
            current = None if block else block
            in_tree, cached = True, None
            continue
        if not line.strip():
            in_tree = False
            continue
        if in_tree and current is not None:
            tree = _TREE_LINE.match(line)
            if tree:
                if cached is not None and tree.start(1) > cached:
                    continue
                cached = tree.start(1) if tree.group(1) == "InMemoryTableScan" else None
                name = tree.group(1).split()[0]
                current.append(_Line(int(tree.group(2)), name, tree.start(1)))
    return main, subqueries


def subquery_numbers(formatted: str) -> dict[int, int]:
    """Per scalar subquery's expression id, the number of its section in ``formatted``
    (``Subquery:2 Hosting operator id = 7 Hosting Expression = Subquery
    scalar-subquery#245``: 245 -> 2), the first where it is printed under two hosts.  Spark
    gives a subquery a new expression id each time it analyses the query (every
    ``spark.sql``), but numbers the sections in the order of the plan: the number is what
    names the subquery's edge, so a config naming it holds from one run to the next."""
    numbers: dict[int, int] = {}
    for line in formatted.splitlines():
        match = _SUBQUERY.match(line)
        if match:
            numbers.setdefault(int(match.group(3)), int(match.group(1)))
    return numbers


def _tree_blocks(formatted: str) -> tuple[list[int], dict[str, list[int]]]:
    """``_tree_lines``'s ids only."""
    main, subqueries = _tree_lines(formatted)
    return [x.id for x in main], {k: [x.id for x in v] for k, v in subqueries.items()}


def user_ids(formatted: str, shown: str) -> dict[int, int]:
    """Per operator id of ``formatted`` (the plan planned with adaptive execution off),
    the id ``shown`` gives the same operator: what ``df.explain(mode="formatted")``
    prints under the session's own settings.  With adaptive execution on (Spark's
    default) that plan has no columnar transitions yet and reuses no exchange, so its
    ids differ; the trees are matched operator by operator, in the order printed, and
    a reused exchange takes the id of the copy printed in its place.  An empty map if
    the trees do not match (the ids of ``formatted`` are then used)."""
    off_main, off_subs = _tree_lines(formatted)
    on_main, on_subs = _tree_lines(shown)
    on_main = [x for x in on_main if x.name != "AdaptiveSparkPlan"]
    mapping: dict[int, int] = {}
    pairs = [(off_main, on_main)]
    on_blocks = [[x for x in v if x.name != "AdaptiveSparkPlan"] for v in on_subs.values()]
    pairs += list(zip(off_subs.values(), on_blocks, strict=False))
    for off, on in pairs:
        found = _align(off, on)
        if found is None:
            return {}
        mapping.update(found)
    return mapping


_SAME = {"ReusedExchange": ("Exchange", "BroadcastExchange")}


def _align(off: list[_Line], on: list[_Line]) -> dict[int, int] | None:
    mapping: dict[int, int] = {}
    j = 0
    for line in off:
        if j >= len(on):
            return None if line.name not in _TRANSITIONS else mapping
        target = on[j]
        if line.name == target.name or target.name in _SAME.get(line.name, ()):
            mapping[line.id] = target.id
            j += 1
            if line.name == "ReusedExchange" and target.name != "ReusedExchange":
                while j < len(on) and on[j].column > target.column:  # the copy's subtree
                    j += 1
        elif line.name not in _TRANSITIONS:
            return None
    return mapping if j == len(on) else None


#: operators the plan planned with adaptive execution off has and the adaptive one has not
#: yet (they are added when each stage runs)
_TRANSITIONS = frozenset({"ColumnarToRow", "RowToColumnar"})


def _visible(node: Node) -> list[Node]:
    """The nodes the formatted tree prints under ``node``, in pre-order."""
    out: list[Node] = []
    stack = [node]
    while stack:
        n = stack.pop()
        if n.cls not in _SKIPPED:
            out.append(n)
        stack.extend(reversed(n.children))
    return out


def _number(plan: PhysicalPlan) -> None:
    main, subqueries = _tree_blocks(plan.formatted)
    for node, op_id in zip(_visible(plan.root), main, strict=False):
        node.op_id = op_id
    for line in plan.formatted.splitlines():
        match = _REUSES.match(line)
        if match:
            plan.reuses[int(match.group(1))] = int(match.group(2))
    for sub in _subquery_plans(plan.root):
        ids = subqueries.get(str(sub.get("name", "")), [])
        body = sub.children[0] if sub.cls == "SubqueryExec" and sub.children else sub
        for node, op_id in zip(_visible(body), ids, strict=False):
            node.op_id = op_id


def _subquery_plan(raw: list[Any]) -> Node:
    """A scalar subquery's plan; a ``ReusedSubqueryExec`` (a subquery computed once for
    several expressions: Spark 4 also pushes a filter's subquery into its scan's data
    filters, and the filter's copy reuses the scan's) is the subquery it reuses, which the
    JSON prints in full as its ``child``."""
    sub = parse(raw)
    reused = sub.get("child")
    if sub.cls == "ReusedSubqueryExec" and isinstance(reused, list) and reused:
        return parse(reused)
    return sub


def _subquery_plans(root: Node) -> list[Node]:
    """Every subquery plan in the tree (parsed once, cached on the hosting expression)."""
    found: list[Node] = []

    def scan(value: Any) -> None:
        if isinstance(value, dict):
            if str(value.get("class", "")).endswith("ScalarSubquery") and isinstance(
                value.get("plan"), list
            ):
                sub = value.get("_parsed")
                if sub is None:
                    sub = _subquery_plan(value["plan"])
                    value["_parsed"] = sub
                found.append(sub)
                for n in sub.walk():
                    for v in n.fields.values():
                        scan(v)
                return
            for v in value.values():
                scan(v)
        elif isinstance(value, list):
            for v in value:
                scan(v)

    for node in root.walk():
        for v in node.fields.values():
            scan(v)
    return found


def jvm_node(plan: PhysicalPlan, target: Node) -> Any:
    """The JVM operator of ``target``, found by walking from the root (or a subquery's
    plan) along child indices: only a fallback needs one, so only a fallback pays for
    the calls into the JVM."""
    cached = plan.jvm_nodes.get(id(target))
    if cached is not None:
        return cached

    def path_to(node: Node) -> list[tuple[int, Node]] | None:
        if node is target:
            return []
        for i, child in enumerate(node.children):
            rest = path_to(child)
            if rest is not None:
                return [(i, child), *rest]
        return None

    tops: list[tuple[Node, Any]] = [(plan.root, plan.jvm_plan)]
    while tops:
        top, jvm_top = tops.pop(0)
        path = path_to(top)
        if path is not None:
            # from the deepest operator on the way already looked up: the operators of
            # one plan share most of their way from the root, and each step down is two
            # calls into the JVM
            current, step = jvm_top, 0
            while step < len(path) and id(path[step][1]) in plan.jvm_nodes:
                step += 1
            if step:
                current = plan.jvm_nodes[id(path[step - 1][1])]
            for i, node in path[step:]:
                current = current.children().apply(i)
                plan.jvm_nodes[id(node)] = current
            plan.jvm_nodes[id(target)] = current
            return current
        # the subqueries hosted anywhere in ``top``, in the order Spark lists them
        hosts = [n for n in top.walk() if _hosted_subqueries(n)]
        for host in hosts:
            jvm_host = jvm_node(plan, host)
            subs = [_reused(s) for s in _seq(jvm_host.subqueries())]
            tops.extend(zip(_hosted_subqueries(host), subs, strict=False))
    raise PlanError(f"the Spark operator {target.cls} cannot be found in Spark's plan")


def _hosted_subqueries(node: Node) -> list[Node]:
    """The subquery plans in ``node``'s own expressions, in the order Spark lists them."""
    found: list[Node] = []

    def scan(value: Any) -> None:
        if isinstance(value, dict):
            sub = value.get("_parsed")
            if sub is not None:
                found.append(sub)
                return
            for v in value.values():
                scan(v)
        elif isinstance(value, list):
            for v in value:
                scan(v)

    for v in node.fields.values():
        scan(v)
    return found


def _reused(jvm_subquery: Any) -> Any:
    """The JVM subquery a ``ReusedSubqueryExec`` reuses (as ``_subquery_plan`` parses it)."""
    if str(jvm_subquery.getClass().getSimpleName()) == "ReusedSubqueryExec":
        return jvm_subquery.child()
    return jvm_subquery


def _seq(value: Any) -> list[Any]:
    return [value.apply(i) for i in range(value.size())]


#: the expressions that call a Python function (a grouped aggregate's is a ``PythonUDAF``)
PYTHON_CALLS = ("PythonUDF", "PythonUDAF")


def python_commands(
    plan: PhysicalPlan, node: Node, field: str, spark: Any
) -> list[tuple[bytes, ...]]:
    """The Python functions Spark serialized into operator ``node``'s field ``field``
    (``udfs``, ``func``, ``aggExpressions``, ``udfExpressions``, ``windowExpression``),
    each as the chain of its commands, innermost first (``f(g(x))`` with one child call
    is one chain, as Spark's ``collectFunctions`` makes it): the bytes
    ``PythonFunction.command`` holds, a pickle of ``(function, return type)``, which the
    JSON writes as null."""
    value = getattr(jvm_node(plan, node), field)()
    calls = [value] if field == "func" else _seq(value)
    if field == "windowExpression":  # Alias(WindowExpression(function, spec))
        calls = [c.child().windowFunction() for c in calls]
    if field in ("aggExpressions", "windowExpression"):  # AggregateExpression(PythonUDAF)
        calls = [
            c.aggregateFunction() if c.getClass().getSimpleName() == "AggregateExpression" else c
            for c in calls
        ]
    byte = spark._jvm.scala.reflect.ClassTag.Byte()
    out: list[tuple[bytes, ...]] = []
    for call in calls:
        chain = [call]
        while True:
            children = _seq(chain[-1].children())
            if len(children) != 1 or children[0].getClass().getSimpleName() not in PYTHON_CALLS:
                break
            chain.append(children[0])
        out.append(tuple(bytes(c.func().command().toArray(byte)) for c in reversed(chain)))
    return out


@dataclass(frozen=True)
class Attribute:
    """One output attribute of a JVM operator."""

    id: int
    name: str
    #: ``DataType.typeName``: the JSON's name of the type (``decimal(15,2)``)
    type_name: str
    nullable: bool


def output_attributes(plan: PhysicalPlan, node: Node) -> list[Attribute]:
    """``node``'s output attributes, asked of its JVM operator (most operators' JSON lacks
    them)."""
    output = jvm_node(plan, node).output()
    found = []
    for i in range(output.size()):
        attribute = output.apply(i)
        found.append(
            Attribute(
                int(attribute.exprId().id()),
                str(attribute.name()),
                str(attribute.dataType().typeName()),
                bool(attribute.nullable()),
            )
        )
    return found


def output_partitioning(plan: PhysicalPlan, node: Node) -> list[int] | None:
    """How Spark leaves ``node``'s rows partitioned, where an operator above it may rely
    on that without an exchange between (a join or an aggregate over a subtree already
    hash-partitioned by its keys): the attribute ids of a ``HashPartitioning`` on
    attributes, ``[]`` for rows that must be read in one task (``SinglePartition``, a
    hash on an expression), ``None`` for a partitioning nothing above can rely on
    (unknown, round-robin) or that only orders (range: read in Spark's order)."""
    partitioning = jvm_node(plan, node).outputPartitioning()
    candidates = [partitioning]
    if str(partitioning.getClass().getSimpleName()) == "PartitioningCollection":
        candidates = _seq(partitioning.partitionings())
    for candidate in candidates:
        kind = str(candidate.getClass().getSimpleName()).rstrip("$")
        if kind == "SinglePartition":
            return []
        if kind != "HashPartitioning":
            continue
        keys = _seq(candidate.expressions())
        if all(str(k.getClass().getSimpleName()) == "AttributeReference" for k in keys):
            return [int(k.exprId().id()) for k in keys]
        return []
    return None


def local_path(path: str) -> str:
    """A ``file:`` URI as a path (pyarrow reads other schemes by their URI)."""
    return path.removeprefix("file:")


def partition_files(plan: PhysicalPlan, node: Node) -> tuple[list[str], int] | None:
    """The files a scan of a partitioned table reads after Spark's partition pruning
    (``selectedPartitions``) and how many ``key=value`` folders the table has (its
    partition schema's size), or ``None`` where the JVM operator does not list them
    (then every folder is read and the partition filters are applied to the rows)."""
    try:
        scan = jvm_node(plan, node)
        depth = int(scan.relation().partitionSchema().size())
        partitions = scan.selectedPartitions()
        files: list[str] = []
        for i in range(len(partitions)):
            listed = partitions[i].files()
            files += [str(listed.apply(j).getPath().toString()) for j in range(listed.size())]
    except Exception:  # another Spark's listing (Spark 4: a ScanFileListing)
        return None
    return files, depth


def subtree_dataframe(plan: PhysicalPlan, node: Node, spark: Any) -> Any:
    """A DataFrame computing ``node``'s subtree in Spark (a fallback): its RDD of rows
    under its own schema, so Spark runs exactly that part of the plan."""
    found = jvm_node(plan, node)
    if found.supportsColumnar():  # a scan of batches: Spark's own conversion to rows
        found = spark._jvm.org.apache.spark.sql.execution.ColumnarToRowExec(found)
    rdd = found.execute()
    schema = found.schema()
    jdf = spark._jsparkSession.internalCreateDataFrame(rdd, schema, False)
    from pyspark.sql import DataFrame

    from hybrid_shuffle.spark import SIZE_HINT

    df = DataFrame(jdf, spark)
    # an RDD has no size estimate of its own: the operator's logical plan has one (a
    # cached table's is its size), which the bridge needs to choose how to fetch it
    link = found.logicalLink()
    if link.isDefined():
        setattr(df, SIZE_HINT, int(str(link.get().stats().sizeInBytes())))
    return df
