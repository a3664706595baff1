"""FLIP-44's local stage (``LocalAggregate``) and its merge, without a cluster: the
phases against one pyarrow reduction of all rows, the flush policy, ``TopN``'s order,
the merge checks, and how the planner chains a local operator.  ``LocalAggregate`` has no
DuckDB operator; the merge after it (a ``HashAggregate``) runs as a task runs it (on
DuckDB, ``on_duckdb``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from hybrid_shuffle.api.local_keyed_stream import merge_aggregate, merge_top_n
from hybrid_shuffle.config import load_config
from hybrid_shuffle.errors import PlanError
from hybrid_shuffle.operators import HashAggregate, LocalAggregate, TopN
from hybrid_shuffle.operators.aggregation import Aggregation
from hybrid_shuffle.operators.context import OperatorContext
from hybrid_shuffle.operators.duck.operators import on_duckdb
from hybrid_shuffle.plan.planner import ExchangeSpec, LogicalNode, plan_job
from hybrid_shuffle.shuffle.partitioner import hash_partition_ids, split_by_ids
from hybrid_shuffle.shuffle.routing import Partitioner, PartitionerKind

from .builders import Builder

SPEC = {"n": ["sum", "count", "min", "max", "mean"], "x": ["sum", "max", "mean"]}
PYARROW = [(c, fn) for c, fns in SPEC.items() for fn in fns]


def skewed(rows: int, seed: int = 5) -> pa.Table:
    """Zipf-like string keys (one hot key) with 1% null keys, nulls in the values, and a
    ``score`` of few values (many ties) for top_n."""
    rng = np.random.default_rng(seed)
    ids = np.minimum(rng.zipf(1.3, rows), 300)
    key = pc.binary_join_element_wise("k", pa.array(ids).cast(pa.string()), "")
    return pa.table(
        {
            "k": pc.if_else(pa.array(rng.random(rows) < 0.01), pa.scalar(None, pa.string()), key),
            "n": pa.array(rng.integers(-1000, 1000, rows), mask=rng.random(rows) < 0.05),
            "x": pa.array(rng.random(rows), mask=rng.random(rows) < 0.05),
            "score": pa.array(rng.integers(0, 5, rows), mask=rng.random(rows) < 0.05),
            "id": pa.array(rng.permutation(rows).astype(np.int64)),
        }
    )


def run_local(
    op: LocalAggregate, table: pa.Table, batch: int, context: OperatorContext | None = None
) -> list[pa.Table]:
    """Drive one subtask's local stage over ``table`` in batches of ``batch`` rows."""
    op.open(context)
    out = [t for i in range(0, table.num_rows, batch) for t in op.process(table.slice(i, batch))]
    return out + list(op.end_input(0))


def merged(partials: list[pa.Table], final: HashAggregate, consumers: int) -> pa.Table:
    """What the job does after the local stage: hash-partition, then merge per consumer
    (each a task of its own: ``final`` on DuckDB, opened and closed)."""
    per_consumer: list[list[pa.Table]] = [[] for _ in range(consumers)]
    for t in partials:
        ids = hash_partition_ids(t, final.keys, consumers)
        for c, piece in enumerate(split_by_ids(t, ids, consumers)):
            per_consumer[c].append(piece)
    results = []
    for tables in per_consumer:
        task = on_duckdb(final)
        task.open()
        for t in tables:
            task.process(t)
        results.extend(task.finish())
        task.close()
    return pa.concat_tables([r for r in results if r.num_rows])


def assert_aggregates_equal(got: pa.Table, expected: pa.Table) -> None:
    got = got.sort_by([("k", "ascending")])
    expected = expected.select(got.column_names).sort_by([("k", "ascending")])
    assert got.num_rows == expected.num_rows
    for name in got.column_names:
        a, b = got.column(name), expected.column(name)
        if pa.types.is_floating(a.type):
            np.testing.assert_allclose(
                a.to_numpy(zero_copy_only=False), b.to_numpy(zero_copy_only=False), rtol=1e-9
            )
        else:
            assert a.equals(b), name


