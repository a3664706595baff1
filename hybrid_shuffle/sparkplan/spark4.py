"""Spark 4's names for what the plan translation calls (``shim.Shim``).

Spark 4 split the Dataset API into an interface and two implementations (classic and
Connect): the classic Dataset, whose ``ofRows`` plans a logical plan, moved to
``org.apache.spark.sql.classic``.  PySpark 4 keeps an exception's message in
``_desc`` (3.5: ``desc``).  Spark 4's other differences are in the plan's content and
are translated where their classes are (``physical``'s reused subqueries, the
expression table).
"""

from __future__ import annotations

from hybrid_shuffle.sparkplan.shim import Shim

__all__ = ["SHIM"]

SHIM = Shim(
    versions="4.x",
    dataset="org.apache.spark.sql.classic.Dataset",
    error_description="_desc",
)
