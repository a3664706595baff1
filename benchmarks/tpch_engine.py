"""TPC-H Q1, Q3 and Q6 written with the engine: ``from_parquet``, its operators and ``sql``.

Each builder takes a job, the Parquet file of every table and the parallelism, and
returns the stream whose ``collect()`` is the query's answer, in the query's column
order (and row order, where the query has an ORDER BY).  The per-row expressions,
date filters and group-bys are DuckDB SQL run by the engine's tasks
(``Stream.sql``: over each subtask's input, named ``input``); exchanges, joins and
the final order are the engine's.  Sources read only the columns their query
uses.  The plans, as Spark would run them on 2 cores:

* **Q1**: ``lineitem`` -> chained ``sql`` (date filter, the four sums, the
  discount sum and the count per flag and status: a partial aggregate per source
  subtask) -> hash exchange on (flag, status) -> ``sql`` merging the partials (the
  sums, and each mean as the sum of sums over the sum of counts, never a mean of
  means) -> ``sort`` on (flag, status).
* **Q3**: ``customer`` -> ``sql`` (the BUILDING segment; ``c_custkey`` named
  ``o_custkey`` for the join); ``orders`` -> ``sql`` (date filter; ``o_orderkey``
  named ``l_orderkey`` for the join) -> semi join with those customers (30,000 rows
  at SF1) on the customer key; ``lineitem`` -> ``sql`` (date filter, ``volume =
  l_extendedprice * (1 - l_discount)``) -> inner join with those orders (147,000
  rows) on the order key.  Both joins broadcast their small side, as Spark's
  BroadcastHashJoin does (``strategy="broadcast"``: ``lineitem`` and ``orders`` are
  not moved), so the joined rows are then hashed on the order key -> ``sql``,
  revenue per order and the subtask's top 10 -> one partition -> ``sql``, the global
  top 10.  With ``strategy="hash"`` both sides of each join are hash-partitioned
  instead, and the revenue per order is chained to the join (its subtask already
  holds every row of its orders).
* **Q6**: ``lineitem`` -> ``filter`` (a pyarrow expression: discount and quantity)
  -> chained ``sql`` (the date filter and the partial sum) -> one partition -> ``sql``
  summing the partials.

The segment of Q3 is filtered in SQL, not with ``filter``: ``tpchgen-cli`` writes its
strings as ``string_view``, and pyarrow 26 has no ``equal`` kernel for a
``string_view`` column against a string, nor an ``array_filter`` kernel for one (so a
``filter`` of any table holding a ``string_view`` column fails).  Q6's ``filter`` reads
decimal columns only, compared with scalars of the column's own type (a bare ``24``
would need a wider decimal than pyarrow gives).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc

import hybrid_shuffle as hs

__all__ = ["QUERIES", "q1", "q3", "q6"]

Builder = Callable[[hs.Job, Mapping[str, str], int], hs.Stream]

Q1_PARTIAL = """
SELECT l_returnflag, l_linestatus,
       sum(l_quantity) AS sum_qty,
       sum(l_extendedprice) AS sum_base_price,
       sum(l_extendedprice * (1 - l_discount)) AS sum_disc_price,
       sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) AS sum_charge,
       sum(l_discount) AS sum_disc,
       count(*) AS count_order
FROM input
WHERE l_shipdate <= DATE '1998-09-02'
GROUP BY l_returnflag, l_linestatus
"""

Q1_FINAL = """
SELECT l_returnflag, l_linestatus,
       sum(sum_qty) AS sum_qty,
       sum(sum_base_price) AS sum_base_price,
       sum(sum_disc_price) AS sum_disc_price,
       sum(sum_charge) AS sum_charge,
       CAST(sum(sum_qty) AS DOUBLE) / sum(count_order) AS avg_qty,
       CAST(sum(sum_base_price) AS DOUBLE) / sum(count_order) AS avg_price,
       CAST(sum(sum_disc) AS DOUBLE) / sum(count_order) AS avg_disc,
       CAST(sum(count_order) AS BIGINT) AS count_order
