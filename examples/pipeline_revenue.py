"""A pipeline file for the command line: ``hybrid-shuffle run examples/pipeline_revenue.py
--config configs/main.yaml``.  The command provides the session; this file builds the job."""

from __future__ import annotations

import sys
from pathlib import Path

import hybrid_shuffle as hs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from main_job import engine_pipeline, generate


def build(session: hs.Session) -> hs.Stream:
    orders, customers = generate(session.spark, scale=0.02)
    return engine_pipeline(session, orders, customers)
