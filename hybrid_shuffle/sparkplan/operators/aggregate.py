"""Hash, object-hash and sort aggregates, in each of Spark's modes.

Spark splits an aggregate around its exchange: ``Partial`` turns rows into
per-group *buffers* (a sum and whether it saw a value, a sum and a count, ...),
``PartialMerge`` merges buffers into buffers, ``Final`` merges buffers into the
result, ``Complete`` goes from rows to the result in one step.  One node may mix
modes (a distinct aggregate next to a plain one).  Both ends are translated
here, so the buffers are the engine's own columns; their number per function
matches Spark's, because the plan names them by position
(``initialInputBufferOffset``, ``resultExpressions``).  A final aggregate whose
buffers come from Spark (its partial fell back) falls back too.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hybrid_shuffle.empty_column import EMPTY_SELECT
from hybrid_shuffle.sparkplan.expressions import Sql, Unsupported, _exact, compile_expression
from hybrid_shuffle.sparkplan.expressions.arithmetic import _result
from hybrid_shuffle.sparkplan.operators.basic import named_output
from hybrid_shuffle.sparkplan.operators.pivot import (
    pivot_labels,
    pivot_merge,
    pivot_output,
    pivot_partial,
    pivot_result,
)
from hybrid_shuffle.sparkplan.operators.registry import register_operator
from hybrid_shuffle.sparkplan.operators.sums import (
    average_sum_type,
    fit_decimal,
    sum_of,
    sum_type,
    wrap_long,
)
from hybrid_shuffle.sparkplan.relation import Column, Rel
from hybrid_shuffle.sparkplan.stage import Stage
from hybrid_shuffle.sparkplan.tree import Node
from hybrid_shuffle.sparkplan.types import DOUBLE, LONG, SparkType, column_type, decimal

if TYPE_CHECKING:
    from hybrid_shuffle.sparkplan.translate import Translator

__all__: list[str] = []

_BUFFERS = {
    "Sum": None,  # 2 for decimals (sum, isEmpty), else 1
    "Average": 2,
    "Count": 1,
    "Min": 1,
    "Max": 1,
    "First": 2,
    "Last": 2,
    "StddevSamp": 3,
    "StddevPop": 3,
    "VarianceSamp": 3,
    "VariancePop": 3,
}


#: buffers a partial aggregate laid out otherwise than the engine's would (try_sum's are
#: one more than sum's, and the plan's JSON tells neither apart: its evalMode is null)
_SPARK_BUFFERS = "an aggregate merging buffers not laid out as the engine lays them out"


def _bounded(precision: int, scale: int) -> SparkType:
    return decimal(min(precision, 38), min(scale, 38))


@dataclass
class _Function:
    """One aggregate function of the node, compiled against its input."""

    name: str
    mode: str
    distinct: bool
    args: list[Sql]  # the raw arguments (Partial, Complete)
    result_id: int
    arg_type: SparkType
    #: ``first``/``last``: skip nulls (``ignoreNulls``)
    ignore_nulls: bool = False
    #: ``first``/``last``: the FILTER clause's condition (Partial, Complete); the other
    #: functions skip nulls, so their arguments carry it instead (``_filtered``)
    condition: str | None = None
    #: ``PivotFirst``: its slots' names (the pivot values', ``operators.pivot``)
    pivot: list[str] = dataclasses.field(default_factory=list)
    #: a partial decimal ``sum``: the column of its argument in 64 bits, where that holds
    #: it; the argument's own column then holds only the other values (``_arguments_once``)
    narrow: str | None = None

    @property
    def buffers(self) -> int:
        if self.name == "PivotFirst":
            return len(self.pivot)
        return _buffer_count(self.name, self.arg_type.is_decimal)


def _buffer_count(name: str, decimal_sum: bool) -> int:
    """The buffers the engine lays out for function ``name`` (not a pivot): a sum two
    when it sums decimals (its sum, and whether it saw a value), else one; each other
    function its count in ``_BUFFERS``."""
    if name == "Sum":
        return 2 if decimal_sum else 1
    count = _BUFFERS.get(name)
    if count is None:
        raise Unsupported(f"the aggregate function {name}")
    return count


def _partial(f: _Function) -> list[str]:
    """Rows -> buffers."""
    x = f.args[0].text if f.args else "1"
    d = "DISTINCT " if f.distinct else ""
    if f.name == "Sum" and f.narrow is not None:
        return [_sum_of_parts(f.narrow, x, f.arg_type), f"(count({f.narrow}) + count({x}) = 0)"]
    if f.name == "Sum":
        out = [sum_of(x, f.arg_type, d)]
        return out + ([f"(count({x}) = 0)"] if f.buffers == 2 else [])
    if f.name == "Average":
        return [_average_sum(f, x, d), f"CAST(count({d}{x}) AS BIGINT)"]
    if f.name == "Count":
        return [f"CAST({_count(f)} AS BIGINT)"]
    if f.name in ("Min", "Max"):
        return [f"{f.name.lower()}({x})"]
    if f.name == "PivotFirst":
        return pivot_partial(f.args, f.pivot)
    if f.name in ("First", "Last"):
        return [_first_last(f), f"(count({x if f.ignore_nulls else '*'}){_where(f)} > 0)"]
    if f.name in ("StddevSamp", "StddevPop", "VarianceSamp", "VariancePop"):
        v = f"CAST({x} AS DOUBLE)"
        return [
            f"CAST(count({v}) AS DOUBLE)",
            f"avg({v})",
            f"coalesce(var_pop({v}) * count({v}), 0)",
        ]
    raise Unsupported(f"the aggregate function {f.name}")


def _where(f: _Function, *more: str) -> str:
    """`` FILTER (WHERE ..)`` of ``f``'s condition and ``more``, or nothing."""
    tests = [*more, *([f.condition] if f.condition else [])]
    return f" FILTER (WHERE {' AND '.join(tests)})" if tests else ""