FROM input
GROUP BY l_returnflag, l_linestatus
"""

Q3_CUSTOMER = "SELECT c_custkey AS o_custkey FROM input WHERE c_mktsegment = 'BUILDING'"

Q3_ORDERS = """
SELECT o_orderkey AS l_orderkey, o_custkey, o_orderdate, o_shippriority
FROM input
WHERE o_orderdate < DATE '1995-03-15'
"""

Q3_LINEITEM = """
SELECT l_orderkey, l_extendedprice * (1 - l_discount) AS volume
FROM input
WHERE l_shipdate > DATE '1995-03-15'
"""

Q3_TOP = """
SELECT l_orderkey, sum(volume) AS revenue, o_orderdate, o_shippriority
FROM input
GROUP BY l_orderkey, o_orderdate, o_shippriority
ORDER BY revenue DESC, o_orderdate
LIMIT 10
"""

Q3_FINAL = "SELECT * FROM input ORDER BY revenue DESC, o_orderdate LIMIT 10"

Q6_PARTIAL = """
SELECT sum(l_extendedprice * l_discount) AS revenue
FROM input
WHERE l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1995-01-01'
"""


def _price(text: str) -> pa.Scalar:
    """A ``decimal128(15, 2)`` scalar, the type of TPC-H's quantities and prices."""
    return pa.scalar(Decimal(text), pa.decimal128(15, 2))


Q6_FILTER = (
    (pc.field("l_discount") >= _price("0.05"))
    & (pc.field("l_discount") <= _price("0.07"))
    & (pc.field("l_quantity") < _price("24"))
)

Q6_FINAL = "SELECT sum(revenue) AS revenue FROM input"


def q1(job: hs.Job, paths: Mapping[str, str], parallelism: int) -> hs.Stream:
    columns = ["l_returnflag", "l_linestatus", "l_quantity", "l_extendedprice",
               "l_discount", "l_tax", "l_shipdate"]  # fmt: skip
    lineitem = job.from_parquet(
        paths["lineitem"], name="lineitem", parallelism=parallelism, columns=columns
    )
    partial = lineitem.sql(Q1_PARTIAL, name="q1_partial")
    keyed = partial.key_by("l_returnflag", "l_linestatus", edge="by_flag", partitions=parallelism)
    final = keyed.sql(Q1_FINAL, name="q1_final")
    return final.sort(["l_returnflag", "l_linestatus"], edge="to_sort", name="q1_sort")


def q3(
    job: hs.Job, paths: Mapping[str, str], parallelism: int, strategy: str = "broadcast"
) -> hs.Stream:
    customer = job.from_parquet(
        paths["customer"], name="customer", parallelism=parallelism,
        columns=["c_custkey", "c_mktsegment"],
    )  # fmt: skip
    building = customer.sql(Q3_CUSTOMER, name="building")
    orders = job.from_parquet(
        paths["orders"], name="orders", parallelism=parallelism,
        columns=["o_orderkey", "o_custkey", "o_orderdate", "o_shippriority"],
    ).sql(Q3_ORDERS, name="orders_before")  # fmt: skip
    # a broadcast join runs in as many subtasks as its probe side (no partitions=)
    partitions = None if strategy == "broadcast" else parallelism
    their_orders = orders.join(
        building, on="o_custkey", how="semi", name="building_orders",
        partitions=partitions, strategy=strategy,
    )  # fmt: skip
    lineitem = job.from_parquet(
        paths["lineitem"], name="lineitem", parallelism=parallelism,
        columns=["l_orderkey", "l_extendedprice", "l_discount", "l_shipdate"],
    ).sql(Q3_LINEITEM, name="lineitem_after")  # fmt: skip
    joined = lineitem.join(
        their_orders, on="l_orderkey", name="lines_orders", partitions=partitions,
        strategy=strategy,
    )  # fmt: skip
    if strategy == "broadcast":  # an order's lines may lie in two source splits
        local_top = joined.key_by("l_orderkey", edge="by_order").sql(Q3_TOP, name="q3_local_top")
    else:
        local_top = joined.sql(Q3_TOP, name="q3_local_top")
    return local_top.rebalance(edge="to_one", partitions=1).sql(Q3_FINAL, name="q3_top")


def q6(job: hs.Job, paths: Mapping[str, str], parallelism: int) -> hs.Stream:
    columns = ["l_extendedprice", "l_discount", "l_quantity", "l_shipdate"]
    lineitem = job.from_parquet(
        paths["lineitem"], name="lineitem", parallelism=parallelism, columns=columns
    )
    partial = lineitem.filter(Q6_FILTER, name="q6_filter").sql(Q6_PARTIAL, name="q6_partial")
    return partial.rebalance(edge="to_one", partitions=1).sql(Q6_FINAL, name="q6_sum")


#: TPC-H query number -> its engine plan
QUERIES: dict[int, Builder] = {1: q1, 3: q3, 6: q6}
