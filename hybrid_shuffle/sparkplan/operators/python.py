"""Spark's operators that run Python: one more step of the engine's task, never Spark.

- ``BatchEvalPythonExec`` (``@udf``) and ``ArrowEvalPythonExec`` (``@pandas_udf``,
  Arrow-optimized ``@udf``, iterator pandas UDFs): the stage below computes the
  functions' arguments, the step appends their results (``PythonEval``,
  ``PythonMapIter``), the stage above reads them;
- ``MapInPandasExec``, ``PythonMapInArrowExec``: one call per subtask
  (``PythonMapIter``);
- ``FlatMapGroupsInPandasExec`` (``applyInPandas``), ``AggregateInPandasExec``
  (grouped-aggregate pandas UDFs), ``FlatMapCoGroupsInPandasExec`` and
  ``WindowInPandasExec`` over an unordered, unbounded window: per group
  (``PythonGroupedMap``, ``PythonGroupedAgg``, ``PythonCoGroupedMap``,
  ``PythonWindowAgg``) after the hash exchange Spark planned, an ordinary
  ``exchange_<id>`` edge.

The function is the one Spark serialized into its plan (``PythonFunction.command``,
read from the JVM), loaded in the executors by PySpark's own worker code
(``operators.python.function``).  A function falls back to Spark, with its
subtree, where that cannot hold: another PySpark than 3.5, a function the
executors cannot unpickle (a module they lack: ``ray.runtime_env``), a barrier
``mapInPandas``, a row-at-a-time ``@udf`` over or returning a struct, a pandas UDF
over an ordered or bounded window.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from hybrid_shuffle.errors import WaitTimeoutError, summary
from hybrid_shuffle.operators.python.function import (
    EvalType,
    PythonCall,
    PythonUdf,
    supported_pyspark,
)
from hybrid_shuffle.operators.python.grouped import (
    GroupSide,
    PythonCoGroupedMap,
    PythonGroupedAgg,
    PythonGroupedMap,
    PythonWindowAgg,
)
from hybrid_shuffle.operators.python.groups import groupable
from hybrid_shuffle.operators.python.iterator import PythonMapIter
from hybrid_shuffle.operators.python.scalar import PythonEval
from hybrid_shuffle.operators.python.values import supported_type
from hybrid_shuffle.shuffle.routing import PartitionerKind
from hybrid_shuffle.sparkplan.expressions import Unsupported, compile_expression
from hybrid_shuffle.sparkplan.operators.basic import named_output
from hybrid_shuffle.sparkplan.operators.registry import register_operator
from hybrid_shuffle.sparkplan.physical import PYTHON_CALLS, python_commands
from hybrid_shuffle.sparkplan.relation import Column, Rel
from hybrid_shuffle.sparkplan.stage import Stage
from hybrid_shuffle.sparkplan.tree import Node
from hybrid_shuffle.sparkplan.types import SparkType, column_type

if TYPE_CHECKING:
    from hybrid_shuffle.operators.base import Operator
    from hybrid_shuffle.sparkplan.translate import Translator

__all__: list[str] = []

#: ids of the argument columns a stage computes for a step (``c<id>``), apart from
#: Spark's attribute ids
_ARGUMENT_IDS = 1 << 40
#: the seconds an executor has to say whether it can load a plan's functions
_LOAD_CHECK_TIMEOUT = 60.0


@dataclass
class _Function:
    """One Python function of the plan: the JSON expression of its innermost call
    (whose children are its arguments) and what ``PythonUdf`` needs."""

    name: str
    commands: tuple[bytes, ...]
    arguments: list[Node]
    return_type: Any  # pyspark.sql.types.DataType


def _functions(tr: Translator, node: Node, calls: list[Node], field: str) -> list[_Function]:
    """The functions operator ``node`` calls: ``calls`` (their JSON expressions) and what
    Spark serialized of them in its JVM field ``field`` (``physical.python_commands``)."""
    reason = supported_pyspark()
    if reason is not None:
        raise Unsupported(reason)
    from pyspark.sql.types import _parse_datatype_json_value

    out: list[_Function] = []
    commands = python_commands(tr.plan, node, field, tr.spark)
    for call, chain in zip(calls, commands, strict=True):
        innermost = call
        while len(innermost.children) == 1 and innermost.children[0].cls in PYTHON_CALLS:
            innermost = innermost.children[0]
        return_type = _parse_datatype_json_value(call.get("dataType"))
        out.append(_Function(_loaded_name(chain), chain, list(innermost.children), return_type))
    _check_loadable(tr, [c for f in out for c in f.commands])
    return out


def _loaded_name(commands: tuple[bytes, ...]) -> str:
    """The outer function's ``__qualname__``; ``Unsupported`` if the driver cannot load it
    (a function larger than Spark's broadcast threshold is shipped as a broadcast)."""
    try:
        func = pickle.loads(commands[-1])[0]
    except Exception as e:
        raise Unsupported(
            f"its Python function cannot be loaded outside Spark ({type(e).__name__}: {summary(e)})"
        ) from e
    return str(getattr(func, "__qualname__", getattr(func, "__name__", repr(func))))


def _check_loadable(tr: Translator, commands: list[bytes]) -> None:
    """``Unsupported`` if an executor cannot unpickle the functions (a module it lacks)."""
    cluster = tr.job.cluster
    executors = cluster.pool.executors[:1]
    if not executors:
        return
    try:
        [error] = cluster.transport.call_all(
            executors, "python_loads", _LOAD_CHECK_TIMEOUT, commands
        )
    except WaitTimeoutError as e:
        raise Unsupported(f"no executor said whether it can load the Python function ({e})") from e
    if error is not None:
        raise Unsupported(
            f"the executors cannot load its Python function ({error}); ship what it imports "
            "with ray.runtime_env"
        )


def _call(
    tr: Translator, eval_type: int, functions: list[_Function], offsets: list[list[int]]
) -> PythonCall:
    conf = tr.spark.conf
    runner = (
        ("spark.sql.session.timeZone", str(conf.get("spark.sql.session.timeZone"))),
        (
            "spark.sql.legacy.execution.pandas.groupedMap.assignColumnsByName",
            str(
                conf.get("spark.sql.legacy.execution.pandas.groupedMap.assignColumnsByName", "true")
            ),
        ),
        (
            "spark.sql.execution.pandas.convertToArrowArraySafely",
            str(conf.get("spark.sql.execution.pandas.convertToArrowArraySafely", "false")),
        ),
    )
    batch = int(conf.get("spark.sql.execution.arrow.maxRecordsPerBatch", "10000"))
    udfs = tuple(
        PythonUdf(f.name, f.commands, tuple(o)) for f, o in zip(functions, offsets, strict=True)
    )
    return PythonCall(eval_type, udfs, runner, batch if batch > 0 else 1 << 31)


def _arrow(data_type: Any) -> pa.DataType:
    from pyspark.sql.pandas.types import to_arrow_type

    return to_arrow_type(data_type)


def _named(tr: Translator, node: Node) -> str:
    return f"python_{tr.plan.shown_id(node.op_id or -1)}"


def _step(
    tr: Translator,
    node: Node,
    stage: Stage,
    inputs: list[tuple[Any, Any]],
    operator: Operator,
    columns: list[Column],
) -> Rel:
    """The step as a node of the job, read by ``stage`` (the one above) as its input."""
    from hybrid_shuffle.api.stream import Stream

    job_node = tr.job._node("spark", _named(tr, node), operator, inputs)
    return stage.read(Stream(tr.job, job_node), None, columns)


def _below(tr: Translator, node: Node, stage: Stage, child: Rel, items: list[str] | None) -> Any:
    """The stage under the step, ended: ``child``, or ``items`` (SQL select items) over it
    when the step needs computed columns; its stream."""
    if items is not None:
        child = Rel(f"SELECT {', '.join(items)} FROM ({child.sql}) AS t", child.columns)
    return tr.finish(stage, child, node, f"{_named(tr, node)}_input", final=False)


def _computed(child: Rel, extra: list[tuple[str, str]]) -> list[str]:
    """``child``'s columns and the ``extra`` (SQL, name) columns, as select items."""
    return [c.ref for c in child.columns] + [f"{sql} AS {name}" for sql, name in extra]


def _arguments(
    tr: Translator, child: Rel, functions: list[_Function]
) -> tuple[list[tuple[str, str]], list[str], list[str], list[list[int]]]:
    """The functions' argument expressions as computed columns of the stage below (one
    per distinct expression, as Spark dedups them), their Spark types as JSON, and each
    function's offsets into them."""
    scope = child.scope(tr.subquery_of_stage)
    texts: list[str] = []
    types: list[str] = []
    offsets: list[list[int]] = []
    for function in functions:
        mine: list[int] = []
        for argument in function.arguments:
            sql = compile_expression(argument, scope)
            text = (
                f"CAST({sql.text} AS {sql.type.duck})"
                if argument.cls != "AttributeReference"
                else sql.text
            )
            if text not in texts:
                texts.append(text)
                types.append(_type_json(sql.type))
            mine.append(texts.index(text))
        offsets.append(mine)
    extra = [(text, f"c{_ARGUMENT_IDS + i}") for i, text in enumerate(texts)]
    return extra, [name for _, name in extra], types, offsets


def _type_json(spark_type: SparkType) -> str:
    """A computed argument's type as Spark's JSON (what PySpark's types parse)."""
    if spark_type.element is not None:
        element = json.loads(_type_json(spark_type.element))
        return json.dumps({"type": "array", "elementType": element, "containsNull": True})
    return json.dumps(spark_type.name)


@register_operator(
    "ArrowEvalPythonExec",
    "BatchEvalPythonExec",
    support="partial",
    note=(
        "in the engine's tasks with PySpark 3.5; a row-at-a-time @udf over or returning a "
        "struct, and any UDF on another PySpark, run in Spark"
    ),
)
def _eval(tr: Translator, node: Node, stage: Stage) -> Rel:
    eval_type = int(node.get("evalType", EvalType.BATCHED))
    if eval_type not in (
        EvalType.BATCHED,
        EvalType.ARROW_BATCHED,
        EvalType.SCALAR_PANDAS,
        EvalType.SCALAR_PANDAS_ITER,
    ):
        raise Unsupported(f"a Python UDF of eval type {eval_type}")
    functions = _functions(tr, node, node.exprs("udfs"), "udfs")
    results = _attributes(node.exprs("resultAttrs"), nullable=True)
    if eval_type == EvalType.BATCHED:
        for function in functions:
            if not supported_type(function.return_type):
                raise Unsupported(f"a @udf returning {function.return_type.simpleString()}")
    stage_below = Stage(tr.job)
    child = tr.rel(node.child, stage_below)
    extra, args, types, offsets = _arguments(tr, child, functions)
    if eval_type == EvalType.BATCHED:
        from pyspark.sql.types import _parse_datatype_json_string

        for text in types:
            try:
                known = supported_type(_parse_datatype_json_string(text))
            except Exception:  # a type PySpark does not parse from its name alone (a struct)
                known = False
            if not known:
                raise Unsupported(f"a @udf over a {json.loads(text)} argument")
    below = _below(tr, node, stage_below, child, _computed(child, extra))
    call = _call(tr, eval_type, functions, offsets)
    outputs = [(c.ref, _arrow(f.return_type)) for c, f in zip(results, functions, strict=True)]
    keep = [c.ref for c in child.columns]
    operator: Operator
    if eval_type == EvalType.SCALAR_PANDAS_ITER:
        operator = PythonMapIter(
            call, _named(tr, node), [(a, f"_{i}") for i, a in enumerate(args)], outputs, keep
        )
    else:
        operator = PythonEval(call, _named(tr, node), keep, args, types, outputs)
    return _step(tr, node, stage, [(below.node, None)], operator, [*child.columns, *results])


def _attributes(nodes: list[Node], nullable: bool | None = None) -> list[Column]:
    """The columns of attribute expressions (``nullable`` overriding theirs if given)."""
    return [
        Column(
            a.expr_id,
            str(a.get("name")),
            column_type(a.get("dataType")),
            bool(a.get("nullable", True)) if nullable is None else nullable,
        )
        for a in nodes
    ]


def _struct_outputs(function: _Function, columns: list[Column]) -> list[tuple[str, pa.DataType]]:
    """The step's output columns from the function's declared struct (its fields' Arrow
    types, named after the plan's output attributes)."""
    arrow = _arrow(function.return_type)
    if not pa.types.is_struct(arrow) or arrow.num_fields != len(columns):
        raise Unsupported("a Python function whose declared schema is not its output")
    if not columns:
        raise Unsupported("a Python function returning no column")
    return [(c.ref, arrow.field(i).type) for i, c in enumerate(columns)]


@register_operator(
    "MapInPandasExec",
    "PythonMapInArrowExec",
    "MapInArrowExec",
    support="partial",
    note="in the engine's tasks with PySpark 3.5; barrier mode runs in Spark",
)
def _map(tr: Translator, node: Node, stage: Stage) -> Rel:
    if node.get("isBarrier", False):
        raise Unsupported("a barrier mapInPandas/mapInArrow (Spark's gang scheduling)")
    func = node.expr("func")
    assert func is not None
    eval_type = int(func.get("evalType", EvalType.MAP_PANDAS_ITER))
    [function] = _functions(tr, node, [func], "func")
    below = Stage(tr.job)
    child = tr.rel(node.child, below)
    stream = _below(tr, node, below, child, None)
    columns = _attributes(node.exprs("output"))
    outputs = _struct_outputs(function, columns)
    call = _call(tr, eval_type, [function], [[0]])
    operator = PythonMapIter(
        call, _named(tr, node), [(c.ref, c.name) for c in child.columns], outputs
    )
    return _step(tr, node, stage, [(stream.node, None)], operator, columns)


def _key_columns(columns: list[Column], keys: list[Node]) -> list[tuple[str, str]]:
    """Grouping attributes ``keys`` as the first of ``columns`` that holds each (its ref,
    Spark's name); ``Unsupported`` for a key that is no such column or cannot be grouped
    here (``groups.groupable``)."""
    by_id: dict[int, Column] = {}
    for column in columns:
        by_id.setdefault(column.id, column)
    out: list[tuple[str, str]] = []
    for key in keys:
        found = by_id.get(key.expr_id)
        if key.cls != "AttributeReference" or found is None:
            raise Unsupported("a Python function grouped by an expression, not a column")
        if found.type.opaque or not groupable(found.type.arrow):
            raise Unsupported(f"a Python function grouped by a {found.type} key")
        out.append((found.ref, found.name))
    return out


def _side(child: Rel, grouping: list[Node]) -> GroupSide:
    """A grouped input's keys (the grouping attributes, its leading columns) and values
    (the rest of its columns after them: Spark's ``dataAttributes``)."""
    keys = _key_columns(child.columns[: len(grouping)], grouping)
    values = [(c.ref, c.name) for c in child.columns[len(grouping) :]]
    return GroupSide(keys, values)


@register_operator(
    "FlatMapGroupsInPandasExec",
    support="partial",
    note="in the engine's tasks with PySpark 3.5, after Spark's hash exchange",
)
def _grouped_map(tr: Translator, node: Node, stage: Stage) -> Rel:
    func = node.expr("func")
    assert func is not None
    [function] = _functions(tr, node, [func], "func")
    below = Stage(tr.job)
    child = tr.rel(node.child, below)
    side = _side(child, node.exprs("groupingAttributes"))
    stream = _below(tr, node, below, child, None)
    columns = _attributes(node.exprs("output"))
    outputs = _struct_outputs(function, columns)
    call = _call(tr, EvalType.GROUPED_MAP_PANDAS, [function], [side.offsets()])
    operator = PythonGroupedMap(call, _named(tr, node), side, outputs)
    return _step(tr, node, stage, [(stream.node, None)], operator, columns)


@register_operator(
    "FlatMapCoGroupsInPandasExec",
    support="partial",
    note=(
        "in the engine's tasks with PySpark 3.5 where both sides come straight from Spark's "
        "hash exchanges on keys of one type"
    ),
)
def _cogrouped_map(tr: Translator, node: Node, stage: Stage) -> Rel:
    func = node.expr("func")
    assert func is not None
    [function] = _functions(tr, node, [func], "func")
    sides: list[GroupSide] = []
    inputs: list[tuple[Any, Any]] = []
    key_types: list[list[pa.DataType]] = []
    schemas: list[pa.Schema] = []
    for child_node, group in ((node.children[0], "leftGroup"), (node.children[1], "rightGroup")):
        side_stage = Stage(tr.job)
        rel = tr.rel(child_node, side_stage)
        exchange = side_stage.inputs[0] if len(side_stage.inputs) == 1 else None
        plain = (
            exchange is not None
            and rel.sql == f"SELECT {', '.join(c.ref for c in rel.columns)} FROM {exchange.token}"
        )
        if (
            exchange is None
            or exchange.spec is None
            or exchange.spec.partitioner.kind is not PartitionerKind.HASH
            or not plain
        ):
            raise Unsupported("a cogroup side that Spark did not hash-exchange on its keys")
        side = _side(rel, node.exprs(group))
        by_ref = {c.ref: c for c in rel.columns}
        key_types.append([by_ref[k].type.arrow for k, _ in side.keys])
        schemas.append(pa.schema([(c, by_ref[c].type.arrow) for c in dict.fromkeys(side.columns)]))
        sides.append(side)
        inputs.append((exchange.stream.node, exchange.spec))
    if key_types[0] != key_types[1]:
        raise Unsupported("a cogroup on keys of different types on its two sides")
    columns = _attributes(node.exprs("output"))
    outputs = _struct_outputs(function, columns)
    call = _call(
        tr, EvalType.COGROUPED_MAP_PANDAS, [function], [sides[0].offsets() + sides[1].offsets()]
    )
    operator = PythonCoGroupedMap(
        call,
        _named(tr, node),
        (sides[0], sides[1]),
        outputs,
        key_types[0],
        (schemas[0], schemas[1]),
    )
    return _step(tr, node, stage, inputs, operator, columns)


@register_operator(
    "AggregateInPandasExec",
    support="partial",
    note="in the engine's tasks with PySpark 3.5, after Spark's hash exchange",
)
def _grouped_agg(tr: Translator, node: Node, stage: Stage) -> Rel:
    if node.get("aggExpressions") is not None:  # 3.5.2 on: PythonUDAFs in AggregateExpressions
        wrappers = node.exprs("aggExpressions")
        udf_nodes, field = [w.children[0] for w in wrappers], "aggExpressions"
        result_ids = [w.get("resultId", {}) for w in wrappers]
    else:
        udf_nodes, field = node.exprs("udfExpressions"), "udfExpressions"
        result_ids = [u.get("resultId", {}) for u in udf_nodes]
    functions = _functions(tr, node, udf_nodes, field)
    below = Stage(tr.job)
    child = tr.rel(node.child, below)
    scope = child.scope(tr.subquery_of_stage)
    grouping: list[Column] = []
    key_items: list[str] = []
    for expression in node.exprs("groupingExpressions"):
        exprid = expression.expr_id
        source = expression.child if expression.cls == "Alias" else expression
        sql = compile_expression(source, scope)
        column = Column(exprid, str(expression.get("name")), sql.type, sql.nullable)
        if column.type.opaque or not groupable(column.type.arrow):
            raise Unsupported(f"grouping a Python aggregate by a {column.type} key")
        grouping.append(column)
        key_items.append(f"CAST({sql.text} AS {sql.type.duck}) AS {column.ref}")
    extra, args, _, offsets = _arguments(tr, child, functions)
    items = key_items + [f"{sql} AS {name}" for sql, name in extra]
    if not items:
        raise Unsupported("a Python aggregate of no argument and no grouping key")
    stream = _below(tr, node, below, child, items)
    side = GroupSide(
        [(c.ref, c.name) for c in grouping], [(a, f"_{i}") for i, a in enumerate(args)]
    )
    results = [
        Column(int(r.get("id", -1)), str(u.get("name")), column_type(u.get("dataType")), True)
        for r, u in zip(result_ids, udf_nodes, strict=True)
    ]
    outputs = [(c.ref, c.type.arrow) for c in grouping] + [
        (c.ref, _arrow(f.return_type)) for c, f in zip(results, functions, strict=True)
    ]
    call = _call(tr, EvalType.GROUPED_AGG_PANDAS, functions, offsets)
    operator = PythonGroupedAgg(call, _named(tr, node), side, outputs)
    aggregated = _step(tr, node, stage, [(stream.node, None)], operator, [*grouping, *results])
    items_out, columns = named_output(tr, node.exprs("resultExpressions"), aggregated)
    return Rel(f"SELECT {items_out} FROM ({aggregated.sql}) AS t", columns)


@register_operator(
    "WindowInPandasExec",
    support="partial",
    note=(
        "in the engine's tasks with PySpark 3.5: grouped-aggregate pandas UDFs over a "
        "window with no order and an unbounded frame; bounded or ordered windows run in Spark"
    ),
)
def _window(tr: Translator, node: Node, stage: Stage) -> Rel:
    calls: list[Node] = []
    results: list[Column] = []
    for alias in node.exprs("windowExpression"):
        window = alias.child if alias.cls == "Alias" else alias
        if window.cls != "WindowExpression" or len(window.children) != 2:
            raise Unsupported(f"a window expression {window.cls}")
        function, spec = window.children
        if function.cls == "AggregateExpression":
            function = function.children[0]
        if function.cls not in PYTHON_CALLS:
            raise Unsupported(f"the window function {function.cls} beside a Python UDF")
        if not _unbounded(spec):
            raise Unsupported("a pandas UDF over a window with an order or a bounded frame")
        calls.append(function)
        exprid = alias.expr_id
        results.append(
            Column(exprid, str(alias.get("name")), column_type(function.get("dataType")))
        )
    functions = _functions(tr, node, calls, "windowExpression")
    below = Stage(tr.job)
    child = tr.rel(node.child, below)
    keys = _key_columns(child.columns, node.exprs("partitionSpec"))
    extra, args, _, offsets = _arguments(tr, child, functions)
    stream = _below(tr, node, below, child, _computed(child, extra))
    call = _call(tr, EvalType.GROUPED_AGG_PANDAS, functions, offsets)
    groups = GroupSide(keys, [(a, f"_{i}") for i, a in enumerate(args)])
    outputs = [(c.ref, _arrow(f.return_type)) for c, f in zip(results, functions, strict=True)]
    keep = [c.ref for c in child.columns]
    operator = PythonWindowAgg(call, _named(tr, node), groups, keep, outputs)
    return _step(tr, node, stage, [(stream.node, None)], operator, [*child.columns, *results])


def _unbounded(spec: Node) -> bool:
    """A window spec with no order whose frame spans the whole partition."""
    if spec.cls != "WindowSpecDefinition" or spec.get("orderSpec"):
        return False
    frames = [n for n in spec.walk() if n.cls == "SpecifiedWindowFrame"]
    if len(frames) != 1 or len(frames[0].children) != 2:
        return False
    lower, upper = frames[0].children
    return lower.cls.startswith("UnboundedPreceding") and upper.cls.startswith("UnboundedFollowing")
