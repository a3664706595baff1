"""FLIP-44's local keyed streams on real executors: ``local_key_by(...).aggregate`` and
``.top_n`` merged after ``key_by`` give the plain ``key_by`` result and pyarrow's, in
every mode, with and without ``flush_rows``, with null keys and with no rows; the local
stage adds no exchange; mistakes are one sentence."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import hybrid_shuffle as hs

from .conftest import assert_closed_cleanly, assert_no_leaks
from .data import orders

MODES = ["pipelined", "blocking", "hybrid-full", "hybrid-selective"]
FUNCTIONS = ["sum", "count", "min", "max", "mean"]
SPEC = {"cents": FUNCTIONS, "amount": FUNCTIONS}
PYARROW = [(c, fn) for c, fns in SPEC.items() for fn in fns]
ROWS = 20_000
CONFIG = {"parallelism": 4, "shuffle": {"buffer_size": "64 KiB"}}


@pytest.fixture(scope="module")
def session(local_ray: None) -> Iterator[hs.Session]:
    with hs.Session(CONFIG, slots=4) as s:
        yield s
    assert_closed_cleanly(s)


@pytest.fixture(scope="module")
def table() -> pa.Table:
    """Skewed orders: 300 customers, one of them in a third of the rows, null keys."""
    data = orders(ROWS, customers=300)
    hot = pa.array(np.random.default_rng(3).random(ROWS) < 0.3)
    customer = pc.if_else(
        pc.and_(hot, pc.is_valid(data.column("customer"))), "c7", data.column("customer")
    )
    return data.set_column(1, "customer", customer)


def source(session: hs.Session, name: str, table: pa.Table) -> hs.Stream:
    """40 batches of 500 rows dealt to 4 subtasks: flush_rows counts whole batches."""
    job = session.job(name)
    batches = [table.slice(i, 500) for i in range(0, max(table.num_rows, 1), 500)]
    return job.from_arrow(batches, name="orders", parallelism=4)


def assert_same_aggregates(got: pa.Table, expected: pa.Table) -> None:
    """Row for row by key: integers exactly, floats to 1e-9 (sums added in another
    order)."""
    order = [("customer", "ascending")]
    got = got.sort_by(order)
    expected = expected.select(got.column_names).sort_by(order)
    assert got.schema.equals(expected.schema)
    assert got.num_rows == expected.num_rows
    for name in got.column_names:
        a, b = got.column(name), expected.column(name)
        if pa.types.is_floating(a.type):
            assert a.is_null().equals(b.is_null()), name
            np.testing.assert_allclose(
                a.to_numpy(zero_copy_only=False), b.to_numpy(zero_copy_only=False), rtol=1e-9
            )
        else:
            assert a.equals(b), name


@pytest.mark.parametrize("flush_rows", [None, 700])
@pytest.mark.parametrize("mode", MODES)
def test_local_aggregate_then_key_by_equals_key_by_and_pyarrow(
    session: hs.Session, table: pa.Table, mode: str, flush_rows: int | None
) -> None:
    local = source(session, "local", table).local_key_by("customer")
    partials = local.aggregate(SPEC, name="partials", flush_rows=flush_rows)
    totals = partials.key_by("customer", edge="by_customer", mode=mode).aggregate(name="totals")
    result = totals.collect()
    plain = (
        source(session, "plain", table)
        .key_by("customer", edge="by_customer", mode=mode)
        .aggregate(SPEC, name="totals")
        .to_arrow()
    )
    expected = table.group_by("customer").aggregate(PYARROW)
    assert_same_aggregates(result.table, expected)
    assert_same_aggregates(result.table, plain)
    assert result.table.filter(pc.is_null(result.table.column("customer"))).num_rows == 1
    # the local stage is chained: the only edge is the hash exchange, carrying partials
    assert list(result.edges) == ["by_customer"]
    assert result.edges["by_customer"].mode == mode
    assert result.edges["by_customer"].rows < table.num_rows // 3
    assert "orders->partials" in result.explain
    assert_no_leaks(session)


def top_n_reference(table: pa.Table, n: int) -> pa.Table:
    """pyarrow's sort by cents descending, then the other columns ascending (nulls last),
    and the first n rows of each customer (pandas only numbers the rows in each group)."""
    keys = [("cents", "descending", "at_end")]
    keys += [(c, "ascending", "at_end") for c in ("order_id", "amount")]
    ordered = table.take(pc.sort_indices(table, sort_keys=keys))
    customers = ordered.select(["customer"]).to_pandas()
    rank = customers.groupby("customer", dropna=False, sort=False).cumcount().to_numpy()
    return ordered.filter(pa.array(rank < n))


def by_order_id(rows: pa.Table) -> pa.Table:
    return rows.sort_by([("order_id", "ascending")]).combine_chunks()


@pytest.mark.parametrize("flush_rows", [None, 700])
@pytest.mark.parametrize("mode", MODES)
def test_local_top_n_then_key_by_equals_key_by_top_n_and_pandas(
    session: hs.Session, table: pa.Table, mode: str, flush_rows: int | None
) -> None:
    local = source(session, "local-top", table).local_key_by(["customer"])
    candidates = local.top_n(3, by="cents", name="candidates", flush_rows=flush_rows)
    top = candidates.key_by("customer", edge="by_customer", mode=mode).top_n(3, name="top")
    result = top.collect()
    plain = (
        source(session, "plain-top", table)
        .key_by("customer", edge="by_customer", mode=mode)
        .top_n(3, by="cents", name="top")
        .to_arrow()
    )
    assert result.table.schema.equals(table.schema)
    expected = by_order_id(top_n_reference(table, 3))
    assert expected.num_rows > 3 * 250  # every key but the null one has 3 rows or more
    assert by_order_id(result.table).equals(expected)
    assert by_order_id(plain).equals(expected)
    assert list(result.edges) == ["by_customer"]
    assert_no_leaks(session)


def test_no_rows_give_no_rows_with_the_plain_schema(session: hs.Session, table: pa.Table) -> None:
    empty = table.slice(0, 0)
    local = source(session, "empty", empty).local_key_by("customer")
    got = local.aggregate(SPEC, flush_rows=5).key_by("customer").aggregate().to_arrow()
    plain = source(session, "empty-plain", empty).key_by("customer").aggregate(SPEC).to_arrow()
    assert got.num_rows == plain.num_rows == 0
    assert got.schema.equals(plain.schema)
    top = source(session, "empty-top", empty).local_key_by("customer").top_n(2, by="cents")
    got_top = top.key_by("customer").top_n(2).to_arrow()
    assert got_top.num_rows == 0 and got_top.schema.equals(empty.schema)
    assert_no_leaks(session)


def test_the_local_stage_collected_alone_gives_its_partials(
    session: hs.Session, table: pa.Table
) -> None:
    local = source(session, "partials", table).local_key_by("customer")
    partials = local.aggregate({"cents": ["sum", "mean"]}, flush_rows=2_000).to_arrow()
    assert partials.column_names == ["customer", "cents_sum", "cents_fsum", "cents_count"]
    # one row per key and flush of each of the 4 subtasks: more rows than keys, far fewer
    # than the input
    keys = len(pc.unique(table.column("customer")))
    assert keys < partials.num_rows < table.num_rows // 5
    assert pc.sum(partials.column("cents_sum")).as_py() == pc.sum(table.column("cents")).as_py()
    assert_no_leaks(session)


def test_explain_shows_the_local_operator_chained_into_its_input(
    session: hs.Session, table: pa.Table
) -> None:
    stream = source(session, "explained", table).local_key_by("customer")
    partials = stream.aggregate({"cents": "sum"}, name="partials", flush_rows=1_000)
    text = partials.key_by("customer", edge="by_customer").aggregate(name="totals").explain()
    assert "ops: partials (local by customer, flush every 1,000 rows)" in text
    assert "orders->partials" in text
    assert "2 vertices, 1 edge," in text


@pytest.mark.parametrize("flush_rows", [0, -3, 2.5, True, "100"])
def test_flush_rows_must_be_a_positive_integer(
    session: hs.Session, table: pa.Table, flush_rows: object
) -> None:
    local = source(session, "bad-flush", table).local_key_by("customer")
    with pytest.raises(hs.PlanError, match="flush_rows: must be a positive integer") as err:
        local.aggregate({"cents": "sum"}, flush_rows=flush_rows)  # type: ignore[arg-type]
    assert "\n" not in str(err.value)
    with pytest.raises(hs.PlanError, match="flush_rows: must be a positive integer"):
        local.top_n(2, by="cents", flush_rows=flush_rows)  # type: ignore[arg-type]


def test_mistakes_are_one_sentence_naming_the_fix(session: hs.Session, table: pa.Table) -> None:
    stream = source(session, "mistakes", table)
    with pytest.raises(hs.PlanError, match="local_key_by: name at least one key column"):
        stream.local_key_by()
    partials = stream.local_key_by("customer").aggregate({"cents": "sum"}, name="p")
    with pytest.raises(hs.PlanError, match=r"write key_by\('customer'\) before it instead of"):
        partials.key_by("order_id").aggregate()
    with pytest.raises(hs.PlanError, match="needs the partial 'cents_max'"):
        partials.key_by("customer").aggregate({"cents": "max"})
    with pytest.raises(hs.PlanError, match=r"merge it with key_by\(\.\.\.\)\.aggregate\(\)"):
        partials.key_by("customer").top_n(2, by="cents")
    with pytest.raises(hs.PlanError, match="by= must name the column"):
        stream.local_key_by("customer").top_n(2, by=[])
    with pytest.raises(hs.PlanError, match="n: must be a positive integer"):
        stream.local_key_by("customer").top_n(0, by="cents")
    missing = stream.local_key_by("nope").aggregate({"cents": "sum"})
    with pytest.raises(hs.PlanError, match="column 'nope' not in input") as err:
        missing.key_by("nope").aggregate().explain()
    assert "\n" not in str(err.value)
