"""The 22 TPC-H queries through ``Session.sql``, each against Spark itself: the same
columns, the same Spark schema, the same rows (in the order of the query's ORDER BY),
and nothing left to Spark (``spark_subtrees`` empty).

In two configurations: with Spark's broadcast joins and pipelined edges (the edges made
batch by output-on-EOF are hybrid-full), and with broadcast joins off
(``spark.sql.autoBroadcastJoinThreshold=-1``: sort-merge joins, shuffled outer, semi and
anti joins) and every edge blocking.  ``./dev test`` runs this module on both Spark
versions, so each version takes one configuration (Spark 3.5 on Ray the sort-merge one,
Spark 4 the broadcast one) and both are covered; ``HS_TEST_FULL=1`` runs both on each.
The data is TPC-H at scale factor 0.01,
made by ``tpchgen-cli`` once per module; the query texts are DuckDB's
``tpch_queries()``.  The queries run in conftest's shared session (its config and
Spark's broadcast threshold set per configuration, and restored after)."""

from __future__ import annotations

import datetime
import decimal
import math
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import hybrid_shuffle as hs
from hybrid_shuffle.spark.backends import installed_pyspark

from .oracle import tpch_queries

pytestmark = pytest.mark.spark

SCALE = 0.01
TABLES = ("customer", "lineitem", "nation", "orders", "part", "partsupp", "region", "supplier")
#: an exchange's own edge, or a second reader's (``subquery_1_2``; ``exchange_23_keys``, a
#: broadcast's keys pushed into another stage: ``sparkplan.pushed_keys``; ``build_15`` and
#: ``build_15_keys``, a semi join's right side computed first: ``sparkplan.built_first``)
EDGE_NAME = re.compile(r"(exchange|gather|subquery|build)_\d+(_keys)?(_\d+)?")


@dataclass(frozen=True)
class Setup:
    """One configuration the queries run in."""

    #: ``shuffle.default_mode`` and ``shuffle.batch_mode``
    default_mode: str
    batch_mode: str
    #: Spark's ``spark.sql.autoBroadcastJoinThreshold`` (None: Spark's default, 10 MiB)
    broadcast_threshold: str | None
    #: the join Spark plans for an equi-join of two tables
    join: str

    def shuffle(self) -> dict[str, Any]:
        """The ``shuffle`` settings of this configuration (the rest is conftest's)."""
        return {"default_mode": self.default_mode, "batch_mode": self.batch_mode}

    def edge_mode_is_the_configured_one(self, edge: dict[str, Any]) -> bool:
        if edge["mode_origin"] == "output-on-eof":
            return bool(edge["mode"] == self.batch_mode)
        return bool(edge["mode"] == self.default_mode)


SETUPS = {
    "broadcast-pipelined": Setup("pipelined", "hybrid-full", None, "BroadcastHashJoin"),
    "sort-merge-blocking": Setup("blocking", "blocking", "-1", "SortMergeJoin"),
}
_SPARK4 = int((installed_pyspark() or "0").split(".")[0]) >= 4
#: the configurations this run takes (see the module docstring)
RUN = (
    list(SETUPS)
    if os.environ.get("HS_TEST_FULL")
    else ["broadcast-pipelined" if _SPARK4 else "sort-merge-blocking"]
)


@dataclass
class Tpch:
    session: hs.Session
    setup: Setup


# -- data and queries -----------------------------------------------------------------------


def _tpchgen() -> str:
    found = Path(sys.executable).with_name("tpchgen-cli")
    if not found.is_file():
        pytest.skip(f"tpchgen-cli is not installed next to {sys.executable}")
    return str(found)


@pytest.fixture(scope="module")
def tpch_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tpch")
    cmd = [_tpchgen(), "parquet", "--scale-factor", f"{SCALE:g}", "--output-dir", str(out)]
    subprocess.run([*cmd, "--quiet"], check=True, capture_output=True, timeout=120)
    assert sorted(p.stem for p in out.glob("*.parquet")) == sorted(TABLES)
    return out


