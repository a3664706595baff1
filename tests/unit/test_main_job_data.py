"""The main job's orders Parquet (``examples/main_job.py``): written once per scale and
data version, found by its stamp afterwards, and the rows its generator defines."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

import main_job


def test_orders_are_written_once_and_found_by_their_stamp(tmp_path: Path) -> None:
    folder, written = main_job.cached_orders(0.001, tmp_path)
    assert written and folder == tmp_path / "scale-0.001" / "orders"
    first = (folder / "part-0.parquet").stat().st_mtime_ns
    again, written = main_job.cached_orders(0.001, tmp_path)
    assert again == folder and not written
    assert (folder / "part-0.parquet").stat().st_mtime_ns == first
    # nothing half-written left beside it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scale-0.001"]


def test_a_new_data_version_writes_the_orders_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    main_job.cached_orders(0.001, tmp_path)
    monkeypatch.setattr(main_job, "DATA_VERSION", main_job.DATA_VERSION + 1)
    folder, written = main_job.cached_orders(0.001, tmp_path)
    assert written
    assert f"version {main_job.DATA_VERSION}," in (folder.parent / "STAMP").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scale-0.001"]


def test_the_orders_have_the_schema_spark_is_given_and_the_generated_rows() -> None:
    table = main_job.orders_table(0.001)  # 150 customers, 1,500 orders
    kinds = {"bigint": pa.int64(), "decimal(12,2)": pa.decimal128(12, 2)}
    kinds |= {"date": pa.date32(), "string": pa.string()}
    assert table.schema == pa.schema([(n, kinds[k]) for n, k in main_job.ORDERS_COLUMNS])
    assert table.num_rows == 1_500
    row = table.slice(40, 1).to_pylist()[0]  # o_orderkey 41
    assert row["o_custkey"] == (41 * 2654435761) % 153 + 1
    assert str(row["o_totalprice"]) == f"{((41 * 40503) % 500_000 + 90_000) / 100:.2f}"
    assert row["o_orderdate"].isoformat() == "1992-02-11"  # 41 days after 1992-01-01
    assert row["o_orderstatus"] == "P"  # 41 % 3 == 2


def test_the_written_file_has_row_groups_for_the_source_subtasks(tmp_path: Path) -> None:
    folder, _ = main_job.cached_orders(0.1, tmp_path)
    meta = pq.ParquetFile(folder / "part-0.parquet").metadata
    assert meta.num_rows == 150_000 and meta.num_row_groups >= 2
