"""The Spark corpus's own queries (``benchmarks.spark_corpus``): the shapes issue 33 names
(duplicate column names, set operations with ALL, grouping sets, windows, EXISTS/IN
under OR, cross joins, OFFSET, timestamps, partitioned Parquet, decimal arithmetic,
PIVOT, first/last with FILTER) over a few small views made here.

``create_views(spark, folder)`` makes the ``c33_*`` temporary views (a partitioned
Parquet table is written under ``folder``); ``QUERIES`` are (name, SQL) pairs over them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["QUERIES", "create_views"]

_VIEWS = {
    "c33_emp": """
        SELECT id, name, dept, CAST(salary AS DECIMAL(10, 2)) AS salary, CAST(hired AS DATE)
               AS hired, CAST(ts AS TIMESTAMP) AS ts, score, mgr
        FROM VALUES
          (1, 'ann', 'eng', 120.50, '2020-01-15', '2020-01-15 09:30:00', 1.5, NULL),
          (2, 'bob', 'eng', 99.99, '2021-03-01', '2021-03-01 18:45:10', 2.25, 1),
          (3, 'cat', 'ops', 75.00, '2019-07-04', '2019-07-04 00:00:01', NULL, 1),
          (4, 'dan', 'ops', 75.00, '2022-11-30', '2022-11-30 23:59:59', -0.0, 3),
          (5, 'eve', NULL, 50.25, NULL, NULL, 0.0, 3),
          (6, 'fay', 'hr', NULL, '2018-02-28', '2018-02-28 12:00:00', double('NaN'), 2),
          (7, 'gus', 'eng', 130.00, '2023-05-05', '2023-05-05 05:05:05', 7.75, 1),
          (8, 'hal', 'hr', 60.10, '2020-12-31', '2020-12-31 23:00:00', 3.0, 6)
        AS t(id, name, dept, salary, hired, ts, score, mgr)""",
    "c33_dept": """
        SELECT * FROM VALUES (1, 'eng', 'Engineering'), (2, 'ops', 'Operations'),
          (3, 'hr', 'People'), (4, 'fin', 'Finance') AS t(id, dept, title)""",
    "c33_a": "SELECT * FROM VALUES (1, 'x'), (1, 'x'), (2, 'y'), (3, NULL), (NULL, 'z') AS t(k, v)",
    "c33_b": "SELECT * FROM VALUES (1, 'x'), (2, 'y'), (2, 'y'), (4, 'w'), (NULL, 'z') AS t(k, v)",
    "c33_sales": """
        SELECT * FROM VALUES
          (2022, 'Q1', 'north', CAST(10.50 AS DECIMAL(10, 2))), (2022, 'Q2', 'north', 20.25),
          (2022, 'Q1', 'south', 5.00), (2023, 'Q1', 'north', 7.75), (2023, 'Q3', 'south', 1.10),
          (2023, 'Q4', 'south', NULL), (2024, 'Q2', 'east', 3.33)
        AS t(year, quarter, region, amount)""",
    "c33_dec": """
        SELECT CAST(a AS DECIMAL(38, 18)) AS a, CAST(b AS DECIMAL(10, 2)) AS b,
               CAST(c AS DECIMAL(5, 0)) AS c, i
        FROM VALUES ('1.123456789123456789', '12345678.91', '3', 7),
          ('-0.000000000000000001', '-0.01', '-99999', -3),
          ('99999999999999999999.999999999999999999', '0.00', '1', 0),
          (NULL, '1.50', NULL, 2) AS t(a, b, c, i)""",
    "c33_f": """
        SELECT * FROM VALUES (1.0D, 'a'), (-0.0D, 'a'), (0.0D, 'b'), (double('NaN'), 'b'),
          (double('NaN'), 'c'), (NULL, 'c'), (2.5D, 'a') AS t(x, g)""",
    "c33_events": """
        SELECT id, CAST(at AS TIMESTAMP) AS at, kind FROM VALUES
          (1, '2024-02-29 10:15:30', 'open'), (1, '2024-03-01 00:00:00', 'close'),
          (2, '2023-12-31 23:59:59.123456', 'open'), (3, '1970-01-01 00:00:00', 'open'),
          (3, NULL, 'close') AS t(id, at, kind)""",
}


def create_views(spark: Any, folder: Path) -> None:
    """Make the ``c33_*`` views, and ``c33_psales``: ``c33_sales`` written as Parquet
    partitioned by ``year`` and ``region`` (Hive-style folders) under ``folder``."""
    for name, text in _VIEWS.items():
        spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW {name} AS {text}")
    target = folder / "c33_psales"
    spark.table("c33_sales").write.mode("overwrite").partitionBy("year", "region").parquet(
        str(target)
    )
    spark.read.parquet(str(target)).createOrReplaceTempView("c33_psales")


QUERIES: tuple[tuple[str, str], ...] = (
    # duplicate column names
    ("cross join star", "SELECT * FROM c33_a CROSS JOIN c33_dept"),
    ("join dup names", "SELECT * FROM c33_emp e JOIN c33_dept d ON e.dept = d.dept"),
    ("using left join star", "SELECT a.*, b.* FROM c33_a a LEFT JOIN c33_b b USING (k)"),
    ("two counts", "SELECT count(*), count(1) FROM c33_emp"),
    ("same alias twice", "SELECT id AS x, mgr AS x FROM c33_emp"),
    ("natural join", "SELECT * FROM c33_a NATURAL JOIN c33_b"),
    ("full join using", "SELECT * FROM c33_a FULL OUTER JOIN c33_b USING (k, v)"),
    ("self join", "SELECT e.name, m.name FROM c33_emp e LEFT JOIN c33_emp m ON e.mgr = m.id"),
    # set operations
    ("intersect all", "SELECT * FROM c33_a INTERSECT ALL SELECT * FROM c33_b"),
    ("except all", "SELECT * FROM c33_a EXCEPT ALL SELECT * FROM c33_b"),
    ("intersect", "SELECT * FROM c33_a INTERSECT SELECT * FROM c33_b"),
    ("except", "SELECT k FROM c33_a EXCEPT SELECT k FROM c33_b"),
    ("union", "SELECT k, v FROM c33_a UNION SELECT k, v FROM c33_b"),
    ("union all", "SELECT k FROM c33_a UNION ALL SELECT id FROM c33_dept"),
    # grouping sets
    (
        "cube grouping",
        "SELECT year, region, sum(amount), grouping(year), grouping(region) FROM c33_sales "
        "GROUP BY CUBE(year, region) ORDER BY grouping(year), grouping(region), year, region",
    ),
    (
        "rollup grouping_id",
        "SELECT year, quarter, count(*), grouping_id() FROM c33_sales "
        "GROUP BY ROLLUP(year, quarter)",
    ),
    (
        "grouping sets",
        "SELECT dept, year(hired) AS y, avg(salary) FROM c33_emp "
        "GROUP BY GROUPING SETS ((dept), (year(hired)), ())",
    ),
    # windows
    (
        "lag lead",
        "SELECT id, dept, lag(salary) OVER (PARTITION BY dept ORDER BY id), "
        "lead(salary, 2, 0) OVER (PARTITION BY dept ORDER BY id) FROM c33_emp",
    ),
    ("ntile", "SELECT id, ntile(3) OVER (ORDER BY id) FROM c33_emp"),
    (
        "nth_value",
        "SELECT id, nth_value(name, 2) OVER (PARTITION BY dept ORDER BY id "
        "ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) FROM c33_emp",
    ),
    (
        "rank family",
        "SELECT id, rank() OVER w, dense_rank() OVER w, row_number() OVER w, "
        "percent_rank() OVER w, cume_dist() OVER w FROM c33_emp WINDOW w AS "
        "(PARTITION BY dept ORDER BY salary)",
    ),
    (
        "first last window",
        "SELECT id, first(salary) OVER (PARTITION BY dept ORDER BY id), "
        "last(salary, true) OVER (PARTITION BY dept ORDER BY id) FROM c33_emp",
    ),
    (
        "running sum",
        "SELECT id, sum(salary) OVER (ORDER BY id ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) "
        "FROM c33_emp",
    ),
    (
        "range frame",
        "SELECT id, count(*) OVER (ORDER BY salary RANGE BETWEEN 25 PRECEDING AND CURRENT ROW) "
        "FROM c33_emp",
    ),
    # subqueries
    (
        "exists under or",
        "SELECT id FROM c33_emp e WHERE salary > 100 OR EXISTS "
        "(SELECT 1 FROM c33_dept d WHERE d.dept = e.dept AND d.id = 3)",
    ),
    (
        "in under or",
        "SELECT id FROM c33_emp WHERE mgr IN (SELECT id FROM c33_dept) OR dept = 'hr'",
    ),
    ("not in", "SELECT k FROM c33_a WHERE k NOT IN (SELECT k FROM c33_b WHERE k IS NOT NULL)"),
    (
        "not exists",
        "SELECT * FROM c33_a a WHERE NOT EXISTS (SELECT * FROM c33_b b WHERE a.k = b.k)",
    ),
    ("scalar subquery", "SELECT name, salary - (SELECT avg(salary) FROM c33_emp) FROM c33_emp"),
    (
        "correlated scalar",
        "SELECT name, (SELECT max(salary) FROM c33_emp i WHERE i.dept = o.dept) FROM c33_emp o",
    ),
    # limits
    ("offset only", "SELECT * FROM c33_emp ORDER BY id OFFSET 3"),
    ("limit offset", "SELECT id FROM c33_emp ORDER BY id LIMIT 2 OFFSET 2"),
    ("count where false", "SELECT count(1) FROM c33_emp WHERE false"),
    ("count distinct constants", "SELECT count(DISTINCT 3, 2)"),
    ("count pruned scan", "SELECT count(*) FROM c33_psales"),
    # timestamps
    ("ts to date", "SELECT id, CAST(ts AS DATE), CAST(hired AS TIMESTAMP) FROM c33_emp"),
    ("ts to string", "SELECT CAST(ts AS STRING), CAST(at AS STRING) FROM c33_emp, c33_events"),
    ("date_trunc", "SELECT date_trunc('HOUR', at), date_trunc('MONTH', at) FROM c33_events"),
    ("extract", "SELECT hour(at), minute(at), second(at), extract(DOY FROM at) FROM c33_events"),
    ("date_format", "SELECT date_format(at, 'yyyy-MM-dd HH:mm:ss') FROM c33_events"),
    ("unix ts", "SELECT unix_timestamp(at), from_unixtime(unix_timestamp(at)) FROM c33_events"),
    ("ts interval", "SELECT at + INTERVAL 1 DAY, at - INTERVAL '2' HOUR FROM c33_events"),
    ("ts compare", "SELECT id FROM c33_events WHERE at >= TIMESTAMP '2024-01-01 00:00:00'"),
    ("ts group", "SELECT date(at), count(*) FROM c33_events GROUP BY date(at)"),
    ("string to ts", "SELECT to_timestamp('2024-05-06 07:08:09'), CAST('2024-05-06' AS TIMESTAMP)"),
    # partitioned parquet
    ("partition filter", "SELECT * FROM c33_psales WHERE year = 2023"),
    ("partition group", "SELECT region, sum(amount) FROM c33_psales GROUP BY region"),
    ("partition columns only", "SELECT DISTINCT year, region FROM c33_psales"),
    # decimal arithmetic
    ("decimal divide int", "SELECT a / 10, b / 3, c / 7 FROM c33_dec"),
    ("decimal multiply", "SELECT a * b, b * c, a * a FROM c33_dec"),
    ("decimal add", "SELECT a + b, b - c, a + 1 FROM c33_dec"),
    ("decimal mod", "SELECT b % 3, c % i, a % b FROM c33_dec"),
    ("decimal divide", "SELECT b / c, a / b, c / b FROM c33_dec"),
    ("decimal agg", "SELECT sum(b), avg(b), avg(a), sum(a) FROM c33_dec"),
    ("decimal literal", "SELECT CAST(1 AS DECIMAL(38, 18)) / 3, 1.1 * 2.22, 10.5BD / 4"),
    # pivot
    (
        "pivot",
        "SELECT * FROM (SELECT year, quarter, amount FROM c33_sales) "
        "PIVOT (sum(amount) FOR quarter IN ('Q1', 'Q2', 'Q3', 'Q4'))",
    ),
    (
        "pivot two aggs",
        "SELECT * FROM (SELECT region, year, amount FROM c33_sales) "
        "PIVOT (sum(amount) AS s, count(amount) AS c FOR year IN (2022, 2023))",
    ),
    # first / last with FILTER
    (
        "first last filter",
        "SELECT dept, first(name) FILTER (WHERE salary > 70), last(name, true) "
        "FILTER (WHERE id > 2) FROM (SELECT * FROM c33_emp ORDER BY id) GROUP BY dept",
    ),
    ("count filter", "SELECT dept, count(*) FILTER (WHERE salary > 80) FROM c33_emp GROUP BY dept"),
    # floating point keys
    ("group by double", "SELECT x, count(*) FROM c33_f GROUP BY x"),
    ("join on double", "SELECT a.g, b.g FROM c33_f a JOIN c33_f b ON a.x = b.x"),
    ("double to string", "SELECT CAST(x AS STRING), CAST(score AS STRING) FROM c33_f, c33_emp"),
    ("distinct double", "SELECT DISTINCT x FROM c33_f"),
    # bitwise, arrays, maps
    ("bitwise", "SELECT id & 3, id | 8, id ^ 5, ~id, shiftleft(id, 2) FROM c33_emp"),
    ("arrays", "SELECT array(id, mgr), size(array(id, mgr)), array(id)[0] FROM c33_emp"),
    ("element_at", "SELECT element_at(array(1, 2, 3), id % 4) FROM c33_emp WHERE id < 4"),
    ("map literal", "SELECT map(1, 2), 'str' UNION ALL SELECT map(3, 4), 'x'"),
    ("interval column", "SELECT INTERVAL '1' DAY + INTERVAL '2' HOUR"),
    # misc shapes
    (
        "having order",
        "SELECT dept, sum(salary) s FROM c33_emp GROUP BY dept HAVING s > 100 ORDER BY s DESC",
    ),
    (
        "cte cross join",
        "WITH x AS (SELECT 1 AS one), y AS (SELECT k FROM c33_a) SELECT * FROM x, y",
    ),
    (
        "case when",
        "SELECT id, CASE WHEN salary > 100 THEN 'hi' WHEN salary IS NULL THEN 'na' "
        "ELSE 'lo' END FROM c33_emp",
    ),
    (
        "like escape column",
        "SELECT a LIKE b ESCAPE '/', a ILIKE b ESCAPE '/' FROM VALUES "
        "('%SystemDrive%/Users/John', '/%SystemDrive/%//Users%'), ('a_b', 'a/_b') AS t(a, b)",
    ),
    (
        "string funcs",
        "SELECT upper(name), concat_ws('-', name, dept), substr(name, 2) FROM c33_emp",
    ),
    (
        "coalesce nvl",
        "SELECT coalesce(dept, 'none'), nvl(mgr, -1), nullif(dept, 'eng') FROM c33_emp",
    ),
    ("lateral view", "SELECT id, x FROM c33_emp LATERAL VIEW explode(array(id, mgr)) t AS x"),
    ("distinct agg", "SELECT count(DISTINCT dept), sum(DISTINCT salary) FROM c33_emp"),
    ("left semi", "SELECT * FROM c33_a LEFT SEMI JOIN c33_b ON c33_a.k = c33_b.k"),
    ("left anti", "SELECT * FROM c33_a LEFT ANTI JOIN c33_b ON c33_a.k = c33_b.k"),
    ("non-equi join", "SELECT e.id, d.id FROM c33_emp e JOIN c33_dept d ON e.id < d.id"),
)
