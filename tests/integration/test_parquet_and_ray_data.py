"""Issue 15, item 6: Parquet in and out, Ray Data in and out, on a real session.

Every result is checked row for row against single-process pyarrow: the
written directory is read back with ``pyarrow.dataset``; the sources are
compared with what pyarrow reads from the same files (with the same columns
and filter) or holds in the same Dataset.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
import ray.data

import hybrid_shuffle as hs

from .conftest import assert_no_leaks

ROWS = 60_000


@pytest.fixture(scope="module")
def session(local_ray: None) -> Iterator[hs.Session]:
    config = {"parallelism": 2, "shuffle": {"buffer_size": "64 KiB", "memory_budget": "64 MiB"}}
    with hs.Session(config, slots=4) as s:
        yield s


def facts(rows: int = ROWS) -> pa.Table:
    i = np.arange(rows)
    return pa.table(
        {
            "k": i % 97,
            "amount": (i % 1000).astype("float64") / 4,  # quarters: sums are exact
            "label": pa.array(np.char.add("l", (i % 13).astype(str))),
            "unused": pa.array(np.char.add("pad-", (i % 7).astype(str))),
        }
    )


def sorted_rows(table: pa.Table) -> pa.Table:
    return table.sort_by([(c, "ascending") for c in table.column_names])


def aggregate(table: pa.Table) -> pa.Table:
    """What ``key_by("k").aggregate({"amount": ["sum", "count"]})`` gives, in pyarrow."""
    return sorted_rows(table.group_by("k").aggregate([("amount", "sum"), ("amount", "count")]))


@pytest.fixture
def files(tmp_path: Path) -> Path:
    """Three files of several row groups each."""
    data = facts()
    root = tmp_path / "in"
    root.mkdir()
    third = ROWS // 3
    for n in range(3):
        pq.write_table(data.slice(n * third, third), root / f"f{n}.parquet", row_group_size=5_000)
    return root


# -- Parquet in ----------------------------------------------------------------------------


def test_from_parquet_reads_every_row_in_splits(session: hs.Session, files: Path) -> None:
    job = session.job("parquet_in")
    stream = job.from_parquet(str(files), name="facts")
    assert stream.node.parallelism == 2  # the config's, fewer than the 12 row groups
    result = stream.collect()
    assert sorted_rows(result.table).equals(sorted_rows(ds.dataset(files).to_table()))
    reads = [t for t in result.tasks if t.vertex == "facts"]
    assert sorted(t.rows_in for t in reads) == [ROWS // 2, ROWS // 2]  # row groups dealt evenly
    assert not any(t.source_in_duckdb for t in reads)  # no sql query to read them
    assert result.sources_seconds >= 0
    assert_no_leaks(session)


def test_from_parquet_pushes_columns_and_filter(session: hs.Session, files: Path) -> None:
    job = session.job("parquet_pushdown")
    keep = pc.field("k") < 10
    stream = job.from_parquet(files, parallelism=3, columns=["k", "amount"], filter=keep)
    got = stream.key_by("k", mode="blocking").aggregate({"amount": ["sum", "count"]}).collect()
    expected = aggregate(ds.dataset(files).to_table(columns=["k", "amount"], filter=keep))
    assert sorted_rows(got.table).equals(expected)
    assert_no_leaks(session)


def test_from_parquet_prunes_what_the_plan_does_not_read(session: hs.Session, files: Path) -> None:
    job = session.job("parquet_pruned")
    stream = job.from_parquet(files, name="facts")
    aggregated = stream.key_by("k").aggregate({"amount": ["sum"]})
    plan = job.plan(aggregated)
    assert plan.source_columns[stream.node.id] == frozenset({"k", "amount"})
    got = aggregated.collect()
    expected = sorted_rows(
        ds.dataset(files).to_table().group_by("k").aggregate([("amount", "sum")])
    )
    assert sorted_rows(got.table).equals(expected)
    # the same source read whole by a later run: splits are planned again for it
    assert stream.collect().table.num_columns == 4
    assert_no_leaks(session)


def test_from_parquet_filter_excluding_everything(session: hs.Session, files: Path) -> None:
    job = session.job("parquet_none")
    result = job.from_parquet(files, filter=pc.field("k") > 1_000).collect()
    assert result.table.num_rows == 0
    assert result.table.schema == ds.dataset(files).schema


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"path": "nowhere/at/all"}, "does not exist"),
        ({"columns": ["k", "nope"]}, "column 'nope' is not in the files"),
        ({"filter": pc.field("nope") > 1}, "the filter names column 'nope'"),
        ({"filter": "k > 1"}, "filter must be a pyarrow.compute expression"),
        ({"parallelism": 0}, "parallelism"),
    ],
)
def test_from_parquet_errors_name_the_problem(
    session: hs.Session, files: Path, kwargs: dict[str, object], named: str
) -> None:
    args: dict[str, object] = {"path": str(files), **kwargs}
    with pytest.raises(hs.PlanError, match=named) as error:
        session.job("parquet_bad").from_parquet(**args)  # type: ignore[arg-type]
    assert "\n" not in str(error.value)


# -- Parquet read by a sql query's own DuckDB (issue 34) ------------------------------------


def sql_over_parquet(
    session: hs.Session, path: object, query: str, parallelism: int = 5
) -> hs.JobResult:
    """``query`` chained after ``from_parquet`` (by default 5 splits of the 12 row groups,
    cut inside files and across them)."""
    job = session.job("parquet_sql")
    stream = job.from_parquet(path, name="facts", parallelism=parallelism)
    return stream.sql(query).collect()


def scans(result: hs.JobResult) -> list[bool]:
    """Per source task: whether DuckDB read its split."""
    return [t.source_in_duckdb for t in result.tasks if t.vertex.startswith("facts")]


def test_sql_over_parquet_reads_the_files_in_duckdb(session: hs.Session, files: Path) -> None:
    """An aggregate with a filter DuckDB pushes into its Parquet scan: the partials of the
    5 subtasks add up to pyarrow's answer, every split was read by DuckDB, and the rows in
    are the split's row groups."""
    query = "SELECT k, sum(amount) AS amount, count(*) AS n FROM input WHERE k < 10 GROUP BY k"
    result = sql_over_parquet(session, files, query)
    assert scans(result) == [True] * 5
    assert sum(t.rows_in for t in result.tasks) == ROWS
    partials = result.table.group_by("k").aggregate([("amount", "sum"), ("n", "sum")])
    want = aggregate(ds.dataset(files).to_table(filter=pc.field("k") < 10))
    assert sorted_rows(partials).to_pylist() == [
        {"k": r["k"], "amount_sum": r["amount_sum"], "n_sum": r["amount_count"]}
        for r in want.to_pylist()
    ]
    assert_no_leaks(session)