def _first_last(f: _Function) -> str:
    """Spark's ``first``/``last`` of the rows (its FILTER's): the first or last row's
    value, null included unless ``ignoreNulls`` (DuckDB's ``first``/``last`` keep nulls,
    in the order the rows come, as Spark's do: which row is first is up to the input's
    order in both)."""
    x = f.args[0].text
    fn = "first" if f.name == "First" else "last"
    return f"{fn}({x}){_where(f, *([f'{x} IS NOT NULL'] if f.ignore_nulls else []))}"


def _count(f: _Function) -> str:
    if not f.args:
        return "count(*)"
    if f.distinct:
        if len(f.args) != 1:
            raise Unsupported("count(distinct) of several columns")
        return f"count(DISTINCT {f.args[0].text})"
    if len(f.args) == 1:
        return f"count({f.args[0].text})"
    test = " AND ".join(f"{a.text} IS NOT NULL" for a in f.args)
    return f"count(CASE WHEN {test} THEN 1 END)"


def _merge(f: _Function, b: list[str]) -> list[str]:
    """Buffers -> buffers."""
    if f.name == "Sum":
        if f.buffers == 2:  # a decimal: a null sum that is not empty overflowed
            overflowed = f"bool_or({b[0]} IS NULL AND NOT {b[1]})"
            return [_merged_sum(b[0], overflowed, sum_type(f.arg_type)), f"bool_and({b[1]})"]
        t = sum_type(f.arg_type)
        return [wrap_long(f"sum({b[0]})") if t.is_integral else f"CAST(sum({b[0]}) AS DOUBLE)"]
    if f.name == "Average":
        t = average_sum_type(f.arg_type)
        overflowed = f"bool_or({b[0]} IS NULL AND {b[1]} > 0)"
        total = _merged_sum(b[0], overflowed, t) if t.is_decimal else f"sum({b[0]})"
        return [total, f"CAST(sum({b[1]}) AS BIGINT)"]
    if f.name == "Count":
        return [f"CAST(coalesce(sum({b[0]}), 0) AS BIGINT)"]
    if f.name in ("Min", "Max"):
        return [f"{f.name.lower()}({b[0]})"]
    if f.name == "PivotFirst":
        return pivot_merge(b)
    if f.name in ("First", "Last"):
        fn = "first" if f.name == "First" else "last"
        return [f"{fn}({b[0]}) FILTER (WHERE {b[1]})", f"bool_or({b[1]})"]
    n, avg, m2 = b
    total = f"sum({n})"
    mean = f"(sum({n} * {avg}) / nullif({total}, 0))"
    weighted = f"sum({n} * {avg})"
    spread = (
        f"(sum({m2}) + sum({n} * {avg} * {avg}) - {weighted} * {weighted} / nullif({total}, 0))"
    )
    return [f"coalesce({total}, 0)", mean, f"coalesce({spread}, 0)"]


