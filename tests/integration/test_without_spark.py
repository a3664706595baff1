"""Without pyspark, as ``pip install hybrid-shuffle`` with no extra leaves it: an Arrow-only
job runs in every exchange mode, and touching Spark is one sentence naming the extra.

``./dev test`` runs this file in its third virtualenv, ``.venv-arrow`` (the ``test`` extra
alone), with ``HYBRID_SHUFFLE_WITHOUT_SPARK=1``: there pyspark must be absent.  Elsewhere
(``.venv``, where pyspark is installed) the two tests that need it absent are skipped,
and the Arrow-only job runs all the same.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import hybrid_shuffle as hs

from .conftest import assert_closed_cleanly, assert_no_leaks

#: set by ./dev for the .venv-arrow pass, where pyspark must not be installed
WITHOUT_SPARK = os.environ.get("HYBRID_SHUFFLE_WITHOUT_SPARK") == "1"
PYSPARK_INSTALLED = importlib.util.find_spec("pyspark") is not None

needs_no_pyspark = pytest.mark.skipif(
    PYSPARK_INSTALLED and not WITHOUT_SPARK,
    reason="pyspark is installed in this virtualenv; ./dev test --arrow runs this test in "
    ".venv-arrow, which has none",
)

#: one job, each of its exchanges in another mode
MODES = {
    "by_customer.left": "pipelined",  # the orders stream into the join
    "by_customer.right": "blocking",  # the customers, read whole before the join probes
    "by_segment": "hybrid-selective",
    "to_sort": "hybrid-full",
}


@pytest.fixture(scope="module")
def session(local_ray: None) -> Iterator[hs.Session]:
    config = {
        "job": "without-spark",  # the job the edges below belong to
        "parallelism": 2,
        "shuffle": {"buffer_size": "64 KiB", "memory_budget": "32 MiB"},
        "edges": {name: {"mode": mode} for name, mode in MODES.items()},
    }
    with hs.Session(config, slots=2) as s:
        yield s
    assert_closed_cleanly(s)


def tables() -> tuple[pa.Table, pa.Table]:
    rng = np.random.default_rng(5)
    rows, customers = 40_000, 2_000
    orders = pa.table(
        {
            "order_id": np.arange(rows, dtype=np.int64),
            "customer": rng.integers(0, customers + 100, rows),  # some have no customer record
            "cents": pa.array(rng.integers(1, 10_000, rows), mask=rng.random(rows) < 0.01),
        }
    )
    segments = np.array(["retail", "online", "partner"])[rng.integers(0, 3, customers)]
    return orders, pa.table({"customer": np.arange(customers), "segment": segments})


def test_pyspark_is_not_installed() -> None:
    if not WITHOUT_SPARK and PYSPARK_INSTALLED:
        pytest.skip(
            "pyspark is installed in this virtualenv; ./dev test --arrow checks its absence "
            "in .venv-arrow"
        )
    assert not PYSPARK_INSTALLED, "pyspark is installed, but the Arrow-only pass needs none"
    with pytest.raises(ImportError):
        importlib.import_module("pyspark")
    assert importlib.util.find_spec("raydp") is None


def per_segment(session: hs.Session, orders: pa.Table, customers: pa.Table) -> hs.Stream:
    """Paid orders joined to their customer's segment, summed per segment, largest first."""
    job = session.job("without-spark")
    segments = job.from_arrow(customers, name="customers")
    return (
        job.from_arrow(orders, name="orders")
        .filter(pc.field("cents") > 100, name="paid")
        .join(segments, on="customer", edge="by_customer")
        .key_by("segment", edge="by_segment")
        .aggregate({"cents": ["sum", "count"], "order_id": "max"}, name="totals")
        .sort("cents_sum", descending=True, edge="to_sort")
    )


def pyarrow_per_segment(orders: pa.Table, customers: pa.Table) -> pa.Table:
    paid = orders.filter(pc.field("cents") > 100)
    return (
        paid.join(customers, keys="customer", join_type="inner")
        .group_by("segment")
        .aggregate([("cents", "sum"), ("cents", "count"), ("order_id", "max")])
        .sort_by([("cents_sum", "descending")])
    )


def assert_same_rows(got: pa.Table, want: pa.Table) -> None:
    assert sorted(got.column_names) == sorted(want.column_names)
    assert got.num_rows == want.num_rows == 3
    for name in want.column_names:
        assert got.column(name).to_pylist() == want.column(name).to_pylist(), name


def test_an_arrow_only_job_runs_every_mode_and_matches_pyarrow(session: hs.Session) -> None:
    orders, customers = tables()
    result = per_segment(session, orders, customers).collect()
    assert_same_rows(result.table, pyarrow_per_segment(orders, customers))
    assert {name: result.edges[name].mode for name in MODES} == MODES
    assert {result.edges[name].mode_origin for name in MODES} == {"yaml"}
    paid = orders.filter(pc.field("cents") > 100)
    assert result.edges["by_customer.left"].rows == paid.num_rows
    assert_no_leaks(session)


@needs_no_pyspark
def test_touching_spark_is_one_sentence_naming_the_extra(session: hs.Session) -> None:
    with pytest.raises(hs.ConfigError) as raised:
        session.spark  # noqa: B018 - the property starts Spark
    message = str(raised.value)
    assert "pyspark" in message and "pip install" in message
    assert "'hybrid-shuffle[raydp]'" in message and "'hybrid-shuffle[spark4]'" in message
    assert "\n" not in message and ". " not in message.rstrip(".")
    assert isinstance(raised.value, hs.HybridShuffleError)
    # the session is unharmed: the job still runs
    orders, customers = tables()
    got = per_segment(session, orders, customers).to_arrow()
    assert_same_rows(got, pyarrow_per_segment(orders, customers))
    assert_no_leaks(session)
