"""``deal_splits``: row groups dealt into contiguous splits of about equal rows; what a
split reads."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hybrid_shuffle.sources.parquet import ParquetSource, deal_splits


def test_equal_row_groups_deal_evenly() -> None:
    assert deal_splits([10] * 6, 3) == [[0, 1], [2, 3], [4, 5]]


def test_order_is_kept_and_every_fragment_dealt_once() -> None:
    rows = [7, 100, 3, 3, 50, 1, 20]
    groups = deal_splits(rows, 3)
    assert [i for g in groups for i in g] == list(range(len(rows)))


def test_one_large_fragment_does_not_starve_the_others() -> None:
    groups = deal_splits([100, 10, 10, 10, 10], 2)
    assert groups == [[0], [1, 2, 3, 4]]


def test_more_splits_than_fragments_leaves_some_empty() -> None:
    groups = deal_splits([5, 5], 4)
    assert sorted(len(g) for g in groups) == [0, 0, 1, 1]


def test_no_fragments_and_no_rows() -> None:
    assert deal_splits([], 2) == [[], []]
    assert deal_splits([0, 0, 0, 0], 2) == [[0, 1], [2, 3]]


def test_parallelism_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        deal_splits([1], 0)


def test_view_columns_are_read_as_plain_strings_duckdb_can_filter(tmp_path: Path) -> None:
    """Files written with ``string_view`` (tpchgen-cli's) are read as ``string``: DuckDB
    pushes a join's filter into an Arrow scan as a pyarrow comparison with a plain string,
    which has no kernel for views (TPC-DS q41 failed on the data)."""
    path = tmp_path / "views.parquet"
    table = pa.table(
        {"s": pa.array(["a", "b", None], pa.string_view()), "b": pa.array([b"x", b"y", b"z"])}
    )
    pq.write_table(table.cast(pa.schema([("s", pa.string_view()), ("b", pa.binary_view())])), path)
    source = ParquetSource(str(path), "views", None, None)
    (read,) = list(source.splits(1, None)[0].read())
    assert source.schema.types == [pa.string(), pa.binary()]
    assert read.schema.types == [pa.string(), pa.binary()]
    assert read.column("s").to_pylist() == ["a", "b", None]
    connection = duckdb.connect()
    connection.register("read", read)
    connection.register("probe", pa.table({"s": pa.array(["a", "q"])}))
    found = connection.sql("SELECT r.s FROM read r JOIN probe p ON r.s = p.s").fetchall()
    assert found == [("a",)]
