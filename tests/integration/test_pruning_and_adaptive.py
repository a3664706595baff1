"""Issue 10 on a real session: column pruning drops only what nothing reads, and
``partitions: auto`` picks the consumer's parallelism from the bytes written.

Every result is checked against one single-process pyarrow computation, in all
four modes where the mode matters (adaptive parallelism needs blocking inputs,
and falls back, saying so, on the others).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import hybrid_shuffle as hs

from .conftest import assert_no_leaks

MODES = ["pipelined", "blocking", "hybrid-selective", "hybrid-full"]
ROWS = 200_000


@pytest.fixture(scope="module")
def session(local_ray: None) -> Iterator[hs.Session]:
    config = {
        "parallelism": 2,
        "shuffle": {"buffer_size": "64 KiB", "memory_budget": "64 MiB"},
        "adaptive": {"target_bytes": "512 KiB", "max_partitions": 16},
    }
    with hs.Session(config, slots=4) as s:
        yield s


def facts(rows: int = ROWS) -> pa.Table:
    i = np.arange(rows)
    return pa.table(
        {
            "k": i % 500,
            "x": (i % 7).astype("int32"),  # also a dimension column: the join suffixes it
            # quarters: float sums are exact, so any summation order equals pyarrow's
            "amount": (i % 1000).astype("float64") / 4,
            "unused": pa.array(np.char.add("pad-", (i % 13).astype(str))),
        }
    )


def dims() -> pa.Table:
    k = np.arange(500)
    return pa.table({"k": k, "x": (k % 3).astype("int32"), "label": (k % 5).astype(str)})


def sorted_rows(table: pa.Table) -> pa.Table:
    return table.sort_by([(c, "ascending") for c in table.column_names])


# -- column pruning ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_pruned_join_keeps_every_column_read_downstream(session: hs.Session, mode: str) -> None:
    """The aggregate reads ``x_right`` (the dimension's ``x``, suffixed because the facts
    have an ``x`` too) and ``label``; ``unused`` is never read and is not shipped."""
    job = session.job(f"prune-{mode}")
    joined = job.from_arrow(facts(), name="facts").join(
        job.from_arrow(dims(), name="dims"), on="k", edge="by_k", mode=mode, name="join"
    )
    out = joined.key_by("label", "x_right", edge="by_label", mode=mode).aggregate(
        {"amount": ["sum", "count"]}, name="totals"
    )
    plan = job.plan(out)
    # "x" stays on both sides: without it the dimension's "x" would not be "x_right"
    left = plan.graph.edge("by_k.left").columns
    assert left is not None and {"k", "x", "amount"} <= left and "unused" not in left
    result = out.collect()
    want = (
        facts()
        .join(dims(), "k", right_suffix="_right")
        .group_by(["label", "x_right"])
        .aggregate([("amount", "sum"), ("amount", "count")])
    )
    got = result.table
    assert sorted_rows(got).equals(sorted_rows(want.select(got.column_names)))
    assert result.edges["by_k.left"].bytes < facts().nbytes  # "unused" stayed home
    assert_no_leaks(session)


def test_a_function_the_engine_cannot_read_keeps_every_column(session: hs.Session) -> None:
    """``map_batches`` may read anything: nothing above it is pruned, and a column it
    reads (``unused`` here) arrives, after an exchange, however little the rest reads."""
    job = session.job("prune-opaque")
    upper = (
        job.from_arrow(facts(20_000), name="facts")
        .rebalance(edge="spread")
        .map_batches(lambda t: t.append_column("n", pc.utf8_length(t["unused"])), name="measure")
    )
    out = upper.key_by("k", edge="by_k").aggregate({"n": "sum"}, name="lengths")
    plan = job.plan(out)
    assert plan.graph.edge("spread").columns is None
    assert plan.graph.edge("by_k").columns == frozenset({"k", "n"})
    want = (
        facts(20_000)
        .append_column("n", pc.utf8_length(facts(20_000)["unused"]))
        .group_by("k")
        .aggregate([("n", "sum")])
    )
    assert sorted_rows(out.to_arrow()).equals(sorted_rows(want.select(["k", "n_sum"])))


def test_rename_and_sort_prune_through_to_the_result(session: hs.Session) -> None:
    """A renamed column is traced back to its old name; the sort keeps its key and the
    result keeps every column the job's last operator makes."""
    job = session.job("prune-rename")
    out = (
        job.from_arrow(facts(20_000), name="facts")
        .rename({"amount": "price"})
        .select("k", "price")
        .sort("price", descending=True, edge="to_sort")
    )
    plan = job.plan(out)
    assert plan.graph.edge("to_sort").columns is None  # select already made it k, price
    got = out.to_arrow()
    want = facts(20_000).select(["k", "amount"]).rename_columns(["k", "price"])
    assert got.column_names == ["k", "price"]
    assert got["price"].to_pylist() == sorted(want["price"].to_pylist(), reverse=True)
    assert sorted_rows(got).equals(sorted_rows(want))