@pytest.fixture(scope="module")
def queries() -> dict[int, str]:
    return tpch_queries()


@pytest.fixture(scope="module", params=RUN)
def tpch(request: pytest.FixtureRequest, session: hs.Session, tpch_dir: Path) -> Iterator[Tpch]:
    setup = SETUPS[request.param]
    spark = session.spark
    before = session.config
    session.config = before.with_overrides(shuffle=setup.shuffle())
    threshold = "spark.sql.autoBroadcastJoinThreshold"
    if setup.broadcast_threshold is not None:
        spark.conf.set(threshold, setup.broadcast_threshold)
    try:
        for table in TABLES:
            spark.read.parquet(str(tpch_dir / f"{table}.parquet")).createOrReplaceTempView(table)
        yield Tpch(session, setup)
    finally:
        spark.conf.unset(threshold)
        session.config = before


# -- comparing with Spark -------------------------------------------------------------------


def order_by(query: str, columns: Sequence[str]) -> list[int]:
    """The output columns (by position) of the query's final ORDER BY; TPC-H orders by
    output column names only."""
    found = re.search(r"\border\s+by\s+(.*?)(?:\blimit\s+\d+)?\s*$", query, re.I | re.S)
    if found is None:
        return []
    keys = []
    for item in found.group(1).split(","):
        name = re.sub(r"\s+(asc|desc)$", "", item.strip(), flags=re.I)
        assert name in columns, f"ORDER BY {name!r} is not an output column of {columns}"
        keys.append(list(columns).index(name))
    return keys


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return bool(type(a) is type(b) and a == b)


def _same(got: Sequence[tuple[Any, ...]], want: Sequence[tuple[Any, ...]]) -> bool:
    return len(got) == len(want) and all(
        len(g) == len(w) and all(_close(a, b) for a, b in zip(g, w, strict=True))
        for g, w in zip(got, want, strict=True)
    )


def _sort_key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(
        (v is None, float(f"{v:.9g}") if isinstance(v, float) else ("" if v is None else v))
        for v in row
    )


def rows(table: pa.Table) -> list[tuple[Any, ...]]:
    values = list(zip(*(c.to_pylist() for c in table.columns), strict=True))
    for row in values[:1]:
        for v in row:  # the types the comparison treats exactly, or as doubles
            assert v is None or isinstance(v, int | str | decimal.Decimal | datetime.date | float)
    return values


def assert_same_rows(got: pa.Table, want: pa.Table, keys: list[int]) -> None:
    """Equal as multisets (doubles to 1e-9 relative), and, on the ORDER BY keys, equal
    in order: rows tied on the keys may come in any order."""
    got_rows, want_rows = rows(got), rows(want)
    assert len(got_rows) == len(want_rows)
    if keys:
        got_keys = [tuple(r[k] for k in keys) for r in got_rows]
        want_keys = [tuple(r[k] for k in keys) for r in want_rows]
        assert _same(got_keys, want_keys), "not in the ORDER BY's order"
    got_sorted, want_sorted = sorted(got_rows, key=_sort_key), sorted(want_rows, key=_sort_key)
    if not _same(got_sorted, want_sorted):
        pairs = [
            (g, w) for g, w in zip(got_sorted, want_sorted, strict=True) if not _same([g], [w])
        ]
        pytest.fail(f"{len(pairs)} rows differ; first (engine, Spark): {pairs[0]}")


def spark_result(spark: Any, query: str) -> tuple[Any, pa.Table]:
    df = spark.sql(query)
    batches = df._collect_as_arrow()
    if batches:
        return df, pa.Table.from_batches(batches)
    from pyspark.sql.pandas.types import to_arrow_schema

    return df, to_arrow_schema(df.schema).empty_table()


# -- the queries ----------------------------------------------------------------------------


