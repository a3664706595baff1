"""HashAggregate and PartialAggregate under a small memory budget, against one pyarrow
``group_by().aggregate()`` over the whole input.

The aggregate is opened with an ``OperatorContext`` a few times smaller than its
partials; the groups must be pyarrow's (null keys a group, all-null sums null,
``count`` of non-null values), on the DuckDB operator a task runs
(``on_duckdb``).  It does not spill here: its floor (64 MiB) is far above these
tables (``tests/integration/test_duckdb_spilling.py`` makes it spill).  The
combiner (on Arrow) flushes when its memory fills.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from hybrid_shuffle.operators import HashAggregate, PartialAggregate
from hybrid_shuffle.operators.context import OperatorContext
from hybrid_shuffle.operators.duck.operators import on_duckdb
from hybrid_shuffle.shuffle.partitioner import hash_partition_ids, split_by_ids

SPEC = {"n": ["sum", "count", "min", "max", "mean"], "x": ["sum", "count", "mean"]}
PYARROW = [(c, fn) for c, fns in SPEC.items() for fn in fns]
#: key kinds: a dense integer range, integers too sparse for it, strings, two columns
KEYS = {"dense": ["k"], "sparse": ["k"], "str": ["k"], "multi": ["a", "b"]}


def table(kind: str, rows: int = 40_000, distinct: int = 12_000, seed: int = 3) -> pa.Table:
    """Keys of ``kind`` (2% null), int64 ``n`` and float64 ``x`` values (5% null); some
    groups have only null values."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, distinct, rows)
    null = rng.random(rows) < 0.02
    if kind == "multi":
        columns = {
            "a": pa.array(ids // 4, mask=null),
            "b": pa.array(np.array(list("wxyz"))[ids % 4], mask=rng.random(rows) < 0.02),
        }
    elif kind == "str":
        columns = {"k": pc.cast(pa.array(ids, mask=null), pa.string())}
    else:
        columns = {"k": pa.array(ids * (1 if kind == "dense" else 1_000_003), mask=null)}
    all_null = ids % 997 == 0  # these groups' values are all null
    return pa.table(
        {
            **columns,
            "n": pa.array(
                rng.integers(-1000, 1000, rows), mask=(rng.random(rows) < 0.05) | all_null
            ),
            "x": pa.array(rng.random(rows), mask=(rng.random(rows) < 0.05) | all_null),
        }
    )


def assert_same_groups(got: pa.Table, want: pa.Table, keys: list[str]) -> None:
    """Row for row after sorting by the keys; float results to float64 rounding."""
    assert got.schema == want.schema
    order = [(k, "ascending") for k in keys]
    got, want = got.sort_by(order), want.sort_by(order)
    assert got.num_rows == want.num_rows
    for name in want.column_names:
        if name.endswith("_mean") or name in ("x_sum",):
            a = got.column(name).to_numpy(zero_copy_only=False).astype(float)
            b = want.column(name).to_numpy(zero_copy_only=False).astype(float)
            np.testing.assert_allclose(a, b, rtol=1e-9)
        else:
            assert got.column(name).equals(want.column(name)), name


def aggregate(
    op: HashAggregate, data: pa.Table, batch: int, context: OperatorContext | None
) -> pa.Table:
    """``op`` as a task runs it over ``data`` in batches of ``batch`` rows, closed after."""
    run = on_duckdb(op)
    run.open(context)
    try:
        for i in range(0, data.num_rows, batch):
            assert list(run.process(data.slice(i, batch))) == []
        out = list(run.finish())
    finally:
        run.close()
    assert out
    return pa.concat_tables(out)


@pytest.mark.parametrize("kind", list(KEYS))
def test_aggregate_past_its_memory_equals_one_group_by(kind: str) -> None:
    data = table(kind)
    keys = KEYS[kind]
    want = data.group_by(keys, use_threads=False).aggregate(PYARROW)
    memory = want.nbytes // 4  # the groups alone are 4 times the memory
    context = OperatorContext(memory)
    got = aggregate(HashAggregate(keys, SPEC, "agg"), data, 2_000, context)
    assert_same_groups(got, want, keys)
    assert context.metrics.spilled_bytes == 0


@pytest.mark.parametrize("kind", list(KEYS))
def test_unbounded_aggregate_never_spills(kind: str) -> None:
    data = table(kind)
    keys = KEYS[kind]
    want = data.group_by(keys, use_threads=False).aggregate(PYARROW)
    for context in (None, OperatorContext.unbounded()):
        got = aggregate(HashAggregate(keys, SPEC, "agg"), data, 2_000, context)
        assert_same_groups(got, want, keys)
        if context is not None:
            assert context.metrics.spilled_bytes == 0 and context.metrics.spill_runs == 0


@pytest.mark.parametrize("kind", ["sparse", "str"])
def test_two_phase_with_bounded_combiners_and_a_final_phase_past_its_memory(
    kind: str,
) -> None:
    """Combiners flush when their memory fills; the final phase merges the partials."""
    data = table(kind, rows=60_000, distinct=20_000)
    keys = KEYS[kind]
    want = data.group_by(keys, use_threads=False).aggregate(PYARROW)
    memory = want.nbytes // 5
    consumers = 2
    partials: list[list[pa.Table]] = [[] for _ in range(consumers)]
    for p in range(3):
        combiner = PartialAggregate(keys, SPEC, "agg")
        combiner.open(OperatorContext(memory))
        part = data.slice(p * 20_000, 20_000)
        out = [t for i in range(0, 20_000, 500) for t in combiner.process(part.slice(i, 500))]
        out += combiner.end_input(0)
        combiner.close()
        for t in out:
            for c, piece in enumerate(split_by_ids(t, hash_partition_ids(t, keys, 2), 2)):
                partials[c].append(piece)
    results = []
    for c in range(consumers):
        context = OperatorContext(memory)
        final = on_duckdb(HashAggregate(keys, SPEC, "agg", phase="final"))
        final.open(context)
        for t in partials[c]:
            final.process(t)
        results.extend(final.finish())
        final.close()
        assert context.metrics.spilled_bytes == 0
    assert_same_groups(pa.concat_tables(results), want, keys)


def test_few_groups_stay_within_the_memory_however_long_the_input() -> None:
    data = table("str", rows=60_000, distinct=50)
    want = data.group_by(["k"], use_threads=False).aggregate(PYARROW)
    context = OperatorContext(data.nbytes // 6)
    got = aggregate(HashAggregate(["k"], SPEC, "agg"), data, 1_000, context)
    assert_same_groups(got, want, ["k"])
    assert context.metrics.spilled_bytes == 0
    assert context.metrics.peak_memory_bytes > 0


def test_an_empty_input_gives_one_empty_result() -> None:
    data = table("str").slice(0, 0)
    want = data.group_by(["k"], use_threads=False).aggregate(PYARROW)
    context = OperatorContext(1_000)
    op = on_duckdb(HashAggregate(["k"], SPEC, "agg"))
    op.open(context)
    assert list(op.process(data)) == []
    (got,) = op.finish()
    op.close()
    assert got.schema == want.schema and got.num_rows == 0
    assert context.metrics.spilled_bytes == 0


def test_combiner_emits_when_its_memory_fills() -> None:
    """FLIP-44's flush on a full buffer: a bounded combiner emits its partials as they
    fill its memory; an unbounded one keeps them until its input ends."""
    data = table("dense", rows=40_000, distinct=200)  # keys repeat: it keeps combining
    batches = [data.slice(i, 2_000) for i in range(0, data.num_rows, 2_000)]
    emitted = {}
    for memory in (None, 20_000):
        context = None if memory is None else OperatorContext(memory)
        combiner = PartialAggregate(["k"], SPEC, "agg")
        combiner.open(context)
        out = [t for b in batches for t in combiner.process(b)] + list(combiner.end_input(0))
        emitted[memory] = out
        if context is not None:
            assert context.metrics.spilled_bytes == 0
    assert len(emitted[None]) == 1
    assert len(emitted[20_000]) > 4
    final = on_duckdb(HashAggregate(["k"], SPEC, "agg", phase="final"))
    final.open()
    for t in emitted[20_000]:
        final.process(t)
    want = data.group_by(["k"], use_threads=False).aggregate(PYARROW)
    assert_same_groups(pa.concat_tables(list(final.finish())), want, ["k"])
    final.close()


#: a spec the dense reduction computes (no min or max)
SUMS: dict[str, list[str]] = {"n": ["sum", "count", "mean"], "x": ["sum", "count", "mean"]}
SUMS_PYARROW = [(c, fn) for c, fns in SUMS.items() for fn in fns]


def reduced(
    data: pa.Table,
    keys: list[str],
    spec: dict[str, list[str]],
    phase: str,
    context: OperatorContext,
) -> pa.Table:
    """``HashAggregate(phase=phase)`` as a task runs it over ``data`` in 2,000-row
    batches: raw rows for ``complete``, a combiner's partials of them for ``final``."""
    if phase == "complete":
        return aggregate(HashAggregate(keys, spec, "agg"), data, 2_000, context)
    combiner = PartialAggregate(keys, spec, "agg", max_bytes=data.nbytes // 8)
    combiner.open()
    batches = [data.slice(i, 2_000) for i in range(0, data.num_rows, 2_000)]
    partials = [t for b in batches for t in combiner.process(b)] + list(combiner.end_input(0))
    combiner.close()
    final = on_duckdb(HashAggregate(keys, spec, "agg", phase="final"))
    final.open(context)
    try:
        for t in partials:
            assert list(final.process(t)) == []
        return pa.concat_tables(list(final.finish()))
    finally:
        final.close()


@pytest.mark.parametrize("phase", ["complete", "final"])
def test_a_dense_integer_key_is_reduced_on_numpy_and_counted_as_held(phase: str) -> None:
    """Sums and counts over keys 0..11,999 (a null key group, all-null groups) that fit in
    half the memory with the reduction's working set: pyarrow's groups, and DuckDB never
    runs."""
    data = table("dense")
    want = data.group_by(["k"], use_threads=False).aggregate(SUMS_PYARROW)
    context = OperatorContext(32 * data.nbytes)  # rows and working set: about 7x the data
    got = reduced(data, ["k"], SUMS, phase, context)
    assert_same_groups(got, want, ["k"])
    assert context.metrics.database_peak_bytes == 0
    assert context.metrics.peak_memory_bytes >= data.nbytes // 2


def wide_sums(data: pa.Table) -> pa.Table:
    """``data`` with ``n`` near 2^52: its sums are exact in int64 but not in float64."""
    return data.set_column(1, "n", pc.add(data.column("n"), 1 << 52))


@pytest.mark.parametrize(
    ("case", "kind", "spec"),
    [
        ("span", "sparse", SUMS),
        ("key type", "str", SUMS),
        ("min and max", "dense", {"n": ["sum", "min", "max"], "x": ["max"]}),
        ("inexact sum", "dense", SUMS),
    ],
)
@pytest.mark.parametrize("phase", ["complete", "final"])
def test_what_the_dense_reduction_declines_is_reduced_on_duckdb(
    case: str, kind: str, spec: dict[str, list[str]], phase: str
) -> None:
    data = table(kind)
    if case == "inexact sum":
        data = wide_sums(data)
    keys = KEYS[kind]
    wanted = [(c, fn) for c, fns in spec.items() for fn in fns]
    want = data.group_by(keys, use_threads=False).aggregate(wanted)
    context = OperatorContext(32 * data.nbytes)
    got = reduced(data, keys, spec, phase, context)
    assert_same_groups(got, want, keys)
    assert context.metrics.database_peak_bytes > 0


@pytest.mark.parametrize("phase", ["complete", "final"])
def test_an_input_past_half_its_memory_sends_what_it_held_to_duckdb(phase: str) -> None:
    """The batches held before the limit was passed are reduced with the rest, once."""
    data = table("dense")
    want = data.group_by(["k"], use_threads=False).aggregate(SUMS_PYARROW)
    context = OperatorContext(data.nbytes)
    got = reduced(data, ["k"], SUMS, phase, context)
    assert_same_groups(got, want, ["k"])
    assert context.metrics.database_peak_bytes > 0


def test_narrow_rows_count_what_the_dense_reduction_takes_beside_them() -> None:
    """200,000 rows of two int8 columns take 400 kB, a fifth of the memory, but the
    reduction's group index and float64 copies take over 60 bytes a row: DuckDB."""
    rng = np.random.default_rng(5)
    data = pa.table({"k": rng.integers(0, 100, 200_000, np.int8), "n": np.ones(200_000, np.int8)})
    want = data.group_by(["k"], use_threads=False).aggregate([("n", "sum")])
    context = OperatorContext(5 * data.nbytes)
    got = aggregate(HashAggregate(["k"], {"n": "sum"}, "agg"), data, 20_000, context)
    assert_same_groups(got, want, ["k"])
    assert context.metrics.database_peak_bytes > 0
