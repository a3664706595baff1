"""HashJoin as a task runs it (on DuckDB, ``on_duckdb``) under a small memory budget:
every join type, against one pyarrow ``Table.join`` of the whole inputs.

The operator is opened with an ``OperatorContext`` a few times smaller than the data,
fed both inputs interleaved in random orders (probe batches before and after the
build side ended), and must give pyarrow's rows (compared after sorting on every
column) in pyarrow's schema.  It does not spill here: DuckDB's floor (64 MiB) is far
above these tables (``tests/integration/test_duckdb_join_spilling.py`` makes it spill).
"""

from __future__ import annotations

import pickle
import random

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from hybrid_shuffle.operators import HashJoin
from hybrid_shuffle.operators.base import Operator
from hybrid_shuffle.operators.context import OperatorContext
from hybrid_shuffle.operators.duck.operators import on_duckdb
from hybrid_shuffle.operators.join_types import JOIN_TYPES

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


def planned(how: str, on: list[str], left: pa.Table, right: pa.Table) -> Operator:
    """A join as the planner leaves it (``output_schema`` called, then pickled to a task),
    as the task runs it."""
    op = HashJoin(on, how, "j")
    op.output_schema([left.schema, right.schema])
    restored: HashJoin = pickle.loads(pickle.dumps(op))
    return on_duckdb(restored)


def drive(op: Operator, events: list[Event], context: OperatorContext | None) -> list[pa.Table]:
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
    op.close()
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


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("kind", list(KEYS))
@pytest.mark.parametrize("how", HOWS)
def test_join_past_its_memory_equals_pyarrow(how: str, kind: str, seed: int) -> None:
    left, right = inputs(kind, seed)
    memory = (left.nbytes + right.nbytes) // 5
    context = OperatorContext(memory)
    on = KEYS[kind]
    out = drive(planned(how, on, left, right), arrivals(left, right, seed), context)
    assert_equals_pyarrow(out, left, right, on, how)
    assert context.metrics.spilled_bytes == 0


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


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("empty", [LEFT, RIGHT])
@pytest.mark.parametrize("sent", ["zero-row batch", "nothing"])
def test_an_empty_side_with_a_budget_or_not(how: str, empty: int, sent: str) -> None:
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
        context = None if memory is None else OperatorContext(memory)
        out = drive(planned(how, ["k"], left, right), events, context)
        want = left.join(
            right, keys="k", join_type=JOIN_TYPES[how], right_suffix="_right", use_threads=False
        )
        got = pa.concat_tables(out) if out else want.schema.empty_table()
        assert got.schema == want.schema
        assert canonical(got).equals(canonical(want))
        if context is not None:
            assert context.metrics.spilled_bytes == 0
