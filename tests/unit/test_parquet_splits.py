"""``deal_splits``: row groups dealt into contiguous splits of about equal rows; what a
split reads."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from hybrid_shuffle.operators.sql import SqlQuery
from hybrid_shuffle.sources.parquet import ParquetSource, ParquetSplit, deal_splits


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


# -- what DuckDB reads of a split (``sources.duck_scan``) -----------------------------------


def _files(tmp_path: Path, table: pa.Table, files: int = 2, **write: object) -> Path:
    """``table`` in ``files`` files of row groups of 10 rows."""
    root = tmp_path / "in"
    root.mkdir()
    each = table.num_rows // files
    for n in range(files):
        part = table.slice(n * each, each)
        pq.write_table(part, root / f"f{n}.parquet", row_group_size=10, **write)  # type: ignore[arg-type]
    return root


def _duck_rows(split: ParquetSplit) -> pa.Table:
    assert split.scan is not None
    return duckdb.connect().sql(split.scan.sql()).to_arrow_table()


def test_duckdb_reads_each_split_as_its_row_groups(tmp_path: Path) -> None:
    """Splits cut inside files and across them: DuckDB's rows are pyarrow's, one row
    range per file, and a whole file needs no range."""
    table = pa.table({"i": pa.array(range(80)), "s": pa.array([f"v{i % 7}" for i in range(80)])})
    source = ParquetSource(str(_files(tmp_path, table)), "facts", None, None)
    splits = source.splits(3, ["s", "i"])
    for split in splits:
        assert split.scan is not None and split.scan.columns == ("s", "i")
        assert [r.path for r in split.scan.ranges] == sorted({r.path for r in split.scan.ranges})
        pyarrow_rows = pa.concat_tables(split.read())
        assert _duck_rows(split).equals(pyarrow_rows)
        assert split.scan.rows == pyarrow_rows.num_rows
    assert sum(s.scan.rows for s in splits if s.scan) == 80
    whole = source.splits(1, None)[0].scan
    assert whole is not None and all(r.whole for r in whole.ranges)
    assert "file_row_number" not in whole.sql()


@pytest.mark.parametrize(
    ("column", "write", "fuses"),
    [
        (pa.array(range(40), pa.int64()), {}, True),
        (pa.array([f"x{i}" for i in range(40)], pa.string_view()), {}, True),
        (pa.array(range(40), pa.uint32()), {}, True),
        (pa.array(range(40), pa.int64()).cast(pa.decimal128(25, 3)), {}, True),
        (pa.array([f"x{i % 3}" for i in range(40)]).dictionary_encode(), {}, False),
        (pa.array(range(40), pa.timestamp("ns")), {"use_deprecated_int96_timestamps": True}, False),
        (pa.array(range(40), pa.timestamp("us", tz="UTC")), {}, False),
        (pa.array([f"x{i}" for i in range(40)], pa.large_string()), {}, False),
    ],
    ids=["int64", "string_view", "uint32", "decimal", "dictionary", "int96", "tz", "large"],
)
def test_duckdb_reads_a_split_only_as_pyarrow_types_it(
    tmp_path: Path, column: pa.Array, write: dict[str, object], fuses: bool
) -> None:
    table = pa.table({"a": column, "n": pa.array(range(40))})
    source = ParquetSource(str(_files(tmp_path, table, **write)), "typed", None, None)
    split = source.splits(1, None)[0]
    assert (split.scan is not None) is fuses
    if fuses:
        assert _duck_rows(split).equals(pa.concat_tables(split.read()))


def test_no_duckdb_scan_for_a_filter_a_dataset_no_column_or_other_files(tmp_path: Path) -> None:
    table = pa.table({"i": pa.array(range(40)), "j": pa.array(range(40))})
    root = _files(tmp_path, table)
    assert ParquetSource(str(root), "x", None, None).splits(2, None)[0].scan is not None
    filtered = ParquetSource(str(root), "x", None, pc.field("i") > 3)
    assert all(s.scan is None for s in filtered.splits(2, None))
    opened = ParquetSource(ds.dataset(str(root)), "x", None, None)
    assert all(s.scan is None for s in opened.splits(2, None))
    assert all(s.scan is None for s in ParquetSource(str(root), "x", [], None).splits(2, None))
    # files whose Parquet schemas differ (a column's type) are read by pyarrow
    other = pa.table({"i": pa.array(range(5), pa.int32()), "j": range(5)})
    pq.write_table(other, root / "z.parquet")
    assert all(s.scan is None for s in ParquetSource(str(root), "x", None, None).splits(2, None))
    # a split of no row group has nothing for DuckDB to read
    assert ParquetSource(str(root / "f0.parquet"), "x", None, None).splits(9, None)[-1].scan is None


@pytest.mark.parametrize("damage", ["removed", "truncated"])
def test_a_file_gone_after_the_splits_were_made_is_named(tmp_path: Path, damage: str) -> None:
    """The split's ``sql`` query reads it in DuckDB: one sentence naming the source and the
    file, not the query's error."""
    table = pa.table({"i": pa.array(range(40))})
    source = ParquetSource(str(_files(tmp_path, table)), "facts", None, None)
    split = source.splits(1, None)[0]
    gone = tmp_path / "in" / "f1.parquet"
    if damage == "removed":
        gone.unlink()
    else:
        gone.write_bytes(b"PAR1 not a footer")
    query = SqlQuery("SELECT sum(i) AS s FROM input", "agg")
    query.output_schema([source.schema])
    query.open()
    assert split.scan is not None
    query.read_input_from(split.scan)
    try:
        with pytest.raises(
            OSError, match=r"^from_parquet 'facts': cannot read .*f1\.parquet \("
        ) as e:
            list(query.finish())
    finally:
        query.close()
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("columns", [None, ["k", "part"], ["v"], []])
def test_a_split_read_in_another_process_gives_the_same_rows_hive_partitions_too(
    tmp_path: Path, columns: list[str] | None
) -> None:
    """A split travels as its files' paths, row-group ids and partition expressions
    (``_Fragments``), not as pyarrow's fragments: what it reads after the trip is what
    it read before, partition columns included."""
    import pickle

    table = pa.table({"k": list(range(60)), "v": [i * 0.5 for i in range(60)]})
    table = table.append_column("part", pa.array(["a", "b", "c"] * 20))
    ds.write_dataset(
        table,
        tmp_path / "data",
        format="parquet",
        partitioning=["part"],
        partitioning_flavor="hive",
        file_options=ds.ParquetFileFormat().make_write_options(),
        max_rows_per_group=7,
    )
    source = ParquetSource(str(tmp_path / "data"), "parts", None, None)
    for split in source.splits(2, columns):
        back = pickle.loads(pickle.dumps(split))
        assert len(back.fragments) == len(split.fragments)
        before, after = pa.concat_tables(split.read()), pa.concat_tables(back.read())
        assert after.equals(before)
    rows = [pa.concat_tables(pickle.loads(pickle.dumps(s)).read()) for s in source.splits(2, None)]
    got = pa.concat_tables(rows).sort_by("k")
    assert got.column("part").to_pylist() == [str(p) for p in table.column("part").to_pylist()]
