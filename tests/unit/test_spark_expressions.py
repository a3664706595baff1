"""Each translated Spark expression gives Spark's own result, row for row, in DuckDB.

Spark is the oracle.  All the expressions are projected in one ``selectExpr`` over a
small Parquet table of null-heavy columns (Parquet, not a local DataFrame: Spark
folds a projection over a local relation into a new local relation).  The
``ProjectExec`` of the executed plan holds each expression as Spark resolved it
(casts inserted, ``RuntimeReplaceable``s replaced); each is compiled with the
scan's attributes as the columns of the same rows in DuckDB, run, and compared
with ``collect()``: the values and the type's ``simpleString``.  Every expression
involves a column, since Spark folds literal-only ones.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hybrid_shuffle.sparkplan.expressions import Scope, Sql, Unsupported, compile_expression, quote
from hybrid_shuffle.sparkplan.physical import mark_jvm_fields
from hybrid_shuffle.sparkplan.tree import Node, parse
from hybrid_shuffle.sparkplan.types import spark_type

pytestmark = pytest.mark.spark
pyspark_sql = pytest.importorskip("pyspark.sql")

_OPENS = " ".join(
    f"--add-opens=java.base/{p}=ALL-UNNAMED"
    for p in ("java.lang", "java.nio", "sun.nio.ch", "java.util", "java.lang.invoke")
)

#: the columns and their rows; nulls in every column, and the corners the cases probe
_SCHEMA = pa.schema(
    [
        ("i", pa.int32()),
        ("j", pa.int32()),
        ("l", pa.int64()),
        ("x", pa.float64()),
        ("y", pa.float64()),
        ("d", pa.decimal128(15, 2)),
        ("e", pa.decimal128(38, 4)),
        ("s", pa.string()),
        ("t", pa.string()),
        ("dt", pa.date32()),
        ("b", pa.bool_()),
        ("c", pa.bool_()),
        ("u", pa.string()),
    ]
)
_ROWS: list[tuple[Any, ...]] = [
    (
        1,
        0,
        10,
        1.5,
        0.0,
        Decimal("1.50"),
        Decimal("123.4567"),
        "abc",
        "%",
        dt.date(2020, 1, 31),
        True,
        True,
        " 7 ",
    ),
    (
        -7,
        2,
        None,
        -2.5,
        3.0,
        Decimal("-2.25"),
        None,
        "1.5",
        "_",
        dt.date(2021, 2, 28),
        False,
        None,
        "-.5",
    ),
    (
        0,
        None,
        -3,
        0.0,
        None,
        Decimal("0.00"),
        Decimal("-0.0001"),
        " 12 ",
        None,
        None,
        None,
        False,
        "+3",
    ),
    (
        None,
        3,
        0,
        None,
        -1.25,
        None,
        Decimal("0"),
        None,
        "a",
        dt.date(2024, 2, 29),
        True,
        None,
        "1e3",
    ),
    (
        2147483647,
        0,
        9223372036854775807,
        2.675,
        2.0,
        Decimal("9999999999999.99"),
        Decimal("9999999999999999999999999999999999.9999"),
        "a_b%c",
        "b",
        dt.date(1970, 1, 1),
        None,
        True,
        "\t5\n",
    ),
    (
        5,
        -2,
        4,
        float("nan"),
        0.5,
        Decimal("0.05"),
        Decimal("1.0000"),
        "",
        "",
        dt.date(2000, 12, 31),
        False,
        False,
        "YES",
    ),
    (
        None,
        5,
        None,
        1e10,
        None,
        Decimal("12.35"),
        None,
        "Hello World",
        "lo",
        None,
        True,
        True,
        "2021-2-3",
    ),
    (
        -1,
        None,
        100,
        -0.5,
        -7.0,
        Decimal("-0.01"),
        Decimal("2.5000"),
        "2021-02-28",
        " x ",
        dt.date(1999, 6, 15),
        None,
        False,
        "99999999999",
    ),
    (
        12,
        4,
        -9223372036854775807,
        -1e-3,
        10.0,
        Decimal("-99.99"),
        Decimal("-5.5550"),
        "-42",
        "ab",
        dt.date(2023, 3, 31),
        False,
        None,
        " f ",
    ),
]

#: expression text -> Spark's result; each must compile and match
CASES: list[str] = [
    # decimal arithmetic at mixed precisions, overflow and precision loss
    "d + e",
    "d - e",
    "d * e",
    "e * d",
    "e * e",
    "d / e",
    "e / d",
    "d / d",
    "d % e",
    "e % d",
    "d + i",
    "d * l",
    "d / i",
    "d / 0",
    "d % j",
    "d + 1.005",
    "d * 0.5",
    # integers and doubles
    "i + j",
    "i * 2",
    "i - l",
    "i / j",
    "l / j",
    "x / y",
    "i div j",
    "l div j",
    "i % j",
    "x % y",
    "-i",
    "-d",
    "-x",
    "abs(i)",
    "abs(d)",
    "abs(x)",
    # casts in the default (non-ANSI) mode
    "cast(s as int)",
    "cast(s as bigint)",
    "cast(s as double)",
    "cast(s as decimal(10,2))",
    "cast(x as int)",
    "cast(x as bigint)",
    "cast(d as int)",
    "cast(e as decimal(10,2))",
    "cast(e as decimal(38,0))",
    "cast(d as decimal(4,1))",
    "cast(s as date)",
    "cast(i as string)",
    "cast(l as string)",
    "cast(d as string)",
    "cast(e as string)",
    "cast(dt as string)",
    "cast(b as string)",
    "cast(b as int)",
    "cast(i as boolean)",
    "cast(i as double)",
    "cast(i as decimal(5,1))",
    "cast(l as int)",
    # three-valued logic
    "b and c",
    "b or c",
    "not b",
    "b and i > 0",
    "i in (1, 2, null)",
    "i in (1, 5)",
    "i not in (1, null)",
    "s in ('abc', '')",
    "i <=> j",
    "d <=> e",
    "d = e",
    "d < e",
    "d > 1.5",
    "d = 1.500",
    "x = y",
    "x < y",
    "i is null",
    "s is not null",
    # strings
    "s like 'a%'",
    "s like '%b%'",
    "s like 'a_b%'",
    "s like 'a\\\\_b%'",
    "s like '_'",
    "s like t",
    # an escape character other than the backslash, on a literal and on a column pattern
    "s like 'a/_b%' escape '/'",
    "s like replace(t, '_', 'a/_b%') escape '/'",
    "substring(s, 0, 2)",
    "substring(s, 1, 2)",
    "substring(s, -3, 2)",
    "substring(s, 2, 100)",
    "substring(s, -100, 3)",
    "substring(s, 3)",
    "substring(s, i, j)",
    # a literal start with a column length (null, negative, large), a null literal length
    "substring(s, 2, j)",
    "substring(s, 0, j - 3)",
    "substring(s, 1, cast(null as int))",
    "substring(s, cast(null as int), 2)",
    "substring(concat(s, t), 3, 2)",
    "concat(s, t)",
    "concat(s, '-', t)",
    "upper(s)",
    "lower(s)",
    "length(s)",
    "trim(s)",
    "ltrim(s)",
    "rtrim(s)",
    "startswith(s, 'a')",
    "endswith(s, t)",
    "contains(s, t)",
    # conditionals
    "case when i > 0 then 'pos' when i < 0 then 'neg' end",
    "case when i > 0 then d else e end",
    "case when b then i else l end",
    "if(b, i, j)",
    "coalesce(i, j, 0)",
    "coalesce(d, e)",
    "nullif(i, 0)",
    "nullif(s, '')",
    # dates
    "date_add(dt, 1)",
    "date_add(dt, j)",
    "date_sub(dt, 30)",
    "datediff(dt, date'2000-01-01')",
    "add_months(dt, 1)",
    "add_months(dt, -12)",
    "add_months(dt, j)",
    "year(dt)",
    "month(dt)",
    "dayofmonth(dt)",
    "quarter(dt)",
    "dayofweek(dt)",
    "dayofyear(dt)",
    "extract(year from dt)",
    "extract(month from dt)",
    # rounding
    "round(d, 0)",
    "round(d, 1)",
    "round(d, 2)",
    "round(d)",
    "round(e, 2)",
    "round(x, 1)",
    "round(x)",
    "round(i, -1)",
    "round(x, 2)",
    "round(d, -1)",
    "round(e * d, 3)",
    # casts of the strings Spark parses its own way
    "cast(u as int)",
    "cast(u as bigint)",
    "cast(u as tinyint)",
    "cast(u as boolean)",
    "cast(u as decimal(12,1))",
    "cast(x as tinyint)",
    "cast(l as smallint)",
    "cast(e as bigint)",
    # integer overflow wraps, as Java's
    "i * 2",
    "i + 2147483647",
    "l * l",
    "-l",
    "abs(l)",
    # more functions
    "pmod(i, j)",
    "pmod(l, -3)",
    "pmod(x, y)",
    "pmod(d, e)",
    "e div d",
    "d div e",
    "greatest(i, j)",
    "least(x, y)",
    "greatest(d, e)",
    "isnan(x)",
    "signum(x)",
    "signum(i)",
    "floor(x)",
    "ceil(x)",
    "floor(d)",
    "ceil(e)",
    "floor(i)",
    "sqrt(x)",
    "ln(x)",
    "exp(y)",
    "pow(x, y)",
    "replace(s, t, 'Z')",
    "replace(s, 'l', '')",
    "instr(s, t)",
    "lpad(s, 5, t)",
    "rpad(s, 4, 'xy')",
    "lpad(s, j, '*')",
    "last_day(dt)",
    "trunc(dt, 'MM')",
    "trunc(dt, 'year')",
    "trunc(dt, 'Q')",
    "trunc(dt, 'week')",
]

#: the cases Spark raises an error for on these rows under ANSI evaluation
#: (``spark.sql.ansi.enabled``, Spark 4's default; the same list on Spark 3.5 with it
#: on): an overflow, a division by zero, an invalid cast.  The translation gives the
#: non-ANSI result there (null, or a wrapped integer), which ``test_matches_spark``
#: checks; every other case must match Spark's ANSI result too.
ANSI_RAISES = frozenset(
    {
        "d + e",
        "d * e",
        "e * d",
        "e * e",
        "e / d",
        "d / d",
        "e % d",
        "d / i",
        "d / 0",
        "d % j",
        "i * 2",
        "i - l",
        "i / j",
        "l / j",
        "x / y",
        "i div j",
        "l div j",
        "i % j",
        "x % y",
        "cast(s as int)",
        "cast(s as bigint)",
        "cast(s as double)",
        "cast(s as decimal(10,2))",
        "cast(x as int)",
        "cast(x as bigint)",
        "cast(d as int)",
        "cast(e as decimal(10,2))",
        "cast(d as decimal(4,1))",
        "cast(s as date)",
        "cast(i as decimal(5,1))",
        "cast(l as int)",
        "round(i, -1)",
        "round(e * d, 3)",
        "cast(u as int)",
        "cast(u as bigint)",
        "cast(u as tinyint)",
        "cast(u as boolean)",
        "cast(u as decimal(12,1))",
        "cast(x as tinyint)",
        "cast(l as smallint)",
        "cast(e as bigint)",
        "i + 2147483647",
        "l * l",
        "pmod(i, j)",
        "pmod(x, y)",
        "pmod(d, e)",
        "e div d",
        "d div e",
    }
)
ANSI_CASES = [text for text in dict.fromkeys(CASES) if text not in ANSI_RAISES]

#: expression text -> the expression Spark puts in the plan, which must not translate
FALLBACKS: list[str] = [
    "cast(x as string)",
    "cast(s as timestamp_ntz)",
    "trim(both 'a' from s)",
]


@dataclass(frozen=True)
class Oracle:
    """Spark's side of one case: the resolved expression, its type and its rows."""

    expression: Node
    simple: str
    rows: list[Any]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    # the cases probe the non-ANSI corners (null on overflow, division by zero and invalid
    # casts), where ANSI evaluation raises instead: Spark 4 turns it on by default
    session = (
        pyspark_sql.SparkSession.builder.master("local[1]")
        .appName("test_spark_expressions")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.sql.ansi.enabled", "false")
        .config("spark.driver.extraJavaOptions", _OPENS)
        .getOrCreate()
    )
    yield session
    session.stop()