def test_sql_over_parquet_per_row_query_in_duckdb(session: hs.Session, files: Path) -> None:
    query = "SELECT label, k, amount * 2 AS twice FROM input WHERE label = 'l3' AND k > 40"
    result = sql_over_parquet(session, str(files), query)
    assert scans(result) == [True] * 5
    data = ds.dataset(files).to_table(filter=(pc.field("label") == "l3") & (pc.field("k") > 40))
    want = pa.table(
        {"label": data["label"], "k": data["k"], "twice": pc.multiply(data["amount"], 2)}
    )
    assert sorted_rows(result.table).equals(sorted_rows(want))


def test_sql_over_parquet_of_a_type_duckdb_reads_differently(
    session: hs.Session, tmp_path: Path
) -> None:
    """A dictionary column (pyarrow restores it from the file's Arrow schema; DuckDB reads
    plain strings): pyarrow reads the split, and the answer is the same."""
    tags = pa.array(["a", "b", "c"] * 2_000).dictionary_encode()
    data = facts(6_000).append_column("tag", tags)
    pq.write_table(data, tmp_path / "d.parquet", row_group_size=1_000)
    query = "SELECT k, tag, amount FROM input WHERE k = 5"
    result = sql_over_parquet(session, tmp_path / "d.parquet", query, parallelism=2)
    assert scans(result) == [False, False]
    want = ds.dataset(tmp_path / "d.parquet").to_table(columns=["k", "tag", "amount"])
    plain = pa.schema([("k", pa.int64()), ("tag", pa.string()), ("amount", pa.float64())])
    want = want.filter(pc.field("k") == 5).cast(plain)
    assert sorted_rows(result.table.cast(plain)).equals(sorted_rows(want))


