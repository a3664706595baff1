"""The same job gives the same answer in every exchange mode, equal to plain pyarrow."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import hybrid_shuffle as hs

from .conftest import assert_closed_cleanly, assert_no_leaks
from .data import customers, orders

MODES = ["pipelined", "blocking", "hybrid-selective", "hybrid-full"]
ROWS = 1_000_000


@pytest.fixture(scope="module")
def session(local_ray: None) -> Iterator[hs.Session]:
    config = {
        "parallelism": 2,
        "shuffle": {"buffer_size": "1 MiB", "memory_budget": "96 MiB"},
    }
    with hs.Session(config, slots=4) as s:
        yield s
    assert_closed_cleanly(s)


@pytest.fixture(scope="module")
def data() -> tuple[pa.Table, pa.Table]:
    return orders(ROWS), customers()


def build(session: hs.Session, data: tuple[pa.Table, pa.Table], mode: str) -> hs.Stream:
    job = session.job(f"modes-{mode}")
    o = job.from_arrow(data[0], name="orders", parallelism=2)
    c = job.from_arrow(data[1], name="customers", parallelism=2)
    joined = o.filter(pc.field("cents") > 10).join(c, on="customer", edge="by_cust", mode=mode)
    totals = joined.key_by("customer", "segment", edge="by_key", mode=mode).aggregate(
        {"cents": ["sum", "count", "min", "max"], "amount": ["mean", "sum"]}, name="totals"
    )
    return totals.sort("cents_sum", descending=True, edge="to_sort", mode=mode)


def expected(data: tuple[pa.Table, pa.Table]) -> pa.Table:
    o = data[0].filter(pc.field("cents") > 10)
    joined = o.join(data[1], keys="customer", join_type="inner")
    return joined.group_by(["customer", "segment"]).aggregate(
        [
            ("cents", "sum"),
            ("cents", "count"),
            ("cents", "min"),
            ("cents", "max"),
            ("amount", "mean"),
            ("amount", "sum"),
        ]
    )


def canonical(table: pa.Table) -> pa.Table:
    return table.select(
        [
            "customer",
            "segment",
            "cents_sum",
            "cents_count",
            "cents_min",
            "cents_max",
            "amount_mean",
            "amount_sum",
        ]
    ).sort_by([("customer", "ascending"), ("segment", "ascending")])


def assert_same_columns(got: pa.Table, want: pa.Table, exact: list[str], close: list[str]) -> None:
    """Row for row (both in one order): the ``exact`` columns equal, the ``close`` ones
    (float sums and means) within float64 rounding."""
    for name in exact:
        assert got.column(name).equals(want.column(name)), name
    for name in close:
        np.testing.assert_allclose(
            got.column(name).to_numpy(zero_copy_only=False).astype(float),
            want.column(name).to_numpy(zero_copy_only=False).astype(float),
            rtol=1e-9,
        )


@pytest.fixture(scope="module")
def reference(data: tuple[pa.Table, pa.Table]) -> pa.Table:
    return canonical(expected(data))


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_every_mode_matches_pyarrow_on_a_million_rows(
    session: hs.Session, data: tuple[pa.Table, pa.Table], reference: pa.Table, mode: str
) -> None:
    result = build(session, data, mode).collect()
    got = result.table
    assert got.num_rows == reference.num_rows > 10_000
    # globally sorted, descending, nulls last
    sums = got.column("cents_sum").to_numpy(zero_copy_only=False)
    valid = sums[~np.isnan(sums.astype(float))]
    assert np.all(np.diff(valid) <= 0)
    exact = ["customer", "segment", "cents_sum", "cents_count", "cents_min", "cents_max"]
    assert_same_columns(canonical(got), reference, exact, ["amount_mean", "amount_sum"])
    assert {e.mode for e in result.edges.values()} == {mode}
    assert result.edges["by_cust.left"].rows > 0.9 * ROWS
    assert_no_leaks(session)


def test_explain_lists_every_edge_with_mode_partitioner_and_region(
    session: hs.Session, data: tuple[pa.Table, pa.Table]
) -> None:
    text = build(session, data, "hybrid-selective").explain()
    for line in ["by_cust.left", "by_cust.right", "by_key", "to_sort"]:
        assert line in text
    assert (
        "hash(customer, segment) after totals.combine, mode hybrid-selective (code), partitions 2"
        in text
    )
    assert "range(cents_sum desc)" in text


@pytest.mark.parametrize("combine", [True, False], ids=["partials", "rows"])
@pytest.mark.parametrize("mode", MODES)
def test_an_integer_key_aggregate_reduced_without_duckdb_matches_pyarrow(
    session: hs.Session, data: tuple[pa.Table, pa.Table], mode: str, combine: bool
) -> None:
    """Sums, counts and means by one integer key whose input fits each task's memory are
    reduced by ``np.bincount`` (``Aggregation.dense``), from the combiner's partials or
    from the rows: pyarrow's groups in every mode, the null key one of them."""
    o = data[0].slice(0, 200_000)
    table = o.append_column("id", pc.cast(pc.utf8_slice_codeunits(o["customer"], 1), pa.int64()))
    spec = {"cents": ["sum", "count"], "amount": ["mean", "sum"]}
    job = session.job(f"dense-{mode}-{'partials' if combine else 'rows'}")
    keyed = job.from_arrow(table, name="orders", parallelism=2).key_by(
        "id", edge="by_id", mode=mode
    )
    got = keyed.aggregate(spec, name="totals", combine=combine).collect().table.sort_by("id")
    want = table.group_by("id").aggregate([(c, fn) for c, fns in spec.items() for fn in fns])
    want = want.sort_by("id")
    assert got.num_rows == want.num_rows > 15_000 and got.column("id").null_count == 1
    assert_same_columns(
        got, want, ["id", "cents_sum", "cents_count"], ["amount_mean", "amount_sum"]
    )
    assert_no_leaks(session)