def _merged_sum(total: str, overflowed: str, t: SparkType) -> str:
    """The sum of decimal sums ``total`` (an overflow, ``overflowed``, stays null)."""
    return f"(CASE WHEN {overflowed} THEN NULL ELSE {fit_decimal(f'sum({total})', t)} END)"


def _average_sum(f: _Function, x: str, distinct: str) -> str:
    """The sum ``avg`` keeps: a decimal's as ``sum``'s (null on overflow), else a double."""
    if f.arg_type.is_decimal:
        return sum_of(x, f.arg_type, distinct)
    return f"CAST(sum({distinct}CAST({x} AS DOUBLE)) AS DOUBLE)"


def decimal_average(total: str, count: str, kind: SparkType) -> tuple[str, SparkType]:
    """Spark's ``avg`` of a decimal ``kind`` from its sum (``total``, of ``sum_type``) and
    ``count``: the sum over the count as decimal(20,0), then cast to (p + 4, s + 4)."""
    s = sum_type(kind)
    counted = decimal(20, 0)
    division = _result("/", s, counted)
    # the exact quotient only: the rows a 64-bit division would take, ``average`` takes
    quotient = _exact.divide(
        Sql(total, s), Sql(f"CAST({count} AS DECIMAL(20,0))", counted), division, small=False
    )
    out = _bounded(kind.precision + 4, kind.scale + 4)
    exact = f"TRY_CAST({quotient} AS {out.duck})"
    return _exact.average(Sql(total, s), count, division, out, exact), out


def _evaluate(f: _Function, b: list[str]) -> tuple[str, SparkType]:
    """Merged buffers (aggregate SQL) -> the result value and its type."""
    if f.name == "PivotFirst":
        return pivot_result(b, f.args[1].type)
    merged = _merge(f, b)
    if f.name == "Sum":
        return merged[0], sum_type(f.arg_type)
    if f.name == "Average":
        if f.arg_type.is_decimal:
            return decimal_average(merged[0], merged[1], f.arg_type)
        return f"(CAST({merged[0]} AS DOUBLE) / nullif({merged[1]}, 0))", DOUBLE
    if f.name == "Count":
        return merged[0], LONG
    if f.name in ("Min", "Max", "First", "Last"):
        return merged[0], f.arg_type
    n, _, m2 = merged
    if f.name == "StddevSamp":
        return f"(CASE WHEN {n} <= 1 THEN NULL ELSE sqrt({m2} / ({n} - 1)) END)", DOUBLE
    if f.name == "StddevPop":
        return f"(CASE WHEN {n} = 0 THEN NULL ELSE sqrt({m2} / {n}) END)", DOUBLE
    if f.name == "VarianceSamp":
        return f"(CASE WHEN {n} <= 1 THEN NULL ELSE {m2} / ({n} - 1) END)", DOUBLE
    return f"(CASE WHEN {n} = 0 THEN NULL ELSE {m2} / {n} END)", DOUBLE


