"""``sources.opened_parquet``: a ``from_parquet`` source over files opened before reuses
their dataset and row-group fragments, and never once a file changed."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from hybrid_shuffle.sources.parquet import ParquetSource


def _rows(source: ParquetSource) -> list[int]:
    return [v for split in source.splits(1, None) for b in split.read() for v in b["x"].to_pylist()]


def _write(path: Path, values: list[int]) -> None:
    pq.write_table(pa.table({"x": pa.array(values, pa.int64())}), path, row_group_size=2)


def test_a_file_opened_again_reuses_its_fragments(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    _write(path, [1, 2, 3, 4, 5])
    first = ParquetSource(str(path), "t", None, None)
    again = ParquetSource(str(path), "t", ["x"], None)
    assert again.fragments is first.fragments
    assert _rows(again) == [1, 2, 3, 4, 5]


def test_a_rewritten_file_is_opened_anew(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    _write(path, [1, 2, 3])
    first = ParquetSource(str(path), "t", None, None)
    _write(path, [7, 8, 9, 10, 11, 12, 13])
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))  # a clock too coarse to tell
    again = ParquetSource(str(path), "t", None, None)
    assert again.fragments is not first.fragments
    assert _rows(again) == [7, 8, 9, 10, 11, 12, 13]


def test_a_file_added_to_a_directory_is_read(tmp_path: Path) -> None:
    _write(tmp_path / "a.parquet", [1, 2])
    assert _rows(ParquetSource(str(tmp_path), "d", None, None)) == [1, 2]
    _write(tmp_path / "b.parquet", [3])
    (tmp_path / "_SUCCESS").write_text("")  # skipped, as pyarrow's discovery skips it
    assert sorted(_rows(ParquetSource(str(tmp_path), "d", None, None))) == [1, 2, 3]


def test_a_source_with_a_filter_prunes_its_own_fragments(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    _write(path, [1, 2, 3, 4, 5])
    whole = ParquetSource(str(path), "t", None, None)
    filtered = ParquetSource(str(path), "t", None, pc.field("x") > 3)
    assert len(filtered.fragments) == 2 < len(whole.fragments)  # [3, 4] and [5] of 3
    assert _rows(filtered) == [4, 5]
