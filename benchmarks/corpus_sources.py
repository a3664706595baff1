"""Where the Spark corpus (``benchmarks.spark_corpus``) gets its queries: generated at
run time from what is installed, so the repository holds no copied text of others.

* ``function_examples(spark)``: every built-in function's documented examples, the
  ``> SELECT ...;`` lines of its ``ExpressionInfo`` in the running Spark's
  ``FunctionRegistry`` (what ``DESCRIBE FUNCTION EXTENDED`` prints): mostly constant
  ``SELECT``s without ``FROM``.
* ``function_examples(spark, unfolded=True)``: the same with Spark's constant folding
  off (``UNFOLDED``), so that the engine evaluates each function itself.
* ``docstring_cases(spark)``: the doctest examples of the installed PySpark's
  ``pyspark.sql.functions``, ``DataFrame``, ``Column``, ``GroupedData``, ``Window`` and
  the ``na``/``stat`` helpers, executed statement by statement as doctest would (in a
  copy of the module's globals with ``spark``); an example whose expression is a
  DataFrame, or a DataFrame followed by an action (``.show()``, ``.collect()``, ...),
  is a case (the DataFrame, before its action).  Statements that write files, create
  tables, define UDFs or touch the RDD API are not run (``UNSAFE``); a
  ``spark.conf.set`` an example makes is undone after its docstring.
* ``benchmarks.corpus_own``: queries of our own over small views.

``skip_reason(text)`` is the skip rule on a case's text (``SKIP_RULES``): queries whose
answer depends on when or where they run; a nondeterministic plan is found from
Spark's own analysis by the runner.
"""

from __future__ import annotations

import doctest
import inspect
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "SKIP_RULES",
    "UNFOLDED",
    "Case",
    "docstring_cases",
    "function_examples",
    "restore_conf",
    "skip_reason",
]


@dataclass
class Case:
    """One query of the corpus: SQL text (run with ``session.sql``) or a DataFrame (run
    with ``session.from_dataframe``), named by where it came from."""

    name: str
    source: str
    text: str
    sql: str | None = None
    df: Any = field(default=None, repr=False)
    #: Spark settings in force while the case runs (both in Spark and in the engine)
    conf: dict[str, str] = field(default_factory=dict)


#: constant folding off: Spark's optimiser would otherwise fold a constant SELECT into
#: literals before the engine sees it, so the engine's own translation of each function
#: is only tried with these rules excluded (the "fnx" cases)
UNFOLDED = {
    "spark.sql.optimizer.excludedRules": "org.apache.spark.sql.catalyst.optimizer.ConstantFolding,"
    "org.apache.spark.sql.catalyst.optimizer.NullPropagation"
}


#: (rule name, pattern on the lower-cased text): a case that matches is skipped
SKIP_RULES: tuple[tuple[str, str], ...] = (
    ("not a query (DDL, DML, SET, SHOW, ...)", r"^\s*(?!select|with|values|from|table|\()"),
    (
        "depends on the time it runs",
        r"\b(current_timestamp|current_date|curdate|now|localtimestamp|current_time)\b"
        r"|\bunix_timestamp\(\s*\)",
    ),
    ("calls Java by reflection", r"\b(reflect|java_method|try_reflect)\s*\("),
    ("random initialisation vector", r"^(?!.*aes_decrypt).*\baes_encrypt\s*\("),
    ("random by name", r"\b(rand|randn|random|uuid|shuffle|uniform|randstr)\s*\("),
    ("samples rows", r"\btablesample\b|\.sample\(|randomsplit"),
)


def skip_reason(text: str, is_sql: bool = True) -> str | None:
    """The first rule of ``SKIP_RULES`` that ``text`` matches (the statement rule only
    for SQL text), or None."""
    low = text.lower()
    for name, pattern in SKIP_RULES:
        if name.startswith("not a query") and not is_sql:
            continue
        if re.search(pattern, low):
            return name
    return None


# -- (a) the function registry's examples ----------------------------------------------


def function_examples(spark: Any, unfolded: bool = False) -> Iterator[Case]:
    """Each ``> ...;`` example of each built-in function's ``ExpressionInfo`` (with
    ``UNFOLDED`` settings if ``unfolded``)."""
    registry = spark._jvm.org.apache.spark.sql.catalyst.analysis.FunctionRegistry.builtin()
    ids = registry.listFunction()
    names = sorted({str(ids.apply(i).funcName()) for i in range(ids.size())})
    seen: set[str] = set()
    for fname in names:
        fid = spark._jvm.org.apache.spark.sql.catalyst.FunctionIdentifier.apply(fname)
        found = registry.lookupFunction(fid)
        if not found.isDefined():
            continue
        examples = str(found.get().getExamples() or "")
        for n, text in enumerate(_example_queries(examples), 1):
            if text in seen:
                continue
            seen.add(text)
            if unfolded:
                source = "function examples, unfolded"
                yield Case(f"fnx:{fname}#{n}", source, text, sql=text, conf=dict(UNFOLDED))
            else:
                yield Case(f"fn:{fname}#{n}", "function examples", text, sql=text)