# -- adaptive parallelism ------------------------------------------------------------------


def adaptive_job(session: hs.Session, table: pa.Table, mode: str = "blocking") -> hs.Stream:
    job = session.job("adaptive")
    sums = (
        job.from_arrow(table, name="facts", parallelism=3)
        .key_by("k", edge="by_k", mode=mode, partitions="auto")
        .aggregate({"amount": ["sum", "max"]}, name="sums", combine=False)
    )
    return sums.sort("k", edge="to_sort", mode="blocking", partitions="auto", name="ordered")


def test_auto_picks_one_partition_for_a_tiny_input(session: hs.Session) -> None:
    result = adaptive_job(session, facts(1_000)).collect()
    assert result.edges["by_k"].partitions == 1
    assert result.edges["to_sort"].partitions == 1
    want = facts(1_000).group_by("k").aggregate([("amount", "sum"), ("amount", "max")])
    assert result.table.equals(want.sort_by("k").select(result.table.column_names))
    assert "parallelism 1 (auto" in result.explain
    assert_no_leaks(session)


def test_auto_picks_several_partitions_for_a_large_input(session: hs.Session) -> None:
    """~3 MiB cross ``by_k`` at 512 KiB a subtask: more subtasks than the configured 2,
    capped by the session's 4 slots; each reads a range of the 16 subpartitions, and
    every key still lands whole in one subtask."""
    result = adaptive_job(session, facts()).collect()
    assert result.edges["by_k"].partitions == 4
    assert result.edges["to_sort"].partitions == 1  # 500 groups are a few KiB
    want = facts().group_by("k").aggregate([("amount", "sum"), ("amount", "max")])
    assert result.table.equals(want.sort_by("k").select(result.table.column_names))
    assert_no_leaks(session)


def test_auto_range_edge_splits_a_large_sort_in_key_order(session: hs.Session) -> None:
    job = session.job("adaptive-sort")
    out = job.from_arrow(facts(), name="facts", parallelism=2).sort(
        ["amount", "k"], edge="to_sort", mode="blocking", partitions="auto"
    )
    result = out.collect()
    assert result.edges["to_sort"].partitions > 1
    want = facts().sort_by([("amount", "ascending"), ("k", "ascending")])
    assert result.table.select(["amount", "k"]).equals(want.select(["amount", "k"]))
    assert_no_leaks(session)


@pytest.mark.parametrize("mode", ["pipelined", "hybrid-selective", "hybrid-full"])
def test_auto_falls_back_to_the_configured_count_where_inputs_are_not_blocking(
    session: hs.Session, mode: str
) -> None:
    stream = adaptive_job(session, facts(20_000), mode)
    assert f"auto falls back: edge 'by_k' is {mode}" in stream.explain()
    result = stream.collect()
    assert result.edges["by_k"].partitions == 2  # the config's parallelism
    want = facts(20_000).group_by("k").aggregate([("amount", "sum"), ("amount", "max")])
    assert result.table.equals(want.sort_by("k").select(result.table.column_names))


def test_auto_join_reads_both_sides_with_the_same_subpartition_ranges(
    session: hs.Session,
) -> None:
    job = session.job("adaptive-join")
    out = job.from_arrow(facts(), name="facts", parallelism=2).join(
        job.from_arrow(dims(), name="dims"),
        on="k",
        how="left",
        edge="by_k",
        mode="blocking",
        partitions="auto",
    )
    result = out.collect()
    assert result.edges["by_k.left"].partitions == result.edges["by_k.right"].partitions > 1
    want = facts().join(dims(), "k", join_type="left outer", right_suffix="_right")
    got = result.table
    assert sorted_rows(got).equals(sorted_rows(want.select(got.column_names)))
    assert_no_leaks(session)
