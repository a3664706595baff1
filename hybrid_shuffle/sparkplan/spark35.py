"""The Spark 3.5 side: a DataFrame's physical plan as JSON, its formatted operator ids,
the Parquet files its scans read, and a subtree as a DataFrame (for a fallback).

Every call into the JVM of the translation is here, so a Spark version's
differences stay in one small module (the shim).  The plan is planned afresh
with adaptive execution off (``spark.sql.adaptive.enabled=false`` for that one
planning): an adaptive plan is only final after it ran, and its exchanges are
what the engine runs instead.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from hybrid_shuffle.errors import PlanError
from hybrid_shuffle.sparkplan.tree import Node, parse

__all__ = ["PhysicalPlan", "physical_plan", "spark_error"]

_SKIPPED = frozenset({"WholeStageCodegenExec", "InputAdapter"})
_TREE_LINE = re.compile(r"^[\s:|+\-]*(?:\*\s)?(.+?)\s\((\d+)\)\s*$")
_REUSES = re.compile(r"^\((\d+)\) \w+ \[Reuses operator id: (\d+)\]")
_SUBQUERY = re.compile(
    r"^Subquery:\d+ Hosting operator id = \d+ Hosting Expression = .*?(\S+-subquery#\d+)"
)


@dataclass
class PhysicalPlan:
    """What the translation reads of one DataFrame's plan."""

    root: Node
    #: formatted id of a ReusedExchange -> the id of the exchange it reuses
    reuses: dict[int, int]
    #: the formatted explain text (shown by ``explain()`` next to the engine's plan)
    formatted: str
    #: the JVM plan, for the scans' files and for fallback subtrees
    jvm_plan: Any
    #: scan formatted id -> (root paths, files, file format, partitioned?)
    scans: dict[int, tuple[list[str], list[str], str, bool]] = field(default_factory=dict)
    jvm_nodes: dict[int, Any] = field(default_factory=dict)
    #: operator id -> its name and arguments as ``explain(mode="formatted")`` prints
    arguments: dict[int, str] = field(default_factory=dict)

    def nodes_by_id(self) -> dict[int, Node]:
        found: dict[int, Node] = {}
        stack = [self.root, *_subquery_plans(self.root)]
        for top in stack:
            for n in top.walk():
                if n.op_id is not None:
                    found.setdefault(n.op_id, n)
        return found


def spark_error(error: BaseException) -> str | None:
    """Spark's own one-line message of a rejected query (an ``AnalysisException`` or a
    ``ParseException``), without the Java stack; ``None`` if it is not one."""
    name = type(error).__name__
    if name in ("AnalysisException", "ParseException", "IllegalArgumentException"):
        text = getattr(error, "desc", None) or str(error)
        return " ".join(str(text).split("\n\nJVM stacktrace")[0].split())
    return None


def physical_plan(df: Any) -> PhysicalPlan:
    """``df``'s physical plan, planned with adaptive execution off."""
    spark = df.sparkSession
    jvm = spark._jvm
    conf = spark._jsparkSession.sessionState().conf()
    key = "spark.sql.adaptive.enabled"
    before = conf.getConfString(key, "true")
    conf.setConfString(key, "false")
    try:
        logical = df._jdf.queryExecution().logical()
        fresh = jvm.org.apache.spark.sql.Dataset.ofRows(spark._jsparkSession, logical)
        execution = fresh.queryExecution()
        jvm_plan = execution.executedPlan()
        text = str(jvm_plan.toJSON())
        mode = jvm.org.apache.spark.sql.execution.ExplainMode.fromString("formatted")
        formatted = str(execution.explainString(mode))
    finally:
        conf.setConfString(key, before)
    root = parse(json.loads(text))
    plan = PhysicalPlan(root, {}, formatted, jvm_plan)
    _number(plan)
    _locate(plan)
    plan.arguments = _arguments(formatted)
    return plan


def _arguments(formatted: str) -> dict[int, str]:
    """Per operator id, the ``Arguments:`` line of its formatted details (an exchange's
    partitioning), or its header when it has none."""
    found: dict[int, str] = {}
    current: int | None = None
    for line in formatted.splitlines():
        header = re.match(r"^\((\d+)\) (.+)$", line)
        if header:
            current = int(header.group(1))
            found[current] = header.group(2).strip()
        elif current is not None and line.startswith("Arguments: "):
            found[current] = f"{found[current]} {line[len('Arguments: ') :]}"
    return found


def _tree_blocks(formatted: str) -> tuple[list[int], dict[str, list[int]]]:
    """The operator ids of the main tree in the order printed (pre-order), and per
    subquery name (``scalar-subquery#721``) those of its tree."""
    lines = formatted.splitlines()
    main: list[int] = []
    subqueries: dict[str, list[int]] = {}
    current: list[int] | None = None
    in_tree = False
    for line in lines:
        if line.startswith("== Physical Plan =="):
            current, in_tree = main, True
            continue
        match = _SUBQUERY.match(line)
        if match:
            current = subqueries.setdefault(match.group(1), [])
            in_tree = True
            continue
        if not line.strip():
            in_tree = False
            continue
        if in_tree and current is not None:
            tree = _TREE_LINE.match(line)
            if tree:
                current.append(int(tree.group(2)))
    return main, subqueries


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
                    sub = parse(value["plan"])
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


def _locate(plan: PhysicalPlan) -> None:
    """The files of every Parquet scan, and the JVM node of every numbered operator."""
    nodes: dict[int, Any] = {}

    def visit(jvm_node: Any, node: Node) -> None:
        if node.op_id is not None:
            nodes[node.op_id] = jvm_node
        if node.children:
            children = jvm_node.children()
            for i, child in enumerate(node.children):
                visit(children.apply(i), child)
        hosted = _hosted_subqueries(node)
        if hosted:
            for jvm_sub, sub in zip(_seq(jvm_node.subqueries()), hosted, strict=False):
                visit(jvm_sub, sub)

    visit(plan.jvm_plan, plan.root)
    plan.jvm_nodes = nodes
    for node in plan.nodes_by_id().values():
        if node.cls == "FileSourceScanExec" and node.op_id is not None:
            relation = nodes[node.op_id].relation()
            location = relation.location()
            roots = [str(p.toString()) for p in _seq(location.rootPaths())]
            files = [str(f) for f in location.inputFiles()]
            fmt = str(relation.fileFormat().toString())
            partitioned = int(relation.partitionSchema().size()) > 0
            plan.scans[node.op_id] = (roots, files, fmt, partitioned)


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


def _seq(value: Any) -> list[Any]:
    return [value.apply(i) for i in range(value.size())]


def subtree_dataframe(plan: PhysicalPlan, node: Node, spark: Any) -> Any:
    """A DataFrame computing ``node``'s subtree in Spark (a fallback): its RDD of rows
    under its own schema, so Spark runs exactly that part of the plan."""
    if node.op_id is None or node.op_id not in plan.jvm_nodes:
        raise PlanError(f"the Spark operator {node.cls} cannot be run on its own")
    jvm_node = plan.jvm_nodes[node.op_id]
    if jvm_node.supportsColumnar():  # a scan of batches: Spark's own conversion to rows
        jvm_node = spark._jvm.org.apache.spark.sql.execution.ColumnarToRowExec(jvm_node)
    rdd = jvm_node.execute()
    schema = jvm_node.schema()
    jdf = spark._jsparkSession.internalCreateDataFrame(rdd, schema, False)
    from pyspark.sql import DataFrame

    return DataFrame(jdf, spark)
