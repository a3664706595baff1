"""Rows of no column (issue 33): DuckDB takes no Arrow table of no column, so a query over
one, a Parquet read of none, and a fallback reason stay usable without Spark."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from hybrid_shuffle.empty_column import EMPTY_COLUMN
from hybrid_shuffle.operators.sql import SqlQuery, rejection
from hybrid_shuffle.sources.parquet import ParquetSource
from hybrid_shuffle.sparkplan.translate import _sentence


def test_query_over_a_table_of_no_column_counts_its_rows() -> None:
    query = SqlQuery("SELECT count(*) AS n FROM input", "count")
    assert query.output_schema([pa.schema([])]) == pa.schema([("n", pa.int64())])
    query.open()
    try:
        rows = pa.table({"a": [1, 2, 3]}).select([])
        out = [*query.process(rows), *query.process(rows), *query.finish()]
    finally:
        query.close()
    assert pa.concat_tables(out).column("n").to_pylist() == [6]


def test_parquet_read_of_no_column_yields_a_placeholder_per_row(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"x": list(range(10))}), path, row_group_size=3)
    source = ParquetSource(str(path), "t", [], None)
    assert source.schema.names == [EMPTY_COLUMN]
    tables = [t for split in source.splits(2, None) for t in split.read()]
    assert sum(t.num_rows for t in tables) == 10
    assert all(t.column_names == [EMPTY_COLUMN] for t in tables)


def test_rejection_is_duckdbs_first_line() -> None:
    tables = {"__hs_input_0__": pa.schema([("y", pa.int32())])}
    assert rejection("SELECT y FROM __hs_input_0__", tables) is None
    found = rejection("SELECT y FROM __hs_input_0__ LIMIT -1", tables)
    assert found is not None and found.startswith("Binder Error:") and "\n" not in found


def test_fallback_reason_is_one_sentence_without_json() -> None:
    raw = "the join type {'product-class': 'x.ExistenceJoin', 'exists': [{'class': 'y'}]}"
    assert _sentence(raw) == "the join type (details omitted)"
    assert _sentence("first line\nsecond") == "first line"
    assert len(_sentence("x" * 1000)) == 300
