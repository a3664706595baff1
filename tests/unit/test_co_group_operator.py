"""CoGroup (and key_groups.align) against a pyarrow group_by of the whole inputs.

Each side is sorted by a ``DuckSorter`` (an ``ORDER BY`` on the operator's database,
in pyarrow's order).  Nothing spills here (DuckDB's floor is 64 MiB;
``tests/integration/test_duckdb_spilling.py`` makes co_group's DuckDB sorters spill).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from hybrid_shuffle.errors import PlanError, SchemaMismatchError
from hybrid_shuffle.operators.base import Operator
from hybrid_shuffle.operators.co_group import CoGroup
from hybrid_shuffle.operators.context import OperatorContext
from hybrid_shuffle.operators.duck.operators import on_duckdb
from hybrid_shuffle.operators.duck.sorter import DuckSorter
from hybrid_shuffle.operators.key_groups import align

ON = ["k", "s"]


def side(rows: int, seed: int, keys: int) -> pa.Table:
    """Two key columns (int, string) with nulls and duplicates, and a value."""
    rng = np.random.default_rng(seed)
    k = pa.array(rng.integers(0, keys, rows), mask=rng.random(rows) < 0.02)
    s = pc.cast(pa.array(rng.integers(0, 3, rows)), pa.string())
    s = pc.if_else(pa.array(rng.random(rows) < 0.02), pa.scalar(None, pa.string()), s)
    return pa.table({"k": k, "s": s, "v": pa.array(rng.integers(0, 100, rows))})


def summary(table: pa.Table, tag: str) -> pa.Table:
    """Per key: rows and the sum of v, tagged with the side (a key split over two calls
    would give two rows)."""
    out = table.group_by(ON).aggregate([("v", "count"), ("v", "sum")])
    return out.append_column("side", pa.array([tag] * out.num_rows, pa.string()))


def arrivals(left: pa.Table, right: pa.Table, size: int, seed: int) -> list[tuple[int, pa.Table]]:
    """Both inputs in batches, interleaved in a random order (each side's own order kept)."""
    parts = [
        [(index, t.slice(i, size)) for i in range(0, t.num_rows, size)]
        for index, t in enumerate((left, right))
    ]
    order = [0] * len(parts[0]) + [1] * len(parts[1])
    random.Random(seed).shuffle(order)
    queues = [iter(p) for p in parts]
    return [next(queues[i]) for i in order]


class Recorder:
    """A co_group function that summarises each side and remembers what each call had."""

    def __init__(self, as_pandas: bool = False) -> None:
        self.calls: list[tuple[pa.Table, pa.Table]] = []
        self.as_pandas = as_pandas

    def __call__(self, left: pa.Table, right: pa.Table) -> Any:
        assert left.num_rows or right.num_rows, "a call with neither side"
        self.calls.append((left, right))
        out = pa.concat_tables([summary(left, "L"), summary(right, "R")])
        return out.to_pandas(types_mapper=pd.ArrowDtype) if self.as_pandas else out

    def keys_per_call(self) -> list[set[tuple[Any, ...]]]:
        return [
            {tuple(r.values()) for t in call for r in t.select(ON).to_pylist()}
            for call in self.calls
        ]


def outputs(
    op: Operator, batches: list[tuple[int, pa.Table]], context: OperatorContext
) -> list[pa.Table]:
    """Every table a two-input operator emits, fed as a task feeds it."""
    op.open(context)
    out: list[pa.Table] = []
    for index, table in batches:
        out.extend(op.process(table, index))
    for index in (0, 1):
        out.extend(op.end_input(index))
    out.extend(op.finish())
    return out


def run(
    op: CoGroup,
    batches: list[tuple[int, pa.Table]],
    context: OperatorContext,
) -> pa.Table:
    """``op`` as a task runs it over ``batches``, closed after."""
    twin = on_duckdb(op)
    try:
        out = outputs(twin, batches, context)
    finally:
        twin.close()
    return pa.concat_tables(out) if out else pa.table({})


ORDER = [(c, "ascending") for c in ["side", *ON]]


@pytest.mark.parametrize("as_pandas", [False, True])
def test_co_group_under_a_small_memory_equals_a_group_by_of_the_whole_inputs(
    as_pandas: bool,
) -> None:
    left, right = side(60_000, 1, 3000), side(40_000, 2, 4000)  # keys 3000-3999 right only
    memory = (left.nbytes + right.nbytes) // 5
    context = OperatorContext(memory)
    fn = Recorder(as_pandas)
    op = CoGroup(ON, fn, "cg")
    got = run(op, arrivals(left, right, 1999, seed=7), context)
    want = pa.concat_tables([summary(left, "L"), summary(right, "R")])
    assert got.sort_by(ORDER).equals(want.sort_by(ORDER))
    # every key in exactly one call, many keys a call, each side in key order
    keys = fn.keys_per_call()
    assert sum(len(k) for k in keys) == len(set().union(*keys))
    assert len(keys) * 20 < len(set().union(*keys))
    order = [(c, "ascending", "at_end") for c in ON]
    for call in fn.calls:
        for part in call:
            assert part.select(ON).equals(part.sort_by(order).select(ON))
    assert context.metrics.spilled_bytes == 0
    assert context.metrics.peak_memory_bytes > 0


def test_null_keys_form_one_group_across_both_sides() -> None:
    left = pa.table({"k": [None, 1, None], "s": ["a", "a", "a"], "v": [1, 2, 3]})
    right = pa.table({"k": [None, 2], "s": ["a", "a"], "v": [10, 20]})
    fn = Recorder()
    got = run(CoGroup(ON, fn, "cg"), [(1, right), (0, left)], OperatorContext.unbounded())
    want = pa.concat_tables([summary(left, "L"), summary(right, "R")])
    assert got.sort_by(ORDER).equals(want.sort_by(ORDER))
    assert any(r["k"] is None and r["v_count"] == 2 for r in got.to_pylist())


def test_a_side_with_no_rows_is_passed_as_an_empty_table() -> None:
    left = side(5000, 3, 500)
    fn = Recorder()
    empty_right = side(0, 4, 1)
    got = run(CoGroup(ON, fn, "cg"), [(1, empty_right), (0, left)], OperatorContext.unbounded())
    assert got.sort_by(ORDER).equals(summary(left, "L").sort_by(ORDER))
    assert all(r.num_rows == 0 and r.schema == empty_right.schema for _, r in fn.calls)


def test_a_side_that_sent_nothing_has_the_planned_schema_or_an_error() -> None:
    left, right = side(3000, 5, 100), side(10, 6, 100)
    planned = CoGroup(ON, Recorder(), "cg")
    assert planned.output_schema([left.schema, right.schema]) is None
    batches = [(0, left.slice(0, 1000)), (0, left.slice(1000))]
    got = run(planned, batches, OperatorContext.unbounded())
    assert got.sort_by(ORDER).equals(summary(left, "L").sort_by(ORDER))

    unplanned = CoGroup(ON, Recorder(), "cg")
    with pytest.raises(SchemaMismatchError, match="co_group 'cg': the right input sent"):
        run(unplanned, batches, OperatorContext.unbounded())
    # nothing to call fn with: no error, no output
    fn = Recorder()
    assert run(CoGroup(ON, fn, "cg"), [], OperatorContext.unbounded()).num_rows == 0
    assert fn.calls == []


def test_none_skips_and_what_fn_raises_propagates_unchanged() -> None:
    left = side(100, 7, 10)
    assert (
        run(
            CoGroup(ON, lambda a, b: None, "cg"),
            [(0, left), (1, left)],
            OperatorContext.unbounded(),
        ).num_rows
        == 0
    )

    class Boom(Exception):
        pass

    def fail(a: pa.Table, b: pa.Table) -> pa.Table:
        raise Boom("user code")

    with pytest.raises(Boom, match="user code"):
        run(CoGroup(ON, fail, "cg"), [(0, left), (1, left)], OperatorContext.unbounded())
    with pytest.raises(PlanError, match="co_group 'cg': the function returned a list"):
        run(
            CoGroup(ON, lambda a, b: [1], "cg"),
            [(0, left), (1, left)],
            OperatorContext.unbounded(),
        )


def test_key_columns_are_checked_by_name_and_type() -> None:
    left = pa.schema([("k", pa.int64()), ("s", pa.string())])
    with pytest.raises(PlanError) as err:
        CoGroup(ON, Recorder(), "cg").output_schema(
            [left, pa.schema([("k", pa.int32()), ("s", pa.string())])]
        )
    assert str(err.value) == (
        "co_group 'cg': key column 'k' is int64 on the left but int32 on the right; cast one "
        "side so both have the same type"
    )
    with pytest.raises(PlanError, match=r"co_group 'cg' \(right input\): column 's' not in input"):
        CoGroup(ON, Recorder(), "cg").output_schema([left, pa.schema([("k", pa.int64())])])
    assert CoGroup(ON, Recorder(), "cg").input_columns(frozenset({"x"})) == [None, None]


def test_align_cuts_both_streams_at_whole_keys() -> None:
    """Streams of very different batch sizes; each key in one chunk, chunks of many keys."""
    rng = np.random.default_rng(8)
    left = pa.table({"k": np.sort(rng.integers(0, 5000, 50_000))})
    right = pa.table({"k": np.sort(rng.integers(2000, 9000, 3000))})
    stream_l = [left.slice(i, 700) for i in range(0, left.num_rows, 700)]
    stream_r = [right.slice(i, 50) for i in range(0, right.num_rows, 50)]
    chunks = list(align(stream_l, stream_r, ["k"], (left.schema, right.schema), 64_000))
    seen: set[int] = set()
    for lpart, rpart in chunks:
        keys = set(lpart.column("k").to_pylist()) | set(rpart.column("k").to_pylist())
        assert not keys & seen and keys
        seen |= keys
    assert pa.concat_tables([c[0] for c in chunks]).equals(left)
    assert pa.concat_tables([c[1] for c in chunks]).equals(right)
    assert 5 < len(chunks) < len(seen) / 50


def test_co_group_sorts_on_duckdb_whatever_its_keys() -> None:
    """Each side gets a ``DuckSorter`` on its first batch, float keys too.  A task runs
    co_group as it is (``on_duckdb``): it sorts on DuckDB itself."""
    op = CoGroup(["k"], Recorder(), "cg")
    assert on_duckdb(op) is op
    for key in (pa.int64(), pa.float64()):
        table = pa.table({"k": pa.array([2, 1, None], key), "v": [1, 2, 3]})
        op.open(OperatorContext.unbounded())
        op.process(table, 0)
        assert isinstance(op._sides.sorters[0], DuckSorter)
        assert op._sides.sorters[1] is None  # no batch yet
        op.close()


def test_float_keys_group_and_order_as_pyarrow_sorts_them() -> None:
    """``align`` cuts the sides with pyarrow's comparisons, so DuckDB must sort float keys
    as pyarrow does: NaN after every number, nulls last, ``-0.0`` tied with ``0.0`` and
    given back as it came."""
    rng = np.random.default_rng(9)
    pool = np.array([0.0, -0.0, 1.5, -2.0, np.inf, np.nan])
    left = pa.table({"k": pa.array(rng.choice(pool, 5000), mask=rng.random(5000) < 0.05)})
    left = left.append_column("v", pa.array(np.arange(5000)))
    right = left.slice(1000, 2000)
    calls: list[tuple[pa.Table, pa.Table]] = []
    op = CoGroup(["k"], lambda a, b: calls.append((a, b)), "cg")
    run(op, arrivals(left, right, 700, seed=3), OperatorContext.unbounded())
    order = [("k", "ascending", "at_end")]
    for lpart, rpart in calls:
        for part in (lpart, rpart):
            assert same_floats(part.column("k"), part.sort_by(order).column("k"))
    got = pa.concat_tables([lpart for lpart, _ in calls])
    assert sorted(got.column("v").to_pylist()) == list(range(5000))
    back = left.take(got.column("v")).column("k")  # each row's key as it went in
    assert same_floats(got.column("k"), back)
    assert np.array_equal(
        np.signbit(pc.fill_null(got.column("k"), 1.0).to_numpy()),
        np.signbit(pc.fill_null(back, 1.0).to_numpy()),
    )


def same_floats(a: pa.ChunkedArray, b: pa.ChunkedArray) -> bool:
    """Equal value for value, NaN equal to NaN, nulls at the same rows."""
    nan_a, nan_b = pc.is_nan(a), pc.is_nan(b)
    return bool(
        pc.is_null(a).equals(pc.is_null(b))
        and nan_a.equals(nan_b)
        and pc.if_else(nan_a, 0.0, a).equals(pc.if_else(nan_b, 0.0, b))
    )


@pytest.mark.parametrize("key", ["int", "string", "date", "decimal", "float"])
def test_the_duckdb_sorter_orders_keys_as_align_compares_them(key: str) -> None:
    """Nulls last and strings by their bytes, as pyarrow's sort (``align`` cuts the
    sorted sides with pyarrow's comparisons)."""
    rng = np.random.default_rng(4)
    ints = rng.integers(-500, 500, 20_000)
    values: pa.Array = {
        "int": pa.array(ints),
        "string": pa.array([f"{'é' if x % 3 else 'Z'}{x}" for x in ints]),
        "date": pa.array(ints + 20_000, pa.int32()).cast(pa.date32()),
        "decimal": pa.array(ints).cast(pa.decimal128(21, 2)),
        "float": pa.array(np.where(ints % 7 == 0, np.nan, ints / 4)),
    }[key]
    keys = pc.if_else(pa.array(rng.random(20_000) < 0.05), pa.scalar(None, values.type), values)
    table = pa.table({"k": keys, "i": np.arange(20_000)})
    sorter = DuckSorter(["k"], table.schema, OperatorContext.unbounded(), "co_group 'cg'")
    for i in range(0, table.num_rows, 3000):
        sorter.add(table.slice(i, 3000))
    got = pa.concat_tables(list(sorter.sorted_batches()))
    assert got.schema == table.schema
    want = table.sort_by([("k", "ascending", "at_end")])
    if key == "float":
        assert same_floats(got.column("k"), want.column("k"))
    else:
        assert got.column("k").equals(want.column("k"))
    assert sorted(got.column("i").to_pylist()) == list(range(20_000))
