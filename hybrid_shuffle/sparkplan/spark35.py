"""Spark 3.5's names for what the plan translation calls (``shim.Shim``).

The version-neutral reading of a plan is ``physical``; only these names differ.
"""

from __future__ import annotations

from hybrid_shuffle.sparkplan.shim import Shim

__all__ = ["SHIM"]

SHIM = Shim(
    versions="3.5",
    dataset="org.apache.spark.sql.Dataset",
    error_description="desc",
)
