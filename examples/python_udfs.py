"""Python UDFs of a PySpark job, run in the engine's tasks instead of Spark's Python workers.

    .venv/bin/python examples/python_udfs.py [--rows 1000000]

A Parquet table of orders goes through a pandas UDF (a vectorized net price from
two columns), a row-at-a-time ``@udf`` (a size class), ``groupBy().applyInPandas``
(each customer's largest orders, one call per customer) and an aggregate.  The
same DataFrame runs in Spark and through ``Session.from_dataframe``; the answers
are compared row for row, and ``explain()`` shows the functions as ``python_<id>``
steps of the engine's vertices, with nothing left to Spark.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import functions as F
from pyspark.sql.functions import pandas_udf, udf
from pyspark.sql.types import DoubleType, StringType

import hybrid_shuffle as hs


@pandas_udf(DoubleType())
def net_price(price: pd.Series, discount: pd.Series) -> pd.Series:
    """Vectorized: one call per batch of up to maxRecordsPerBatch rows."""
    return price * (1.0 - discount)


@udf(StringType())
def size_class(quantity: int | None) -> str | None:
    """Row at a time, as a plain @udf is."""
    if quantity is None:
        return None
    return "bulk" if quantity >= 40 else "small"


def largest_orders(orders: pd.DataFrame) -> pd.DataFrame:
    """applyInPandas: each customer's group whole, its three largest orders kept."""
    top = orders.nlargest(3, "net")
    return top[["customer", "size", "net"]]


def orders_table(rows: int, seed: int = 11) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "customer": rng.integers(0, max(rows // 50, 1), rows),
            "price": rng.gamma(2.0, 400.0, rows),
            "discount": rng.integers(0, 11, rows) / 100.0,
            "quantity": rng.integers(1, 51, rows),
        }
    )


def pipeline(spark: object, path: str) -> object:
    """The job as a PySpark user writes it."""
    orders = spark.read.parquet(path)  # type: ignore[attr-defined]
    priced = orders.withColumn("net", net_price("price", "discount")).withColumn(
        "size", size_class("quantity")
    )
    top = priced.groupBy("customer").applyInPandas(
        largest_orders, "customer long, size string, net double"
    )
    return top.groupBy("size").agg(
        F.count("*").alias("orders"), F.round(F.sum("net"), 2).alias("net")
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=lambda s: int(float(s)), default=1_000_000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder, hs.Session() as session:
        path = str(Path(folder) / "orders.parquet")
        pq.write_table(orders_table(args.rows), path)
        df = pipeline(session.spark, path)

        started = time.perf_counter()
        want = sorted(tuple(r) for r in df.collect())  # type: ignore[attr-defined]
        spark_seconds = time.perf_counter() - started

        started = time.perf_counter()
        stream = session.from_dataframe(df, name="python-udfs")
        table = stream.collect().table
        engine_seconds = time.perf_counter() - started
        got = sorted(zip(*(c.to_pylist() for c in table.columns), strict=True))

        print(stream.explain())
        print(f"Spark {spark_seconds:.2f} s, engine {engine_seconds:.2f} s")
        for row in got:
            print("  ", row)
        if stream.explain_data()["spark_subtrees"]:
            print("something ran in Spark:", stream.explain_data()["spark_subtrees"])
            return 1
        if got != want:
            print(f"MISMATCH: engine {got} against Spark {want}")
            return 1
        print("equal to Spark's answer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
