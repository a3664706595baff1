"""The suites, one module each; ``SUITES`` by name, in the order ``list`` shows them."""

from __future__ import annotations

from benchmarks.suite import Suite
from benchmarks.suites import (
    batch,
    batch_steps,
    cache,
    checksums,
    failover,
    fixed_cost,
    hybrid_spill,
    mainjob,
    modes,
    operators,
    order_by,
    profile,
    python_udfs,
    shuffle,
    skew,
    spark_corpus,
    spark_handover,
    spark_io,
    startup,
    tight_memory,
    tpcds,
    tpch,
    tpch_modes,
    tpch_profile,
    tpch_sql,
)

__all__ = ["SUITES"]

SUITES: dict[str, Suite] = {
    m.SUITE.name: m.SUITE
    for m in (
        shuffle, profile, spark_io, modes, mainjob, failover, batch, cache, skew, operators,
        batch_steps, tight_memory, tpch, tpch_sql, startup, spark_handover, checksums,
        spark_corpus, tpcds, fixed_cost, tpch_profile, python_udfs, hybrid_spill, tpch_modes,
        order_by,
    )
}  # fmt: skip