def _complete(f: _Function) -> tuple[str, SparkType]:
    """Rows -> the result, in one step (via the buffers' formulas, inlined)."""
    if f.name == "Count":
        return f"CAST({_count(f)} AS BIGINT)", LONG
    x = f.args[0].text
    d = "DISTINCT " if f.distinct else ""
    if f.name == "Sum":
        return sum_of(x, f.arg_type, d), sum_type(f.arg_type)
    if f.name == "Average":
        if f.arg_type.is_decimal:
            total = sum_of(x, f.arg_type, d)
            return decimal_average(total, f"count({d}{x})", f.arg_type)
        return f"avg({d}CAST({x} AS DOUBLE))", DOUBLE
    if f.name in ("Min", "Max"):
        return f"{f.name.lower()}({x})", f.arg_type
    if f.name in ("First", "Last"):
        return _first_last(f), f.arg_type
    moment = {
        "StddevSamp": "stddev_samp",
        "StddevPop": "stddev_pop",
        "VarianceSamp": "var_samp",
        "VariancePop": "var_pop",
    }.get(f.name)
    if moment is None:
        raise Unsupported(f"the aggregate function {f.name}")
    return f"{moment}({d}CAST({x} AS DOUBLE))", DOUBLE


@register_operator(
    "HashAggregateExec",
    "ObjectHashAggregateExec",
    "SortAggregateExec",
    support="partial",
    note=(
        "sum, avg, count (distinct of one column too), min, max, first/last, stddev and "
        "variance (sample and population), with FILTER; PIVOT's PivotFirst over an "
        "integral, boolean or string pivot column; any other aggregate function, a "
        "final aggregate over buffers Spark laid out otherwise (try_sum's) and one "
        "mixing partial and final modes fall back"
    ),
)
def _aggregate(tr: Translator, node: Node, stage: Stage) -> Rel:
    node = _fused(node) or node
    child = tr.rel(node.child, stage)
    scope = child.scope(tr.subquery_of_stage)
    grouping = node.exprs("groupingExpressions")
    _group_items, group_columns = named_output(tr, grouping, child)
    group_refs = [
        compile_expression(g.child if g.cls == "Alias" else g, scope).text for g in grouping
    ]
    typing_scope = dataclasses.replace(scope, types_only=True)
    functions: list[_Function] = []
    aggregates = node.exprs("aggregateExpressions")
    for e in aggregates:
        fn = e.children[0]
        mode = e.object("mode")
        raw = mode in ("Partial", "Complete")
        args = [compile_expression(a, scope if raw else typing_scope) for a in fn.children]
        if fn.cls in ("First", "Last"):
            args = args[:1]
        if fn.cls == "Count" and all(a.text.startswith("CAST(1 ") for a in args):
            args = []
        condition = None
        if len(e.children) > 1 and raw:  # FILTER (WHERE ..), also Spark's several distincts'
            condition = compile_expression(e.children[1], scope).text
            if fn.cls not in ("First", "Last"):
                args = _filtered(args, condition)
                condition = None
        functions.append(
            _Function(
                fn.cls,
                mode,
                bool(e.get("isDistinct")),
                args,
                int(e.get("resultId", {}).get("id", -1)),
                args[0].type if args else LONG,
                fn.cls in ("First", "Last") and _ignores_nulls(fn),
                condition,
            )
        )
        if fn.cls == "PivotFirst":
            if len(e.children) > 1 or mode not in ("Partial", "Final"):
                raise Unsupported("a PivotFirst with FILTER, or in one step")
            buffers = node.exprs("resultExpressions")[len(grouping) :] if raw else []
            names = [_attr(r).name for r in buffers] or [
                c.name for c in child.columns[int(node.get("initialInputBufferOffset", 0) or 0) :]
            ]
            functions[-1].pivot = pivot_labels(names, len(functions) - 1, len(aggregates))
    offset = int(node.get("initialInputBufferOffset", 0) or 0)
    modes = {f.mode for f in functions}
    # the buffers an aggregate merges follow its input's grouping columns; one that reads
    # rows (``_fused``'s, or one Spark planned in ``Complete`` mode: Spark 4 does over a
    # sort-merge join already partitioned on the keys) merges none
    merges = bool(modes & {"Final", "PartialMerge"}) and not node.get(_FUSED)
    inputs = [c.ref for c in child.columns[offset:]] if merges else []
    results = node.exprs("resultExpressions")
    items = [f"{g} AS {c.ref}" for g, c in zip(group_refs, group_columns, strict=True)]
    partial = modes <= {"Partial", "PartialMerge"} and bool(functions)
    if partial or (not functions and _is_partial(node)):
        # rows or buffers -> buffers: output = grouping + buffers, named by resultExpressions
        out_columns = [_attr(r) for r in results]
        buffer_cols = out_columns[len(group_columns) :]
        position = 0
        values: list[str] = []
        rows = _arguments_once(functions, child.sql)
        for f in functions:
            if f.mode == "Partial":
                values += _partial(f)
            else:
                values += _merge(f, inputs[position : position + f.buffers])
                position += f.buffers
        if position and position != len(inputs):
            raise Unsupported(_SPARK_BUFFERS)
        if len(values) != len(buffer_cols):
            raise Unsupported("an aggregate whose buffers the engine does not lay out as Spark")
        items += [f"{v} AS {c.ref}" for v, c in zip(values, buffer_cols, strict=True)]
        group_by = f" GROUP BY {', '.join(group_refs)}" if group_refs else ""
        select = ", ".join(items) or EMPTY_SELECT
        return Rel(f"SELECT {select} FROM ({rows}) AS t{group_by}", out_columns)
    if "Partial" in modes or "PartialMerge" in modes:
        raise Unsupported("an aggregate mixing partial and final modes")
    position = 0
    agg_columns: list[Column] = []
    # the results are named as ``aggregateAttributes`` (what ``resultExpressions`` read;
    # a distinct aggregate's ``resultId`` differs)
    attributes = node.exprs("aggregateAttributes")
    if len(attributes) == len(functions):
        for f, a in zip(functions, attributes, strict=True):
            f.result_id = int(a.get("exprId", {}).get("id", f.result_id))
    final_buffers = sum(f.buffers for f in functions if f.mode == "Final")
    if final_buffers != len(inputs):
        raise Unsupported(_SPARK_BUFFERS)
    rows = _arguments_once(functions, child.sql)
    for f in functions:
        if f.mode == "Final":
            value, kind = _evaluate(f, inputs[position : position + f.buffers])
            position += f.buffers
        else:
            value, kind = _complete(f)
        col = Column(f.result_id, f"agg{f.result_id}", kind)
        agg_columns.append(col)
        items.append(f"{value} AS {col.ref}")
    group_by = f" GROUP BY {', '.join(group_refs)}" if group_refs else ""
    select = ", ".join(items) or EMPTY_SELECT
    if not functions and not group_refs:
        raise Unsupported("an aggregate with neither keys nor functions")
    inner = Rel(f"SELECT {select} FROM ({rows}) AS t{group_by}", group_columns + agg_columns)
    pivots = any(f.name == "PivotFirst" for f in functions)
    out_items, out_columns = (pivot_output if pivots else named_output)(tr, results, inner)
    return Rel(f"SELECT {out_items} FROM ({inner.sql}) AS t", out_columns)


