"""Scans of Hive-style partitioned Parquet tables (``key=value/`` folders, as
``df.write.partitionBy(...)`` writes them), against Spark itself: partition columns
typed as Spark infers them (int, string, date), a null partition
(``__HIVE_DEFAULT_PARTITION__``), queries with and without partition filters, and
counts.  Every one runs in the engine (no Spark subtree)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import hybrid_shuffle as hs

from .oracle import check_sql

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark(session: hs.Session, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A view ``pt`` over a table partitioned by ``p`` (int, with a null partition) and
    ``d`` (a date), written by Spark; and ``ps`` partitioned by a string ``s``."""
    spark = session.spark
    root = tmp_path_factory.mktemp("partitioned")
    rows = spark.range(0, 60).selectExpr(
        "id",
        "id * 1.5 AS x",
        "CASE WHEN id % 7 = 0 THEN NULL ELSE CAST(id % 3 AS INT) END AS p",
        "date_add(date '2024-01-30', CAST(id % 4 AS INT)) AS d",
        "concat('s', CAST(id % 5 AS STRING)) AS s",
    )
    rows.drop("s").write.partitionBy("p", "d").parquet(str(root / "pt"))
    rows.select("id", "s").write.partitionBy("s").parquet(str(root / "ps"))
    spark.read.parquet(str(root / "pt")).createOrReplaceTempView("pt")
    spark.read.parquet(str(root / "ps")).createOrReplaceTempView("ps")
    return spark


QUERIES = [
    "SELECT * FROM pt",
    "SELECT id, p FROM pt WHERE p = 1",
    "SELECT id, d FROM pt WHERE p IS NULL",
    "SELECT id, x FROM pt WHERE d >= date '2024-02-01' AND p < 2",
    "SELECT p, d, count(*) AS n, sum(x) AS sx FROM pt GROUP BY p, d",
    "SELECT count(*) FROM pt",
    "SELECT count(*) FROM pt WHERE p = 2",
    "SELECT id FROM pt WHERE p = 5",
    "SELECT id, x FROM pt WHERE id > 50",
    "SELECT s, count(*) FROM ps GROUP BY s",
    "SELECT id FROM ps WHERE s IN ('s1', 's3')",
    "SELECT pt.id, ps.s FROM pt JOIN ps ON pt.id = ps.id WHERE pt.p = 0 AND ps.s > 's2'",
]


@pytest.mark.parametrize("query", QUERIES)
def test_partitioned_scan_in_the_engine(session: hs.Session, spark: Any, query: str) -> None:
    stream = check_sql(session, spark, query)
    assert stream.explain_data()["spark_subtrees"] == []


def test_partition_columns_typed_as_spark_types_them(session: hs.Session, spark: Any) -> None:
    assert spark.table("pt").schema.simpleString().endswith(",p:int,d:date>")
    table = session.sql("SELECT p, d FROM pt WHERE p IS NULL").to_arrow()
    assert table.schema.types == [pa.int32(), pa.date32()]
    assert set(table.column("p").to_pylist()) == {None}


def test_catalog_table_with_pruned_partitions(
    session: hs.Session, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A catalog table's pruned file index lists partition folders, not the table's: the
    folder is found from the files and the partition depth."""
    root = tmp_path_factory.mktemp("catalog") / "pc"
    rows = spark.range(0, 30).selectExpr("id", "CAST(id % 3 AS INT) AS p")
    rows.write.partitionBy("p").parquet(str(root))
    spark.sql("DROP TABLE IF EXISTS pc")
    spark.sql(
        f"CREATE TABLE pc (id BIGINT, p INT) USING parquet PARTITIONED BY (p) LOCATION '{root}'"
    )
    spark.sql("ALTER TABLE pc RECOVER PARTITIONS")
    for query in (
        "SELECT id, p FROM pc WHERE p = 1",
        "SELECT p, count(*) FROM pc WHERE p > 0 GROUP BY p",
    ):
        stream = check_sql(session, spark, query)
        assert stream.explain_data()["spark_subtrees"] == []
