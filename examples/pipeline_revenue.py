"""A pipeline file: TPC-H-like revenue per market segment and nation, in the Stream API.

The same job as ``examples/main_job.py`` (join the orders with their customers,
aggregate revenue per market segment and nation, sort by revenue, descending), but
written with the engine's own ``Stream`` API and named edges, as a pipeline file
(``hybrid_shuffle.pipeline_file``): ``SCHEMAS`` declares the two inputs,
``sources(job)`` has Spark generate them (``main_job.generate``) and hands them over
(``job.from_spark``), and ``build`` wires the job on them.  Its per-edge modes are in
``configs/pipeline_revenue.yaml``::

    hybrid-shuffle run examples/pipeline_revenue.py --config configs/pipeline_revenue.yaml
    hybrid-shuffle explain examples/pipeline_revenue.py --config configs/pipeline_revenue.yaml
    hybrid-shuffle validate --pipeline examples/pipeline_revenue.py configs/pipeline_revenue.yaml

``run`` checks the plan, then starts Ray and Spark, generates the data and runs the
job; ``explain`` and ``validate`` plan it on schema-only stand-ins of the inputs, in
a second, starting neither Ray nor Spark.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa

import hybrid_shuffle as hs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from main_job import generate

#: Spark generates 30,000 orders of 3,000 customers (``main_job.generate``'s scale)
SCALE = 0.02

#: the inputs' columns, as ``generate``'s DataFrames arrive from Spark
SCHEMAS = {
    "orders": pa.schema(
        [
            ("o_orderkey", pa.int64()),
            ("o_custkey", pa.int64()),
            ("o_totalprice", pa.decimal128(12, 2)),
            ("o_orderdate", pa.date32()),
            ("o_orderstatus", pa.string()),
        ]
    ),
    "customers": pa.schema(
        [
            ("c_custkey", pa.int64()),
            ("c_name", pa.string()),
            ("c_mktsegment", pa.string()),
            ("c_nationkey", pa.int32()),
        ]
    ),
}


def sources(job: hs.Job) -> dict[str, hs.Stream]:
    """The real inputs (only ``run`` calls this): Spark generates them, in config
    ``parallelism`` partitions, the source subtasks explain's stand-ins have too."""
    parallelism = job.session.config.parallelism
    orders, customers = generate(job.session.spark, scale=SCALE, partitions=parallelism)
    return {
        "orders": job.from_spark(orders, name="orders", parallelism=parallelism),
        "customers": job.from_spark(customers, name="customers", parallelism=parallelism),
    }


def build(session: hs.Session, orders: hs.Stream, customers: hs.Stream) -> hs.Stream:
    """Revenue per (segment, nation), highest first: the customers are broadcast to the
    orders' subtasks (edge ``customers.right``; the orders do not move), the join's
    output is combined per subtask and hash-exchanged by the group keys
    (``by_segment``), and the groups are range-exchanged into the sort (``to_sort``)."""
    joined = orders.rename({"o_custkey": "c_custkey"}, name="rename").join(
        customers, on="c_custkey", strategy="broadcast", edge="customers", name="join"
    )
    revenue = joined.key_by("c_mktsegment", "c_nationkey", edge="by_segment").aggregate(
        {"o_totalprice": ["sum", "count", "max"], "o_orderdate": ["min"]}, name="revenue"
    )
    return revenue.sort("o_totalprice_sum", descending=True, edge="to_sort", name="sort")
