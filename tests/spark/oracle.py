"""Spark as the oracle for the ``tests/spark/test_sql_*`` modules: one copy of the helpers
that compare a stream's result with Spark's own for the same query or DataFrame (rows,
order-insensitive unless ordered; ``df.columns``; the schema ``to_spark()`` gives back),
that write Arrow tables as Parquet views, and that read what a plan left to Spark.

Not a test module: the test modules import it with ``from .oracle import ...`` (pytest
runs with ``--import-mode=importlib``)."""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stdout
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import hybrid_shuffle as hs
from hybrid_shuffle.config import load_config

#: the session's config in YAML, ``%s`` for more ``shuffle`` settings
BASE_YAML = """\
parallelism: 2
ray: {num_cpus: 4, object_store_memory: 500 MiB}
shuffle: {buffer_size: 1 MiB, memory_budget: 64 MiB%s}
spark: {executors: 1, executor_cores: 1, executor_memory: 1 GiB}
"""

Value = Callable[[Any], Any]


# -- data --------------------------------------------------------------------------------


def parquet_views(spark: Any, root: Path, tables: dict[str, pa.Table]) -> Any:
    """Each table written as ``root/<name>.parquet`` and registered as the view ``name``;
    returns ``spark``."""
    for name, table in tables.items():
        path = Path(root) / f"{name}.parquet"
        pq.write_table(table, path)
        spark.read.parquet(str(path)).createOrReplaceTempView(name)
    return spark


# -- rows --------------------------------------------------------------------------------


def value(v: Any) -> Any:
    """A float to 9 significant digits (NaN as ``"NaN"``, so it equals itself)."""
    if isinstance(v, float):
        return "NaN" if math.isnan(v) else float(f"{v:.9g}")
    return v


def exact_value(v: Any) -> Any:
    """A value as it is, NaN as ``"NaN"`` and a list as a tuple (recursively)."""
    if isinstance(v, float):
        return "NaN" if math.isnan(v) else v
    if isinstance(v, list):
        return tuple(exact_value(x) for x in v)
    return v


def rows(table: pa.Table, value: Value = value) -> list[tuple[Any, ...]]:
    """``table``'s rows, in its order, each value through ``value``."""
    columns = [c.to_pylist() for c in table.columns]
    return [tuple(value(v) for v in row) for row in zip(*columns, strict=True)]


def key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A sort key for any row (nulls last, everything compared as text)."""
    return tuple((v is None, str(v)) for v in row)


def spark_table(df: Any) -> pa.Table | None:
    """What Spark computes for ``df``, as Arrow; None for no rows."""
    batches = df._collect_as_arrow()
    return pa.Table.from_batches(batches) if batches else None


def spark_rows(df: Any, value: Value = value) -> list[tuple[Any, ...]]:
    table = spark_table(df)
    return [] if table is None else rows(table, value)


def same_rows(got: list[Any], want: list[Any], ordered: bool = False) -> None:
    if ordered:
        assert got == want
    else:
        assert sorted(got, key=key) == sorted(want, key=key)


def same_schema(session: hs.Session, got: pa.Table, df: Any) -> None:
    """``got`` as ``stream.to_spark()`` returns it has ``df``'s schema."""
    back = session.bridge.to_dataframe(got)
    assert back.schema.simpleString() == df.schema.simpleString()


# -- comparing with Spark ---------------------------------------------------------------


def subtrees(stream: hs.Stream) -> list[dict[str, str]]:
    """What of the stream's plan runs in Spark."""
    return list(stream.explain_data()["spark_subtrees"])


def ran_where(stream: hs.Stream, in_engine: bool | None) -> None:
    """With ``in_engine`` True nothing fell back to Spark, with False something did,
    with None either."""
    if in_engine is None:
        return
    fell_back = subtrees(stream)
    assert (fell_back == []) == in_engine, fell_back


def check(
    session: hs.Session,
    stream: hs.Stream,
    df: Any,
    ordered: bool = False,
    in_engine: bool | None = None,
    value: Value = value,
) -> pa.Table:
    """``stream``'s result equals Spark's own for ``df``: rows, names and schema; and it
    ran where ``in_engine`` says (see ``ran_where``)."""
    got = stream.to_arrow()
    assert got.column_names == df.columns
    same_rows(rows(got, value), spark_rows(df, value), ordered)
    same_schema(session, got, df)
    ran_where(stream, in_engine)
    return got


def check_sql(
    session: hs.Session,
    spark: Any,
    query: str,
    ordered: bool = False,
    in_engine: bool | None = None,
    value: Value = value,
) -> hs.Stream:
    """``check`` for ``query`` run by ``session.sql`` and by Spark; returns the stream."""
    stream = session.sql(query)
    check(session, stream, spark.sql(query), ordered, in_engine, value)
    return stream


# -- plans and configs ------------------------------------------------------------------


def formatted_plan(df: Any) -> str:
    """What ``df.explain(mode="formatted")`` prints, as the user sees it (the session's
    settings: adaptive execution on)."""
    printed = io.StringIO()
    with redirect_stdout(printed):
        df.explain(mode="formatted")
    return printed.getvalue()


def exchange_ids(spark: Any, build: Callable[[], Any]) -> list[int]:
    """The ids ``build()``'s ``explain(mode="formatted")`` gives its exchanges."""
    return [int(m) for m in re.findall(r"^\((\d+)\) Exchange$", formatted_plan(build()), re.M)]


@contextmanager
def spark_conf(spark: Any, **settings: str) -> Iterator[None]:
    """Spark planning with ``settings`` (``spark.sql.`` keys, dots as ``__``)."""
    keys = {"spark.sql." + k.replace("__", "."): v for k, v in settings.items()}
    for key, value in keys.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key in keys:
            spark.conf.unset(key)


@contextmanager
def configured(session: hs.Session, tmp_path: Path, yaml: str) -> Iterator[None]:
    """The session planning with ``yaml`` as its config, for the block."""
    before = session.config
    path = tmp_path / "job.yaml"
    path.write_text(yaml)
    session.config = load_config(path)
    try:
        yield
    finally:
        session.config = before


# -- TPC-H --------------------------------------------------------------------------------


def tpch_queries() -> dict[int, str]:
    """TPC-H's 22 queries as DuckDB's ``tpch`` extension has them (from its wheel's file:
    nothing is downloaded), by number, without their trailing ``;``."""
    import duckdb
    import duckdb_extension_tpch

    folder = Path(duckdb_extension_tpch.__file__).parent / "extensions"
    wanted = folder / f"v{duckdb.__version__}" / "tpch.duckdb_extension"
    extension = wanted if wanted.is_file() else sorted(folder.glob("*/tpch.duckdb_extension"))[-1]
    config = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    with duckdb.connect(config=config) as con:
        con.execute(f"LOAD '{extension}'")
        rows = con.execute("SELECT query_nr, query FROM tpch_queries()").fetchall()
    found = {int(n): str(q).strip().rstrip(";") for n, q in rows}
    assert sorted(found) == list(range(1, 23))
    return found