@pytest.mark.parametrize("number", range(1, 23), ids=lambda n: f"q{n}")
def test_tpch_query_gives_sparks_answer(tpch: Tpch, queries: dict[int, str], number: int) -> None:
    session, query = tpch.session, queries[number]
    stream = session.sql(query, name=f"tpch_q{number}", fallback="error")
    explained = stream.explain_data()
    assert explained["spark_subtrees"] == []
    edges = explained["edges"]
    assert edges, "a TPC-H query has at least one exchange"
    for edge in edges:
        assert EDGE_NAME.fullmatch(edge["name"]), edge["name"]
        assert tpch.setup.edge_mode_is_the_configured_one(edge), edge
    assert set(explained["spark_exchanges"]) == {e["name"] for e in edges}

    got = stream.to_arrow(timeout=120)
    spark_df, want = spark_result(session.spark, query)
    assert got.column_names == spark_df.columns
    # what ``stream.to_spark()`` hands Spark, without running the job a second time
    handed = session.bridge.to_dataframe(got)
    assert handed.schema.simpleString() == spark_df.schema.simpleString()
    assert_same_rows(got, want, order_by(query, got.column_names))


# Q3: inner joins; Q13: a left outer join; Q21: a left semi and a left anti join
@pytest.mark.parametrize(
    ("number", "joins"),
    [(3, ["Inner"]), (13, ["LeftOuter"]), (21, ["Inner", "LeftSemi", "LeftAnti"])],
    ids=["q3", "q13", "q21"],
)
def test_joins_are_the_kind_the_configuration_asks_for(
    tpch: Tpch, queries: dict[int, str], number: int, joins: list[str]
) -> None:
    """Broadcast joins by default; sort-merge joins (its two sides shuffled over edges)
    with broadcast joins off."""
    stream = tpch.session.sql(queries[number])
    assert stream.job.spark_plan is not None
    formatted = stream.job.spark_plan.formatted
    planned = set(re.findall(r"\b(\w+Join) (\w+)\b", formatted))
    assert planned == {(tpch.setup.join, kind) for kind in joins}, planned
    exchanges = list(stream.explain_data()["spark_exchanges"].values())
    broadcasts = [s for s in exchanges if s.startswith("BroadcastExchange")]
    if tpch.setup.join == "SortMergeJoin":
        assert broadcasts == []
        assert sum("hashpartitioning" in s for s in exchanges) >= 2 * len(planned)
    else:
        assert len(broadcasts) >= len(planned)


def test_a_reused_exchange_read_by_the_same_stage_is_written_and_read_once(
    tpch: Tpch, queries: dict[int, str]
) -> None:
    """Q18 semi-joins both sides of its join with one aggregate.  With customer the only
    table small enough to broadcast (as at SF1 under Spark's default threshold), Spark
    plans the second read as a ``ReusedExchange`` into the same stage.  The stage reads
    the rows once, over the original's edge, whose producer writes them once; explain
    says so, and the answer is Spark's.  (Spark 4 plans an aggregate there that runs in
    Spark: explain then still names only the job's edges, not those of the subtree
    translated before it.)  Computing the semi joins' right side first
    (``adaptive.semi_join_filters``) reads the aggregate elsewhere: it is off here."""
    stream = _q18_with_customer_broadcast(tpch, queries, {"adaptive": {"semi_join_filters": False}})
    assert stream.job.spark_plan is not None
    assert "ReusedExchange" in stream.job.spark_plan.formatted
    explained = stream.explain_data()
    edges = explained["edges"]
    texts = explained["spark_exchanges"]
    # only the job's edges, even where a subtree translated first runs in Spark after all
    assert set(texts) == {e["name"] for e in edges}
    if explained["spark_subtrees"]:
        pytest.skip(
            f"this Spark plans an aggregate that runs in Spark: {explained['spark_subtrees']}"
        )
    same = Counter((e["source"], e["target"], e["partitioner"]) for e in edges)
    assert max(same.values()) == 1, same
    (kept,) = [name for name, text in texts.items() if "read once for ReusedExchange" in text]
    producer = next(e["source"] for e in edges if e["name"] == kept)
    result = stream.collect(timeout=120)
    got = result.table
    writes = [[w.edge for w in t.writes] for t in result.tasks if t.vertex == producer]
    assert writes and all(w == [kept] for w in writes), writes
    _, want = spark_result(tpch.session.spark, queries[18])
    assert_same_rows(got, want, order_by(queries[18], got.column_names))