#: a field of an aggregate ``_fused`` made: it reads rows, no buffers
_FUSED = "_fused_partial"
#: what Spark's plan may put between a final aggregate and its partial in one stage
_WRAPPERS = frozenset({"WholeStageCodegenExec", "InputAdapter"})
#: functions whose ``Complete`` form is their ``Partial`` then ``Final`` forms in one step
_FUSABLE = frozenset({"Sum", "Average", "Count", "Min", "Max", "First", "Last"})
_COMPLETE = {"object": "org.apache.spark.sql.catalyst.expressions.aggregate.Complete$"}


def _fused(node: Node) -> Node | None:
    """``node``, a final aggregate straight over its partial aggregate in the same stage
    (Spark put no exchange between them: the rows were partitioned on the keys
    already, as above a join on them), as one aggregate in ``Complete`` mode over the
    partial's input; ``None`` if it is not that.

    Spark computes per-task buffers and then merges them; in one stage the merge
    meets one buffer per group, and a second ``GROUP BY`` over the buffers (casting
    each decimal sum to its type on the way) was 40% of TPC-H Q3's join stage.  The
    result is the same by Spark's own contract (``Complete`` is ``Partial`` then
    ``Final``).  Only the plain layout is fused: every function partial below and
    final above, none distinct, each among ``_FUSABLE`` and with the buffers the
    engine lays out (``try_sum``'s extra buffer is not), the final's keys the
    partial's."""
    partial = node.child if len(node.children) == 1 else None
    while partial is not None and partial.cls in _WRAPPERS and len(partial.children) == 1:
        partial = partial.child
    if partial is None or partial.cls != node.cls or len(partial.children) != 1:
        return None
    finals, partials = node.exprs("aggregateExpressions"), partial.exprs("aggregateExpressions")
    if len(finals) != len(partials):
        return None
    for f, p in zip(finals, partials, strict=True):
        if f.object("mode") != "Final" or p.object("mode") != "Partial":
            return None
        if f.get("isDistinct") or p.get("isDistinct") or not f.children or not p.children:
            return None
        if f.children[0].cls != p.children[0].cls or p.children[0].cls not in _FUSABLE:
            return None
    grouping = partial.exprs("groupingExpressions")
    keys = [g.expr_id for g in node.exprs("groupingExpressions")]
    results = partial.exprs("resultExpressions")
    outputs = [r.expr_id for r in results[: len(keys)]]
    if keys != [g.expr_id for g in grouping] or keys != outputs:
        return None
    if int(node.get("initialInputBufferOffset", 0) or 0) != len(keys):
        return None
    if not _spark_buffers(partials, results[len(keys) :]):
        return None
    raw = [copy.deepcopy(e) for e in partial.get("aggregateExpressions") or []]
    for e in raw:
        e[0]["mode"] = dict(_COMPLETE)
    fields = {
        **node.fields,
        "groupingExpressions": partial.get("groupingExpressions"),
        "aggregateExpressions": raw,
        "initialInputBufferOffset": 0,
        _FUSED: True,
    }
    return Node(node.cls, fields, list(partial.children), node.op_id)