def test_sql_over_parquet_names_a_file_removed_after_planning(
    session: hs.Session, files: Path
) -> None:
    """Removed before the run made its splits: pyarrow reads them and names the file (one
    removed after, while DuckDB reads it: ``tests/unit/test_parquet_splits.py``)."""
    job = session.job("parquet_gone")
    stream = job.from_parquet(files, name="facts", parallelism=2).sql("SELECT k FROM input")
    os.remove(files / "f1.parquet")
    with pytest.raises(hs.JobFailedError, match=r"f1\.parquet") as error:
        stream.collect()
    assert "\n" not in str(error.value)
    assert_no_leaks(session)


# -- Parquet out ---------------------------------------------------------------------------


def test_write_parquet_round_trip(session: hs.Session, tmp_path: Path) -> None:
    data = facts()
    out = tmp_path / "out"
    job = session.job("parquet_out")
    result = job.from_arrow(data, parallelism=3).rebalance(mode="hybrid-full").write_parquet(out)
    assert sorted_rows(ds.dataset(out).to_table()).equals(sorted_rows(data))
    # the result is the manifest of files, one or more per subtask, not the data
    assert result.table.column_names == ["subtask", "path", "rows", "bytes"]
    assert sum(result.table.column("rows").to_pylist()) == ROWS
    assert sorted(os.listdir(out)) == sorted(
        os.path.basename(p) for p in result.table["path"].to_pylist()
    )
    sink = next(v for v in result.vertices.values() if v.rows_written)
    assert sink.rows_written == ROWS and sink.files_written == result.table.num_rows
    assert_no_leaks(session)


def test_write_parquet_aggregate_then_read_back(session: hs.Session, tmp_path: Path) -> None:
    data = facts()
    out = tmp_path / "agg"
    job = session.job("parquet_agg")
    source = job.from_arrow(data)
    source.key_by("k").aggregate({"amount": ["sum", "count"]}).write_parquet(out)
    again = session.job("parquet_again").from_parquet(out).collect().table
    assert sorted_rows(again).equals(aggregate(data))


def test_write_parquet_refuses_a_full_directory_unless_overwrite(
    session: hs.Session, tmp_path: Path
) -> None:
    out = tmp_path / "twice"
    first = pa.table({"x": [1, 2, 3]})
    second = pa.table({"x": [4, 5]})
    session.job("w1").from_arrow(first).write_parquet(out)
    with pytest.raises(hs.PlanError, match="already holds"):
        session.job("w2").from_arrow(second).write_parquet(out)
    session.job("w3").from_arrow(second).write_parquet(out, mode="overwrite")
    assert sorted(ds.dataset(out).to_table()["x"].to_pylist()) == [4, 5]
    with pytest.raises(hs.PlanError, match="not a write mode"):
        session.job("w4").from_arrow(second).write_parquet(tmp_path / "m", mode="append")


# -- Ray Data ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["pipelined", "blocking", "hybrid-selective"])
def test_ray_data_in_and_out_through_a_shuffle(session: hs.Session, mode: str) -> None:
    data = facts()
    dataset = ray.data.from_arrow([data.slice(0, 25_000), data.slice(25_000)])
    job = session.job(f"ray_data_{mode}")
    stream = (
        job.from_ray_data(dataset).key_by("k", mode=mode).aggregate({"amount": ["sum", "count"]})
    )
    out = stream.to_ray_data()
    assert isinstance(out, ray.data.Dataset)
    got = pa.concat_tables([ray.get(ref) for ref in out.to_arrow_refs()])
    assert sorted_rows(got).equals(aggregate(data))
    # the result was handed over as refs, not read into the driver and put back
    handed = job.run(stream, blocks=True)
    assert handed.blocks and handed.table.num_rows == 0
    del out, got, handed
    assert_no_leaks(session)


def test_to_ray_data_of_an_empty_result(session: hs.Session) -> None:
    job = session.job("ray_data_empty")
    out = job.from_arrow(facts(100)).filter(pc.field("k") < 0).to_ray_data()
    assert out.count() == 0
    del out
    assert_no_leaks(session)


def test_from_ray_data_refuses_python_objects(session: hs.Session) -> None:
    objects = ray.data.from_items([{"x": object()}, {"x": object()}])
    with pytest.raises(hs.PlanError, match="column 'x' holds Python objects"):
        session.job("ray_data_bad").from_ray_data(objects)
    with pytest.raises(hs.PlanError, match=r"pass a ray\.data\.Dataset"):
        session.job("ray_data_bad").from_ray_data(facts(10))
