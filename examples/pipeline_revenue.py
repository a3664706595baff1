"""A pipeline file for the command line: ``hybrid-shuffle run examples/pipeline_revenue.py
--config configs/main.yaml``.  The command provides the session; this file builds the job."""

from __future__ import annotations

import sys
from pathlib import Path

import hybrid_shuffle as hs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from main_job import generate, spark_pipeline


def build(session: hs.Session) -> hs.Stream:
    """The main job's DataFrame on cached data, as ``main_job`` runs it (so its exchanges
    have the ids ``configs/main.yaml`` names)."""
    orders, customers = generate(session.spark, scale=0.02)
    orders, customers = orders.cache(), customers.cache()
    return session.from_dataframe(spark_pipeline(orders, customers), "tpch-revenue")