def _example_queries(examples: str) -> list[str]:
    """The statements of an ``Examples:`` block: from a line starting ``>`` up to the
    line that ends with ``;`` (the lines between are its continuation)."""
    out: list[str] = []
    buffer: list[str] | None = None
    for line in examples.splitlines():
        stripped = line.strip()
        if buffer is None:
            if not stripped.startswith(">"):
                continue
            buffer = [stripped[1:].strip()]
        else:
            buffer.append(stripped)
        if buffer[-1].endswith(";"):
            out.append(" ".join(buffer).rstrip(";").strip())
            buffer = None
    return out


# -- (b) PySpark's docstrings ------------------------------------------------------------

#: a statement of an example that is not run: files, tables, UDFs, the RDD API, streams
UNSAFE = re.compile(
    r"\b(write|writeTo|save|saveAsTable|insertInto|tempfile|TemporaryDirectory|os|shutil|"
    r"sleep|udf|pandas_udf|udtf|mapInPandas|mapInArrow|applyInPandas|applyInArrow|"
    r"foreach|foreachPartition|rdd|sparkContext|sc|stop|readStream|writeStream|"
    r"checkpoint|localCheckpoint|cache|persist|unpersist|registerJavaFunction|catalog|"
    r"toLocalIterator|observe|Observation|input|open|exec|eval|subprocess|read|"
    r"createGlobalTempView|global_temp)\b"
    r"|CREATE\s+(TABLE|DATABASE|FUNCTION|VIEW)|INSERT\s|DROP\s",
)
#: an example that ends with an action on a DataFrame: the DataFrame is the case
ACTION = re.compile(
    r"^(?P<df>.+)\.(show|collect|first|head|take|count|toPandas|toJSON)\((?P<args>[^()]*)\)\s*$",
    re.DOTALL,
)
#: the classes whose methods' examples are read, besides pyspark.sql.functions
CLASSES = (
    ("pyspark.sql.dataframe", "DataFrame"),
    ("pyspark.sql.dataframe", "DataFrameNaFunctions"),
    ("pyspark.sql.dataframe", "DataFrameStatFunctions"),
    ("pyspark.sql.column", "Column"),
    ("pyspark.sql.group", "GroupedData"),
    ("pyspark.sql.window", "Window"),
    ("pyspark.sql.window", "WindowSpec"),
)


def _documented() -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(qualified name, docstring, the globals its examples run in)."""
    import importlib

    functions = importlib.import_module("pyspark.sql.functions")
    for name in sorted(dir(functions)):
        obj = getattr(functions, name)
        if inspect.isfunction(obj) and obj.__module__ == functions.__name__ and obj.__doc__:
            yield f"functions.{name}", obj.__doc__, vars(functions)
    for module_name, class_name in CLASSES:
        module = importlib.import_module(module_name)
        cls = getattr(module, class_name)
        for name, obj in sorted(vars(cls).items()):
            doc = getattr(obj, "__doc__", None)
            if not name.startswith("_") and doc and ">>>" in doc:
                yield f"{class_name}.{name}", doc, vars(module)


def docstring_cases(spark: Any) -> Iterator[Case]:
    """The DataFrames PySpark's doctest examples show, each yielded while its
    docstring's views and settings are in place (consume each before the next)."""
    parser = doctest.DocTestParser()
    for qualname, doc, module_globals in _documented():
        try:
            examples = parser.get_examples(inspect.cleandoc(doc))
        except ValueError:
            continue
        scope: dict[str, Any] = {**module_globals, "spark": spark}
        changed: dict[str, str | None] = {}
        try:
            for n, example in enumerate(examples, 1):
                source = example.source.strip()
                case = _run_example(spark, scope, source, changed)
                if case is not None:
                    yield Case(f"doc:{qualname}#{n}", "pyspark docstrings", source, df=case)
        finally:
            restore_conf(spark, changed)


def _run_example(spark: Any, scope: dict[str, Any], source: str, changed: dict[str, Any]) -> Any:
    """Run one example statement; the DataFrame it shows, if it shows one."""
    from pyspark.sql import DataFrame

    wanted = ACTION.match(source)
    expression = wanted.group("df") if wanted else source
    imports = source.startswith(("import pyspark", "from pyspark"))
    if not imports and UNSAFE.search(expression):
        return None
    for key in re.findall(r"spark\.conf\.set\(\s*['\"]([^'\"]+)['\"]", source):
        if key not in changed:
            changed[key] = spark.conf.get(key, None)
    try:
        code = compile(expression, "<example>", "eval")
    except SyntaxError:
        try:
            exec(compile(source, "<example>", "exec"), scope)  # PySpark's own example
        except Exception:  # an example that fails here is not a case
            return None
        return None
    try:
        value = eval(code, scope)  # PySpark's own example
    except Exception:
        return None
    return value if isinstance(value, DataFrame) else None


def restore_conf(spark: Any, before: dict[str, Any]) -> None:
    """Put Spark's session settings back as ``before`` had them (``None``: unset)."""
    for key, value in before.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)