def _spark_buffers(partials: list[Node], buffers: list[Node]) -> bool:
    """Whether ``buffers`` (a partial aggregate's buffer attributes) are laid out as the
    engine lays out ``partials``' (``_buffer_count``; ``try_sum`` of a long keeps one
    more).  A sum's first buffer has its type, which says whether it sums decimals."""
    at = 0
    for e in partials:
        if at >= len(buffers):
            return False
        decimal_sum = column_type(buffers[at].get("dataType")).is_decimal
        at += _buffer_count(e.children[0].cls, decimal_sum)
    return at == len(buffers)


#: an argument that is a column already (nothing to compute once)
_COLUMN = re.compile(r"^c\d+$")
#: the functions whose partial form reads their argument twice (the sum, and the count
#: that tells an empty group from an overflow or the average's divisor)
_READ_TWICE = ("Sum", "Average")


def _arguments_once(functions: list[_Function], rows: str) -> str:
    """``rows`` with the computed argument of each partial ``sum``/``avg`` as a column of
    its own, the functions changed to read it: their partial form reads the argument
    twice, and DuckDB computes an expression repeated in two aggregates twice (a
    decimal product with its 64-bit attempt and 128-bit fallback, per row)."""
    extra: list[str] = []
    narrow: list[str] = []
    for i, f in enumerate(functions):
        once = f.mode == "Partial" or (f.mode == "Complete" and not f.distinct)
        if not once or f.name not in _READ_TWICE or len(f.args) != 1:
            continue
        arg = f.args[0]
        if _COLUMN.match(arg.text):
            continue
        name = f"a{i}_"
        if _sums_narrow(f, arg):
            # the 64-bit value where it fits, the exact one only where it does not: a
            # 128-bit decimal per row costs DuckDB its 64-bit sum (TPC-H Q1's scan stage
            # on one thread: 0.38 s with its two products of prices cast to 32 and 38
            # digits per row, 0.23 s summed in two parts)
            f.narrow = f"{name}n"
            narrow.append(f"{arg.narrow} AS {f.narrow}")
            extra.append(f"(CASE WHEN {f.narrow} IS NULL THEN {arg.text} END) AS {name}")
        else:
            extra.append(f"{arg.text} AS {name}")
        f.args = [dataclasses.replace(arg, text=name, narrow=None)]
    if not extra:
        return rows
    if narrow:
        rows = f"SELECT *, {', '.join(narrow)} FROM ({rows}) AS t"
    return f"SELECT *, {', '.join(extra)} FROM ({rows}) AS t"