def _q18_with_customer_broadcast(
    tpch: Tpch, queries: dict[int, str], overrides: dict[str, Any]
) -> hs.Stream:
    """Q18 translated with ``overrides`` of the session's config, customer the only
    table Spark broadcasts (as at SF1 under its default threshold)."""
    session = tpch.session
    spark, key = session.spark, "spark.sql.autoBroadcastJoinThreshold"
    spark.conf.set(key, "100k")  # customer's 1,500 rows, not the aggregate's estimate
    before = session.config
    session.config = before.with_overrides(**overrides)
    try:
        return session.sql(queries[18])
    finally:
        session.config = before
        if tpch.setup.broadcast_threshold is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, tpch.setup.broadcast_threshold)


def test_a_semi_joins_having_side_is_computed_first_and_cuts_the_other_sides(
    tpch: Tpch, queries: dict[int, str]
) -> None:
    """Q18 semi-joins ``orders`` and ``lineitem`` with the orders whose quantity passes a
    ``HAVING``.  That side runs first, once for both semi joins, in a stage of its own;
    its rows reach the join's stage over ``build_<id>`` and each scan's stage over
    ``build_<id>_keys``, where the rows that cannot join are dropped before their
    exchanges: fewer than the tables' rows cross them, and the answer is Spark's."""
    stream = _q18_with_customer_broadcast(tpch, queries, {})
    explained = stream.explain_data()
    if explained["spark_subtrees"]:
        pytest.skip(
            f"this Spark plans an aggregate that runs in Spark: {explained['spark_subtrees']}"
        )
    edges = {e["name"]: e for e in explained["edges"]}
    keys = sorted(name for name in edges if re.fullmatch(r"build_\d+_keys", name))
    builds = [name for name in edges if re.fullmatch(r"build_\d+", name)]
    assert len(keys) == 2 and len(builds) == 1, sorted(edges)
    assert {edges[name]["partitioner"] for name in keys} == {"broadcast"}
    # one stage computes the side for both semi joins and feeds all three edges
    assert len({edges[name]["source"] for name in [*keys, *builds]}) == 1
    scans = {edges[name]["target"] for name in keys}
    assert len(scans) == 2 and all(s.startswith("scan_") for s in scans), scans
    result = stream.collect(timeout=120)
    crossing = [n for n, e in edges.items() if e["source"] in scans and n not in keys]
    crossed = sum(result.edges[name].rows for name in crossing)
    scanned = sum(result.vertices[name].rows_in for name in scans)
    assert len(crossing) == 2 and crossed < scanned / 10, (crossed, scanned)
    _, want = spark_result(tpch.session.spark, queries[18])
    assert_same_rows(result.table, want, order_by(queries[18], result.table.column_names))


def test_each_scan_is_read_by_its_stages_duckdb(tpch: Tpch, queries: dict[int, str]) -> None:
    """Issue 34: a table scan's split is read by its stage's own DuckDB (``read_parquet``
    of its row groups, the stage's filter pushed into it), not decoded by pyarrow and
    pushed in (Q3 scans customer, orders and lineitem)."""
    result = tpch.session.sql(queries[3], fallback="error").collect()
    scans = [t for t in result.tasks if t.vertex.startswith("scan_")]
    assert len({t.vertex for t in scans}) == 3
    assert all(t.source_in_duckdb for t in scans), [t.name for t in scans]
