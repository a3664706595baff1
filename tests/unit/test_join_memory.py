"""HashJoin within a memory budget: every join type, spilling to grace hash buckets or
not, against one pyarrow ``Table.join`` of the whole inputs.

The operator is opened with a real ``OperatorContext`` a few times smaller than the
data, fed both inputs interleaved in random orders (probe batches before and after the
build side ended), and must give pyarrow's rows (compared after sorting on every
column) in pyarrow's schema, report what it spilled, hold at most 1.5 times its memory
and leave no spill file behind.
"""

from __future__ import annotations

import os
import pickle
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from hybrid_shuffle.operators import HashJoin
from hybrid_shuffle.operators.context import OperatorContext
from hybrid_shuffle.operators.join_types import JOIN_TYPES
from hybrid_shuffle.shuffle.partitioner import _key_hashes, hash_bucket_ids, hash_partition_ids

LEFT, RIGHT = 0, 1
HOWS = list(JOIN_TYPES)
KEYS = {"int": ["k"], "str": ["k"], "multi": ["a", "b"]}
#: one event a task can deliver: a batch of an input, or ("end", input)
Event = tuple[int | str, pa.Table | int]


def keys(kind: str, rows: int, distinct: int, rng: np.random.Generator) -> dict[str, pa.Array]:
    """Key columns of ``kind`` with repeats (``rows`` > ``distinct``) and 3% nulls."""
    null = rng.random(rows) < 0.03
    if kind == "multi":
        a = pa.array(rng.integers(0, distinct // 8, rows), mask=null)
        b = pa.array(rng.choice(list("pqrstuvw"), rows), mask=rng.random(rows) < 0.03)
        return {"a": a, "b": b}
    values = pa.array(rng.integers(0, distinct, rows), mask=null)
    return {"k": pc.cast(values, pa.string()) if kind == "str" else values}


def inputs(
    kind: str, seed: int, left_rows: int = 8_000, right_rows: int = 6_000
) -> tuple[pa.Table, pa.Table]:
    """A probe (left) and a build (right) side sharing some keys, duplicates on both,
    nulls in keys and values, and a non-key column ``v`` on both sides."""
    rng = np.random.default_rng(seed)
    left = pa.table(
        {
            **keys(kind, left_rows, 2_000, rng),
            "id": np.arange(left_rows),
            "v": pa.array(rng.random(left_rows), mask=rng.random(left_rows) < 0.05),
        }
    )
    right = pa.table(
        {
            **keys(kind, right_rows, 2_400, rng),
            "v": pa.array(rng.integers(0, 50, right_rows), mask=rng.random(right_rows) < 0.05),
            "w": pa.array([f"w{i % 97}" for i in range(right_rows)]),
        }
    )
    return left, right


def arrivals(left: pa.Table, right: pa.Table, seed: int, batch: int = 400) -> list[Event]:
    """Both sides in batches, interleaved at random; each side's end somewhere after its
    last batch (so probe batches come both before and after the build side ended)."""
    rng = random.Random(seed)
    sides = [
        [(side, t.slice(i, batch)) for i in range(0, t.num_rows, batch)]
        for side, t in ((LEFT, left), (RIGHT, right))
    ]
    events: list[Event] = []
    while sides[0] or sides[1]:
        pick = rng.choice([s for s in sides if s])
        events.append(pick.pop(0))
    for side in (RIGHT, LEFT):
        last = max((i for i, (what, _) in enumerate(events) if what == side), default=-1)
        events.insert(rng.randint(last + 1, len(events)), ("end", side))
    return events


def planned(how: str, on: list[str], left: pa.Table, right: pa.Table) -> HashJoin:
    """A join as the planner leaves it: ``output_schema`` called, then pickled to a task."""
    op = HashJoin(on, how, "j")
    op.output_schema([left.schema, right.schema])
    restored: HashJoin = pickle.loads(pickle.dumps(op))
    return restored


def drive(op: HashJoin, events: list[Event], context: OperatorContext | None) -> list[pa.Table]:
    op.open(context)
    out: list[pa.Table] = []
    for what, item in events:
        if what == "end":
            assert isinstance(item, int)
            out.extend(op.end_input(item))
        else:
            assert isinstance(what, int) and isinstance(item, pa.Table)
            out.extend(op.process(item, what))
    out.extend(op.finish())
    return out


def canonical(table: pa.Table) -> pa.Table:
    return table.sort_by([(c, "ascending") for c in table.column_names])


def assert_equals_pyarrow(
    out: list[pa.Table], left: pa.Table, right: pa.Table, on: list[str], how: str
) -> None:
    want = left.join(
        right, keys=on, join_type=JOIN_TYPES[how], right_suffix="_right", use_threads=False
    )
    assert out, "the join emitted no table at all"
    for table in out:  # every table, not just their concatenation
        assert table.schema == want.schema
    got = pa.concat_tables(out)
    assert got.num_rows == want.num_rows
    assert canonical(got).equals(canonical(want))


def spill_files(spill: Path) -> list[str]:
    return [os.path.join(d, f) for d, _, files in os.walk(spill) for f in files]


def assert_spilled_within(context: OperatorContext, memory: int, spill: Path) -> None:
    assert context.metrics.spilled_bytes > 0
    assert context.metrics.spill_runs > 0
    assert 0 < context.metrics.peak_memory_bytes <= 1.5 * memory
    assert spill_files(spill) == []


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("kind", list(KEYS))
@pytest.mark.parametrize("how", HOWS)
def test_spilling_join_equals_pyarrow(how: str, kind: str, seed: int, tmp_path: Path) -> None:
    left, right = inputs(kind, seed)
    memory = (left.nbytes + right.nbytes) // 5
    context = OperatorContext(memory, str(tmp_path / "spill"))
    on = KEYS[kind]
    out = drive(planned(how, on, left, right), arrivals(left, right, seed), context)
    assert_equals_pyarrow(out, left, right, on, how)
    assert_spilled_within(context, memory, tmp_path / "spill")


@pytest.mark.parametrize("kind", list(KEYS))
@pytest.mark.parametrize("how", HOWS)
def test_unbounded_join_never_spills(how: str, kind: str) -> None:
    left, right = inputs(kind, 5)
    on = KEYS[kind]
    for context in (None, OperatorContext.unbounded()):
        out = drive(planned(how, on, left, right), arrivals(left, right, 5), context)
        assert_equals_pyarrow(out, left, right, on, how)
        if context is not None:
            assert context.metrics.spilled_bytes == 0 and context.metrics.spill_runs == 0


@pytest.mark.parametrize("kind", ["int", "str"])
@pytest.mark.parametrize("how", HOWS)
def test_probe_rows_fill_the_memory_before_a_small_build_side(
    how: str, kind: str, tmp_path: Path
) -> None:
    """The probe side arrives first and fills the memory (grace mode); the build side
    turns out small, so it is read back whole and later probe batches are joined as they
    come, the spilled ones at the end."""
    left, right = inputs(kind, 3, left_rows=12_000, right_rows=600)
    memory = left.nbytes // 4
    context = OperatorContext(memory, str(tmp_path / "spill"))
    op = planned(how, ["k"], left, right)
    op.open(context)
    out: list[pa.Table] = []
    for i in range(0, 6_000, 400):
        out += op.process(left.slice(i, 400), LEFT)
    assert out == [] and context.metrics.spill_runs > 0  # grace mode: probe rows spilled
    out += op.process(right, RIGHT)
    out += op.end_input(RIGHT)
    joined_as_they_came = 0
    for i in range(6_000, 12_000, 400):
        got = list(op.process(left.slice(i, 400), LEFT))
        joined_as_they_came += len(got)
        out += got
    out += [*op.end_input(LEFT), *op.finish()]
    assert joined_as_they_came > 0
    assert_equals_pyarrow(out, left, right, ["k"], how)
    assert_spilled_within(context, memory, tmp_path / "spill")


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("empty", [LEFT, RIGHT])
@pytest.mark.parametrize("sent", ["zero-row batch", "nothing"])
def test_an_empty_side_spilling_or_not(how: str, empty: int, sent: str, tmp_path: Path) -> None:
    left, right = inputs("int", 4)
    if empty == LEFT:
        left = left.slice(0, 0)
    else:
        right = right.slice(0, 0)
    events = arrivals(left, right, 4)
    if sent == "nothing":
        events = [e for e in events if e[0] != empty]
    elif not any(e[0] == empty for e in events):
        events.insert(0, (empty, (left, right)[empty]))
    for memory in (max((left.nbytes + right.nbytes) // 5, 1), None):
        context = None if memory is None else OperatorContext(memory, str(tmp_path / "spill"))
        out = drive(planned(how, ["k"], left, right), events, context)
        want = left.join(
            right, keys="k", join_type=JOIN_TYPES[how], right_suffix="_right", use_threads=False
        )
        got = pa.concat_tables(out) if out else want.schema.empty_table()
        assert got.schema == want.schema
        assert canonical(got).equals(canonical(want))
        if context is not None:
            assert context.metrics.peak_memory_bytes <= 1.5 * context.memory
            assert spill_files(tmp_path / "spill") == []


@pytest.mark.parametrize("how", HOWS)
def test_a_bucket_larger_than_the_memory_is_split_again(how: str, tmp_path: Path) -> None:
    """Memory so small that the first buckets' build sides do not fit: they are split
    at the next level (and still give pyarrow's rows)."""
    left, right = inputs("str", 6, left_rows=6_000, right_rows=16_000)
    memory = right.nbytes // 24
    context = OperatorContext(memory, str(tmp_path / "spill"))
    events: list[Event] = [(RIGHT, right.slice(i, 300)) for i in range(0, right.num_rows, 300)]
    events += [("end", RIGHT)] + [(LEFT, left.slice(i, 300)) for i in range(0, 6_000, 300)]
    out = drive(planned(how, ["k"], left, right), events, context)
    assert_equals_pyarrow(out, left, right, ["k"], how)
    assert context.metrics.spill_runs > 2 * 8  # more runs than one level's two bucket sets
    assert_spilled_within(context, memory, tmp_path / "spill")


@pytest.mark.parametrize("how", ["inner", "right", "full", "anti"])
def test_one_key_larger_than_the_memory_is_joined_after_the_last_split(
    how: str, tmp_path: Path
) -> None:
    """The rows of one key never split: past ``MAX_LEVELS`` the bucket is joined in
    memory, over budget but right."""
    rng = np.random.default_rng(8)
    rows = 12_000
    k = np.where(rng.random(rows) < 0.6, 7, rng.integers(0, 5_000, rows))
    right = pa.table({"k": k, "w": rng.random(rows)})
    probe = np.concatenate([[7, 7], rng.integers(0, 5_000, 3_000)])
    left = pa.table({"k": probe, "id": np.arange(probe.size)})
    memory = right.nbytes // 8
    context = OperatorContext(memory, str(tmp_path / "spill"))
    events: list[Event] = [(RIGHT, right.slice(i, 500)) for i in range(0, rows, 500)]
    events += [(LEFT, left)]
    out = drive(planned(how, ["k"], left, right), events, context)
    assert_equals_pyarrow(out, left, right, ["k"], how)
    assert context.metrics.spilled_bytes > 0
    assert spill_files(tmp_path / "spill") == []


def test_bucket_ids_spread_one_subtasks_rows_and_split_again_at_the_next_level() -> None:
    """All rows one subtask receives share their partition id; salted bucket ids still
    spread them over every bucket, and a bucket's rows spread again one level down."""
    table = pa.table({"k": np.arange(200_000)})
    mine = table.filter(pa.array(hash_partition_ids(table, ["k"], 8) == 3))
    ids = hash_bucket_ids(mine, ["k"], 8, 0)
    assert np.array_equal(ids, hash_bucket_ids(mine, ["k"], 8, 0))  # deterministic
    counts = np.bincount(ids, minlength=8)
    assert counts.min() > 0.8 * counts.mean()
    bucket = mine.filter(pa.array(ids == 5))
    again = np.bincount(hash_bucket_ids(bucket, ["k"], 8, 1), minlength=8)
    assert again.min() > 0.8 * again.mean()
    assert set(hash_bucket_ids(bucket, ["k"], 8, 0).tolist()) == {5}


def test_bucket_hashes_are_the_exchanges_row_hashes() -> None:
    """``hash_bucket_ids`` re-mixes the very hash the exchange reduces (kept in step)."""
    left, _ = inputs("multi", 9)
    for n in (4, 7, 64):
        hashed = _key_hashes(left, ["a", "b"])
        assert np.array_equal(hash_partition_ids(left, ["a", "b"], n), hashed % np.uint64(n))