def _sum_of_parts(narrow: str, rest: str, t: SparkType) -> str:
    """Spark's ``sum`` of a decimal ``t`` whose values are split in two columns
    (``_sums_narrow``): ``narrow`` (64 bits) and ``rest``, each null where the other
    holds the value.  Either part alone is the sum.  With both, their total is exact
    where it fits 38 digits (DuckDB's ``+`` raises past them, and ``TRY`` may not hold an
    aggregate): a total whose ``double`` is past the largest decimal of 38 digits by
    more than rounding is an overflow, null as in Spark, and one within a hair of it
    makes the query fail, never a wrong sum.  ``fit_decimal`` then bounds it as
    ``sum_of`` does."""
    largest = float(10 ** (38 - t.scale)) * (1 + 1e-12)
    doubles = f"CAST(sum({narrow}) AS DOUBLE) + CAST(sum({rest}) AS DOUBLE)"
    total = (
        f"(CASE WHEN count({rest}) = 0 THEN sum({narrow}) WHEN count({narrow}) = 0 "
        f"THEN sum({rest}) WHEN abs({doubles}) <= {largest!r} "
        f"THEN sum({narrow}) + sum({rest}) END)"
    )
    return fit_decimal(total, sum_type(t))


def _sums_narrow(f: _Function, arg: Sql) -> bool:
    """Whether a partial ``sum`` adds its decimal argument in two parts: the values that
    fit 64 bits (``Sql.narrow``) and the others.  Each part is an exact sum, as Spark's
    is, and so is their total (at the argument's scale, which ``sum_type`` keeps)."""
    partial = f.name == "Sum" and f.mode == "Partial" and not f.distinct
    return partial and arg.narrow is not None and arg.type.is_decimal


def _ignores_nulls(fn: Node) -> bool:
    """``first``/``last`` with ``ignoreNulls`` (a field, or a literal child)."""
    if fn.get("ignoreNulls") is True or str(fn.get("ignoreNulls")).lower() == "true":
        return True
    flag = fn.children[1] if len(fn.children) > 1 else None
    return flag is not None and str(flag.get("value")).lower() == "true"


def _filtered(args: list[Sql], condition: str) -> list[Sql]:
    """The arguments of an aggregate that skips nulls, null where ``condition`` is not
    true: the aggregate of the rows its FILTER clause keeps."""
    if not args:  # count(*)
        return [Sql(f"(CASE WHEN {condition} THEN 1 END)", LONG)]
    return [Sql(f"(CASE WHEN {condition} THEN {a.text} END)", a.type) for a in args]


def _is_partial(node: Node) -> bool:
    """An aggregate with no functions (a DISTINCT): partial if its output is its keys and
    Spark still requires a distribution of its child (the final one has none listed)."""
    return bool(node.get("requiredChildDistributionExpressions") is None)


def _attr(node: Node) -> Column:
    from hybrid_shuffle.sparkplan.operators.basic import _attribute

    if node.cls == "Alias":
        raise Unsupported("a partial aggregate computing an expression")
    return _attribute(node)