def _arrow() -> pa.Table:
    columns = list(zip(*_ROWS, strict=True))
    return pa.table([pa.array(c, f.type) for c, f in zip(columns, _SCHEMA, strict=True)], _SCHEMA)


@pytest.fixture(scope="module")
def table(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The rows as Spark reads them: a Parquet file written by Arrow (no Python worker)."""
    path = Path(tmp_path_factory.mktemp("expressions")) / "t.parquet"
    pq.write_table(_arrow(), path)
    return spark.read.parquet(str(path))


@pytest.fixture(scope="module")
def duck() -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb.connect(config={"threads": 1})
    con.register("t", _arrow())
    yield con
    con.close()


def _project(plan: Node) -> Node:
    for node in plan.walk():
        if node.cls == "ProjectExec":
            return node
    raise AssertionError("no ProjectExec in the plan")


def _scan(plan: Node) -> Node:
    for node in plan.walk():
        if node.cls == "FileSourceScanExec":
            return node
    raise AssertionError("no FileSourceScanExec in the plan")


def _oracles(table: Any, texts: list[str]) -> tuple[dict[str, Oracle], Scope]:
    """Spark's resolved expression, type and rows of each text, from one query."""
    query = table.selectExpr(
        "monotonically_increasing_id() AS _row",
        *[f"{text} AS r{n}" for n, text in enumerate(texts)],
    )
    executed = query._jdf.queryExecution().executedPlan()
    text = str(executed.toJSON())
    raw = json.loads(text)
    mark_jvm_fields(raw, executed, text)  # as physical_plan does (a LIKE's escape)
    plan = parse(raw)
    aliases = {a.get("name"): a.child for a in _project(plan).exprs("projectList")}
    rows = sorted(query.collect(), key=lambda r: r["_row"])
    types = {f.name: f.dataType.simpleString() for f in query.schema.fields}
    oracles = {
        text: Oracle(aliases[f"r{n}"], types[f"r{n}"], [r[f"r{n}"] for r in rows])
        for n, text in enumerate(texts)
    }
    columns = {}
    for raw in _scan(plan).exprs("output"):
        t = spark_type(raw.get("dataType"))
        columns[int(raw.get("exprId")["id"])] = Sql(quote(raw.get("name")), t)
    return oracles, Scope(columns=columns)


@pytest.fixture(scope="module")
def oracle(table: Any) -> tuple[dict[str, Oracle], Scope]:
    return _oracles(table, CASES + FALLBACKS)


@pytest.fixture(scope="module")
def ansi_oracle(spark: Any, table: Any) -> tuple[dict[str, Oracle], Scope]:
    """Spark's side of the cases it computes under ANSI evaluation (resolved and run
    with ``spark.sql.ansi.enabled`` on, as Spark 4 does by default)."""
    spark.conf.set("spark.sql.ansi.enabled", "true")
    try:
        return _oracles(table, ANSI_CASES)
    finally:
        spark.conf.set("spark.sql.ansi.enabled", "false")


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b
    if type(a) is not type(b) and not (isinstance(a, Decimal) and isinstance(b, Decimal)):
        return False
    return bool(a == b)


@pytest.mark.parametrize("text", CASES)
def test_matches_spark(
    text: str, oracle: tuple[dict[str, Oracle], Scope], duck: duckdb.DuckDBPyConnection
) -> None:
    _check(text, oracle, duck)


@pytest.mark.parametrize("text", ANSI_CASES)
def test_matches_spark_under_ansi(
    text: str, ansi_oracle: tuple[dict[str, Oracle], Scope], duck: duckdb.DuckDBPyConnection
) -> None:
    _check(text, ansi_oracle, duck)


def _check(
    text: str, oracle: tuple[dict[str, Oracle], Scope], duck: duckdb.DuckDBPyConnection
) -> None:
    """``text``'s translation gives Spark's type and rows."""
    oracles, scope = oracle
    expected = oracles[text]
    sql = compile_expression(expected.expression, scope)
    assert sql.type.simple == expected.simple, (
        f"{text}: type {sql.type} is not Spark's {expected.simple}"
    )
    got = [r[0] for r in duck.execute(f"SELECT {sql.text} AS r FROM t").fetchall()]
    wrong = [
        (n, s, g)
        for n, (s, g) in enumerate(zip(expected.rows, got, strict=True))
        if not _same(s, g)
    ]
    assert not wrong, f"{text} -> {sql.text}\n(row, spark, duckdb): {wrong}"


@pytest.mark.parametrize("text", FALLBACKS)
def test_falls_back(text: str, oracle: tuple[dict[str, Oracle], Scope]) -> None:
    oracles, scope = oracle
    with pytest.raises(Unsupported):
        compile_expression(oracles[text].expression, scope)