@pytest.mark.parametrize(("flush_rows", "batch"), [(None, 700), (1_000, 700), (1, 333)])
def test_local_partials_merge_to_one_pyarrow_group_by(
    flush_rows: int | None,
    batch: int,
) -> None:
    table = skewed(20_000)
    producers = 4
    rows = -(-table.num_rows // producers)
    partials: list[pa.Table] = []
    for p in range(producers):
        op = LocalAggregate(Aggregation(["k"], SPEC, "local"), flush_rows)
        partials += run_local(op, table.slice(p * rows, rows), batch)
    final = merge_aggregate(LocalAggregate(Aggregation(["k"], SPEC, "local")), ["k"], None, "agg")
    expected = table.group_by("k").aggregate(PYARROW)
    assert_aggregates_equal(merged(partials, final, 3), expected)


def test_flush_rows_emits_once_per_n_rows_taken_in_and_at_the_end() -> None:
    table = skewed(10_000)
    op = LocalAggregate(Aggregation(["k"], {"n": "sum"}, "local"), flush_rows=3_000)
    out = run_local(op, table, 1_000)
    assert op.flushes == len(out) == 4  # after 3,000, 6,000 and 9,000 rows, then the end
    for t in out:  # one partial row per key per flush
        assert t.num_rows == len(pc.unique(t.column("k")))
    assert sum(t.num_rows for t in out) > len(pc.unique(table.column("k")))


def test_a_full_memory_flushes_without_spilling_and_the_result_holds() -> None:
    table = skewed(20_000)
    op = LocalAggregate(Aggregation(["id"], {"n": ["sum", "mean"]}, "local"))  # unique keys
    context = OperatorContext(64 << 10)
    out = run_local(op, table, 1_000, context)
    assert op.flushes > 3
    assert context.metrics.spilled_bytes == 0
    assert context.metrics.peak_memory_bytes < 4 * (64 << 10)
    final = HashAggregate.of(Aggregation(["id"], {"n": ["sum", "mean"]}, "agg"), "merge")
    got = merged(out, final, 2).rename_columns(["k", "n_sum", "n_mean"])
    expected = table.group_by("id").aggregate([("n", "sum"), ("n", "mean")])
    assert_aggregates_equal(got, expected.rename_columns(["k", "n_sum", "n_mean"]))


def test_the_local_output_is_the_documented_partial_columns() -> None:
    op = LocalAggregate(Aggregation(["k"], {"n": ["sum", "mean"], "x": "min"}, "local"))
    schema = op.output_schema([skewed(10).schema])
    assert schema is not None
    assert schema.names == ["k", "n_sum", "n_fsum", "n_count", "x_min"]
    assert schema.field("n_fsum").type == pa.float64()


def test_an_empty_input_emits_nothing_and_the_merge_gives_no_rows() -> None:
    op = LocalAggregate(Aggregation(["k"], SPEC, "local"), 10)
    assert run_local(op, skewed(10).slice(0, 0), 10) == []
    final = on_duckdb(HashAggregate.of(Aggregation(["k"], SPEC, "agg"), "merge"))
    final.open()
    assert list(final.finish()) == []
    final.close()


def reference_top_n(table: pa.Table, n: int, by: str, ascending: bool) -> pd.DataFrame:
    """One pandas pass: sort by ``by`` then the other columns (nulls last), first n per
    key."""
    others = [c for c in table.column_names if c not in ("k", by)]
    keys = [(by, "ascending" if ascending else "descending", "at_end")]
    keys += [(c, "ascending", "at_end") for c in others]
    ordered = table.take(pc.sort_indices(table, sort_keys=keys)).to_pandas()
    return ordered.groupby("k", dropna=False, sort=False).head(n)


def as_frame(table: pa.Table) -> pd.DataFrame:
    return table.to_pandas().sort_values("id").reset_index(drop=True)


@pytest.mark.parametrize("ascending", [False, True])
@pytest.mark.parametrize("flush_rows", [None, 500])
def test_local_top_n_merges_to_the_top_n_of_all_rows(
    ascending: bool,
    flush_rows: int | None,
) -> None:
    ids = pa.array(np.arange(12_000, dtype=np.int64) % 4_000)  # whole-row ties too
    table = skewed(12_000).drop_columns(["id"]).append_column("id", ids)
    producers = 3
    rows = table.num_rows // producers
    partials: list[pa.Table] = []
    for p in range(producers):
        op = LocalAggregate(TopN(["k"], 3, ["score"], "local", ascending), flush_rows)
        partials += run_local(op, table.slice(p * rows, rows), 250)
    local = LocalAggregate(TopN(["k"], 3, ["score"], "local", ascending))
    final = merge_top_n(local, ["k"], 3, None, None, "top")
    got = merged(partials, final, 2)
    expected = reference_top_n(table, 3, "score", ascending)
    pd.testing.assert_frame_equal(
        as_frame(got).sort_values(list(got.column_names)).reset_index(drop=True),
        expected.sort_values(list(got.column_names)).reset_index(drop=True)[got.column_names],
        check_dtype=False,
    )


TIES = pa.table(
    {
        "k": ["a", "a", "a", None, None, "b"],
        "score": [1, None, 3, 2, 2, None],
        "id": [1, 2, 3, 4, 5, 6],
    }
)


def test_top_n_keeps_a_keys_rows_together_best_first_and_nulls_last() -> None:
    got = TopN(["k"], 2, ["score"], "top").combine(TIES).to_pydict()
    assert got["id"] == [3, 1, 4, 5, 6]  # ties on score broken by id ascending
    assert got["k"] == ["a", "a", None, None, "b"]


@pytest.mark.parametrize("ascending", [False, True])
def test_the_top_n_operator_keeps_a_keys_rows_together_best_first(
    ascending: bool,
) -> None:
    """The order the operator promises: a key's rows together, best first (ties broken
    by the other columns ascending, nulls last); the order of the keys is not promised."""
    op = on_duckdb(HashAggregate.of(TopN(["k"], 2, ["score"], "top", ascending)))
    op.open()
    for i in range(TIES.num_rows):
        op.process(TIES.slice(i, 1))
    got = pa.concat_tables(op.finish()).to_pydict()
    op.close()
    keys = got["k"]
    runs = [k for i, k in enumerate(keys) if i == 0 or keys[i - 1] != k]
    assert len(runs) == len(set(runs)) == 3  # each key's rows in one run
    per_key = {k: [i for i, key in zip(got["id"], keys, strict=True) if key == k] for k in runs}
    a = [1, 3] if ascending else [3, 1]  # scores 1 and 3 (the null score last)
    assert per_key == {"a": a, None: [4, 5], "b": [6]}  # None's tie broken by id


def test_top_n_refuses_a_column_it_cannot_order() -> None:
    schema = pa.schema([("k", pa.string()), ("score", pa.int64()), ("tags", pa.list_(pa.int8()))])
    with pytest.raises(PlanError, match=r"tie-break column 'tags' .* select\(\)"):
        TopN(["k"], 2, ["score"], "top").check(schema)


def local_agg(spec: dict[str, str | list[str]], keys: tuple[str, ...] = ("k",)) -> LocalAggregate:
    return LocalAggregate(Aggregation(list(keys), spec, "local"))


def test_the_merge_accepts_the_same_spec_a_part_of_it_or_none() -> None:
    local = local_agg({"n": ["sum", "mean"]})
    assert merge_aggregate(local, ["k"], {"n": ["mean", "sum"]}, "agg").phase == "merge"
    assert merge_aggregate(local, ["k"], {"n": "mean"}, "agg").phase == "merge"
    schema = merge_aggregate(local, ["k"], None, "agg").output_schema(
        [local.output_schema([skewed(10).schema])]
    )
    assert schema is not None and schema.names == ["k", "n_sum", "n_mean"]


@pytest.mark.parametrize(
    ("keys", "spec", "message"),
    [
        (["id"], {"n": "sum"}, r"per key k; write key_by\('k'\) before it instead of"),
        (["k"], {"n": "max"}, r"needs the partial 'n_max'.* same spec"),
        (["k"], {"x": "sum"}, r"needs the partial 'x_sum'"),
    ],
)
def test_a_merge_that_cannot_be_exact_is_one_sentence_saying_what_to_write(
    keys: list[str], spec: dict[str, str], message: str
) -> None:
    with pytest.raises(PlanError, match=message) as err:
        merge_aggregate(local_agg({"n": ["sum", "count"]}), keys, spec, "agg")
    assert str(err.value).count(". ") == 0


def test_top_n_and_aggregate_do_not_merge_each_others_partials() -> None:
    top = LocalAggregate(TopN(["k"], 3, ["score"], "local"))
    with pytest.raises(PlanError, match=r"merge it with key_by\(\.\.\.\)\.top_n"):
        merge_aggregate(top, ["k"], None, "agg")
    with pytest.raises(PlanError, match=r"merge it with key_by\(\.\.\.\)\.aggregate"):
        merge_top_n(local_agg({"n": "sum"}), ["k"], 3, None, None, "top")
    with pytest.raises(PlanError, match="keeps 3; ask for at most 3"):
        merge_top_n(top, ["k"], 4, None, None, "top")
    with pytest.raises(PlanError, match="ranks by score descending; pass the same by="):
        merge_top_n(top, ["k"], 3, ["n"], None, "top")
    with pytest.raises(PlanError, match="pass the same by= and ascending="):
        merge_top_n(top, ["k"], 3, None, True, "top")
    assert merge_top_n(top, ["k"], 2, ["score"], False, "top").phase == "merge"


def local_plan(
    b: Builder, source: LogicalNode, config: dict[str, object] | None = None
) -> tuple[LogicalNode, LogicalNode]:
    local = LogicalNode(
        next(b.ids), "local", local_agg({"amount": "sum"}, ("customer",)), [(source, None)]
    )
    local.local = True
    spec = ExchangeSpec(Partitioner(PartitionerKind.HASH, ("customer",)), "by_customer")
    final = merge_aggregate(local.operator, ["customer"], None, "totals")  # type: ignore[arg-type]
    return local, LogicalNode(next(b.ids), "totals", final, [(local, spec)])


def test_the_local_operator_is_chained_into_its_input_with_no_edge() -> None:
    b = Builder()
    _, totals = local_plan(b, b.map(b.source("orders", 4), "clean"))
    plan = plan_job("j", totals, load_config({"parallelism": 2}), slots=8)
    assert [v.name for v in plan.graph.vertices.values()] == ["orders->clean->local", "totals"]
    assert [e.name for e in plan.graph.edges] == ["by_customer"]
    assert "ops: clean -> local (local by customer)" in plan.explain()


def test_a_local_operator_whose_input_feeds_others_reads_it_over_a_forward_edge() -> None:
    b = Builder()
    source = b.source("orders", 4)
    _, totals = local_plan(b, source)
    other = b.map(source, "other")
    both = b.union(totals, other)
    plan = plan_job("j", both, load_config(None), slots=8)
    forward = [e for e in plan.graph.edges if e.name == "orders->local"]
    assert [e.partitioner.kind for e in forward] == [PartitionerKind.FORWARD]


def test_a_local_operator_must_keep_its_inputs_parallelism_and_group() -> None:
    b = Builder()
    _, totals = local_plan(b, b.map(b.source("orders", 4), "clean"))
    config = load_config({"vertices": {"local": {"parallelism": 2}}})
    with pytest.raises(PlanError, match=r"parallelism 2 and its input 4; remove vertices\.local"):
        plan_job("j", totals, config, slots=8)
    b = Builder()
    local, totals = local_plan(b, b.map(b.source("orders", 4), "clean"))
    local.slot_sharing_group = "mine"
    with pytest.raises(PlanError, match="slot sharing group 'mine' and its input in 'default'"):
        plan_job("j", totals, load_config(None), slots=8)


def test_top_n_in_a_hash_aggregate_past_its_memory_stays_exact() -> None:
    table = skewed(20_000).drop_columns(["k"]).rename_columns(["n", "x", "score", "k"])
    table = table.set_column(3, "k", pc.divide(table.column("k"), 4))  # 5,000 keys
    op = on_duckdb(HashAggregate.of(TopN(["k"], 2, ["score"], "top")))
    context = OperatorContext(64 << 10)
    op.open(context)
    for i in range(0, table.num_rows, 1_000):
        assert list(op.process(table.slice(i, 1_000))) == []
    got = pa.concat_tables(op.finish())
    op.close()
    keys = [("score", "descending", "at_end"), ("n", "ascending", "at_end")]
    keys += [("x", "ascending", "at_end")]
    ordered = table.take(pc.sort_indices(table, sort_keys=keys))
    rank = ordered.select(["k"]).to_pandas().groupby("k", sort=False).cumcount().to_numpy()
    expected = ordered.filter(pa.array(rank < 2))
    order = [("k", "ascending"), ("score", "descending"), ("n", "ascending"), ("x", "ascending")]
    assert got.sort_by(order).equals(expected.sort_by(order))


def test_top_n_gives_back_float_ties_as_they_were() -> None:
    """A float tie-break column's -0.0 stays -0.0 (and ties with 0.0)."""
    table = pa.table(
        {
            "k": ["a"] * 4 + ["b"] * 2,
            "score": [1, 5, None, 2, 3, 1],
            "f": [1.0, float("nan"), 0.5, -0.0, 0.0, None],
            "id": [1, 2, 3, 4, 5, 6],
        }
    )
    op = on_duckdb(HashAggregate.of(TopN(["k"], 2, ["score"], "top")))
    op.open()
    assert list(op.process(table)) == []
    got = pa.concat_tables(op.finish())
    op.close()
    rows = {r["id"]: r["f"] for r in got.to_pylist()}
    assert sorted(rows) == [2, 4, 5, 6]
    assert np.signbit(rows[4]) and not np.signbit(rows[5])
