"""A join's build side indexed by a dense integer key (``operators.dense_index``), and the
DuckDB join operator answering an inner or left join through it: row for row
pyarrow's ``Table.join``, whichever way the inputs arrive, with null, outside and
missing probe keys, colliding names and payloads DuckDB stages encoded; the joins it
refuses stay on DuckDB and give the same rows.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from hybrid_shuffle.operators import HashJoin
from hybrid_shuffle.operators.context import OperatorContext
from hybrid_shuffle.operators.dense_index import DENSITY, MAX_SPAN, MIN_SPAN, DenseIndex
from hybrid_shuffle.operators.duck.join import DuckJoin
from hybrid_shuffle.operators.duck.operators import on_duckdb
from hybrid_shuffle.operators.join_types import JOIN_TYPES

LEFT, RIGHT = 0, 1


def expected_rows(build: list[int | None], probe: list[int | None]) -> list[int]:
    where = {k: i for i, k in enumerate(build)}
    return [-1 if k is None else where.get(k, -1) for k in probe]


@pytest.mark.parametrize(
    ("kind", "build", "probe"),
    [
        ("int8", list(range(-128, 128, 3)), [-128, 127, None, -125, 0, 1, 126]),
        ("int64", [-(2**62), -(2**62) + 7], [-(2**63), 2**63 - 1, -(2**62) + 7, None]),
        ("uint64", [2**64 - 5, 2**64 - 1], [0, 2**63, 2**64 - 1, 2**64 - 4, None]),
        ("uint8", [0, 255, 7], [255, 0, 8, None]),
    ],
)
def test_the_index_finds_each_key_s_build_row_and_nothing_else(
    kind: str, build: list[int], probe: list[int | None]
) -> None:
    """Keys at the ends of their type, and probe keys that would wrap past the span."""
    index = DenseIndex.of(pa.array(build, kind), max_slots=1 << 20)
    assert index is not None
    got = index.positions(pa.chunked_array([pa.array(probe, kind)]))
    assert got.tolist() == expected_rows(list(build), probe)


@pytest.mark.parametrize(
    "keys",
    [
        pa.array([1, 2, 2], pa.int64()),  # a key twice
        pa.array([1, None, 3], pa.int64()),  # a null build key
        pa.array([1.0, 2.0]),  # not an integer
        pa.array([0, DENSITY * 2 + MIN_SPAN], pa.int64()),  # too sparse
        pa.array(np.arange(0, MAX_SPAN + 1, 2), pa.int64()),  # dense, but too wide
        pa.array([], pa.int64()),
    ],
    ids=["duplicate", "null", "float", "sparse", "wide", "empty"],
)
def test_the_index_refuses_keys_it_cannot_answer_for(keys: pa.Array) -> None:
    assert DenseIndex.of(keys, max_slots=1 << 30) is None


def test_the_index_refuses_a_span_over_its_slots() -> None:
    keys = pa.array(np.arange(0, 1000, 2))
    assert DenseIndex.of(keys, max_slots=998) is None
    assert DenseIndex.of(keys, max_slots=999) is not None


# -- the join through it ------------------------------------------------------------------


def tables(rows: int = 4_000, build_keys: np.ndarray | None = None) -> tuple[pa.Table, pa.Table]:
    """A dimension keyed ``0, 3, 6...`` (gaps, as one task's share of a hash exchange)
    and probe rows with keys inside, in the gaps, outside the span and null; ``w`` in
    both sides, a duration, a zoned timestamp and strings as payloads."""
    rng = np.random.default_rng(7)
    keys = np.arange(0, 900, 3) if build_keys is None else build_keys
    n = len(keys)
    right = pa.table(
        {
            "w": pa.array([f"w{i}" for i in range(n)]),
            "k": pa.array(keys, pa.int32()),
            "d": pa.array(np.arange(n) * 1_000, pa.duration("us")),
            "t": pa.array(np.arange(n), pa.timestamp("ns", "Europe/Paris")),
        }
    )
    probe = rng.integers(-50, 1000, rows)
    left = pa.table(
        {
            "k": pa.array(probe, pa.int32(), mask=rng.random(rows) < 0.05),
            "v": np.arange(rows, dtype=np.int64),
            "w": pa.array(rng.random(rows)),
        }
    )
    return left, right


def joined(
    how: str, left: pa.Table, right: pa.Table, memory: int = 1 << 30
) -> tuple[pa.Table, DuckJoin]:
    """The join as a task may feed it: a third of the left, the right in two batches and
    its end, the rest of the left in three batches."""
    op = HashJoin(["k"], how, "j")
    op.output_schema([left.schema, right.schema])
    duck = on_duckdb(op)
    assert isinstance(duck, DuckJoin)
    duck.open(OperatorContext(memory))
    out: list[pa.Table] = []
    try:
        third = left.num_rows // 3
        out += duck.process(left.slice(0, third), LEFT)
        half = right.num_rows // 2
        out += duck.process(right.slice(0, half), RIGHT)
        out += duck.process(right.slice(half), RIGHT)
        out += duck.end_input(RIGHT)
        rest = left.slice(third)
        for start in range(0, rest.num_rows, 1000):
            out += duck.process(rest.slice(start, 1000), LEFT)
        out += duck.end_input(LEFT)
        out += duck.finish()
    finally:
        duck.close()
    return pa.concat_tables(out), duck


def assert_pyarrow_s(got: pa.Table, left: pa.Table, right: pa.Table, how: str) -> None:
    want = left.join(right, keys="k", join_type=JOIN_TYPES[how], right_suffix="_right")
    assert got.schema == want.schema
    order = [(n, "ascending") for n in ("v", "k")]
    assert got.sort_by(order).equals(want.sort_by(order))


@pytest.mark.parametrize("how", ["inner", "left"])
def test_an_inner_or_left_join_on_a_dense_key_equals_pyarrow_through_the_index(how: str) -> None:
    left, right = tables()
    got, op = joined(how, left, right)
    assert isinstance(op._dense, tuple)  # answered by the index, not by DuckDB
    assert_pyarrow_s(got, left, right, how)


@pytest.mark.parametrize("how", ["inner", "left"])
def test_a_join_the_index_cannot_answer_stays_on_duckdb_with_the_same_rows(how: str) -> None:
    left, right = tables(build_keys=np.array([0, 3, 3, 9]))  # a key twice
    got, op = joined(how, left, right)
    assert op._dense is False
    assert_pyarrow_s(got, left, right, how)


def test_a_build_side_over_a_quarter_of_the_memory_is_not_indexed() -> None:
    left, right = tables()
    got, op = joined("inner", left, right, memory=4 * right.nbytes - 1)
    assert op._dense is False
    assert_pyarrow_s(got, left, right, "inner")


def test_a_semi_join_on_a_dense_key_stays_on_duckdb() -> None:
    left, right = tables()
    got, op = joined("semi", left, right)
    assert op._dense is False
    want = left.join(right, keys="k", join_type="left semi")
    assert got.sort_by("v").equals(want.sort_by("v"))
