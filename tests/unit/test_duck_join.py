"""The DuckDB join (``operators.duck.join``) against pyarrow's ``Table.join``, for every
``how`` of both join operators.

Each case feeds the inputs interleaved as a task may (probe, build, probe), then
compares the rows (sorted) and the schema with pyarrow's join.  Float keys (joined
by their bits, as pyarrow's are), column types DuckDB does not give back as they
came and names equal but for case are staged encoded (``duck/encoding.py``); a side
whose columns nobody knows gives the rows that need none of its columns, or
``SchemaMismatchError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from hybrid_shuffle.config import OPERATORS_MIN_MEMORY
from hybrid_shuffle.errors import SchemaMismatchError
from hybrid_shuffle.operators import HashJoin, SortMergeJoin
from hybrid_shuffle.operators.base import Operator
from hybrid_shuffle.operators.context import OperatorContext
from hybrid_shuffle.operators.duck.database import TaskDatabase
from hybrid_shuffle.operators.duck.join import STREAMED, DuckJoin
from hybrid_shuffle.operators.duck.operators import on_duckdb
from hybrid_shuffle.operators.join_types import JOIN_TYPES

LEFT, RIGHT = 0, 1
HOWS = list(JOIN_TYPES)
JOINS = [HashJoin, SortMergeJoin]
JoinClass = type[HashJoin] | type[SortMergeJoin]


def left_table(rows: int = 3_000) -> pa.Table:
    """Int and string keys with nulls and duplicates; ``w`` collides with the right."""
    rng = np.random.default_rng(3)
    k = rng.integers(0, 200, rows)
    return pa.table(
        {
            "k": pa.array(k, pa.int32(), mask=rng.random(rows) < 0.03),
            "s": pa.array([f"s{i % 5}" for i in k], mask=rng.random(rows) < 0.03),
            "v": np.arange(rows, dtype=np.int64),
            "w": pa.array(rng.random(rows)),
        }
    )


def right_table() -> pa.Table:
    """Every third key twice (duplicates), a null key, keys the left has not."""
    keys = [k for k in range(0, 260, 3) for _ in range(2)] + [None]
    n = len(keys)
    return pa.table(
        {
            "w": pa.array([f"w{i}" for i in range(n)], pa.large_string()),
            "k": pa.array(keys, pa.int32()),
            "s": pa.array([None if k is None else f"s{k % 5}" for k in keys]),
            "d": pa.array([i * 10 for i in range(n)], pa.decimal128(12, 2)),
        }
    )


def pyarrow_join(left: pa.Table, right: pa.Table, on: Sequence[str], how: str) -> pa.Table:
    return left.join(right, keys=list(on), join_type=JOIN_TYPES[how], right_suffix="_right")


def run(
    op: Operator,
    left: pa.Table,
    right: pa.Table | None,
    context: OperatorContext | None = None,
) -> pa.Table | None:
    """Feed a third of the left, the right (in two batches), the rest of the left; end both
    inputs and finish.  ``right`` None: the right input sends no batch."""
    op.open(context)
    out: list[pa.Table] = []
    try:
        third = left.num_rows // 3
        out += op.process(left.slice(0, third), LEFT)
        if right is not None:
            half = right.num_rows // 2
            out += op.process(right.slice(0, half), RIGHT)
            out += op.process(right.slice(half), RIGHT)
        out += op.end_input(RIGHT)
        out += op.process(left.slice(third), LEFT)
        out += op.end_input(LEFT)
        out += op.finish()
    finally:
        op.close()
    return pa.concat_tables(out) if out else None


def sorted_rows(table: pa.Table) -> pa.Table:
    return table.sort_by([(n, "ascending") for n in table.column_names])


def assert_same(got: pa.Table | None, want: pa.Table) -> None:
    assert got is not None
    assert got.schema == want.schema
    assert sorted_rows(got).equals(sorted_rows(want))


def planned(
    cls: JoinClass, on: Sequence[str], how: str, left: pa.Table, right: pa.Table
) -> Operator:
    op = cls(list(on), how, "j")
    op.output_schema([left.schema, right.schema])
    return op


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("cls", JOINS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("on", [["k"], ["s"], ["s", "k"]], ids="+".join)
def test_duckdb_join_equals_pyarrow(cls: JoinClass, how: str, on: list[str]) -> None:
    left, right = left_table(), right_table()
    duck = on_duckdb(planned(cls, on, how, left, right))
    assert isinstance(duck, DuckJoin)
    assert_same(run(duck, left, right), pyarrow_join(left, right, on, how))


@pytest.mark.parametrize("how", HOWS)
def test_probe_batches_after_the_build_side_ended_stream_through_one_query(how: str) -> None:
    """Inner, left, semi and anti joins answer probe batches as they come once the build
    side ended (a ``StreamedQuery``); right and full wait for every probe row."""
    left, right = left_table(), right_table()
    duck = on_duckdb(planned(HashJoin, ["k"], how, left, right))
    assert isinstance(duck, DuckJoin)
    duck.open()
    try:
        out = [*duck.process(right, RIGHT), *duck.end_input(RIGHT)]
        for start in range(0, left.num_rows, 500):
            out += duck.process(left.slice(start, 500), LEFT)
        assert (duck._query is not None) == (how in STREAMED)
        out += [*duck.end_input(LEFT), *duck.finish()]
        # the hash table is built on the staged build side, not on the probe stream
        disabled = duck.context.database.setting("disabled_optimizers")
        assert ("build_side_probe_side" in disabled) == (how in STREAMED)
    finally:
        duck.close()
    assert_same(pa.concat_tables(out), pyarrow_join(left, right, ["k"], how))


def typed_columns() -> dict[str, pa.Array]:
    """A column of every type DuckDB gives back unchanged, each with a null."""
    return {
        "ts_s": pa.array([0, 1, None, 5], pa.timestamp("s")),
        "ts_ns": pa.array([0, 1, None, 5], pa.timestamp("ns")),
        "dec": pa.array(
            [Decimal("1.10"), Decimal("2.20"), None, Decimal("-3.30")], pa.decimal128(20, 2)
        ),
        "d32": pa.array([0, 1, None, 3], pa.date32()),
        "bin": pa.array([b"a", b"b", None, b"\x00"], pa.binary()),
        "lbin": pa.array([b"a", b"b", None, b"\x00"], pa.large_binary()),
        "u64": pa.array([0, 2**64 - 1, None, 2**63], pa.uint64()),
        "i8": pa.array([0, -1, None, 127], pa.int8()),
        "b": pa.array([True, False, None, True]),
        "f32": pa.array([0.5, float("nan"), None, -0.0], pa.float32()),
    }


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("key", [k for k in typed_columns() if k != "f32"])
def test_every_kept_type_joins_on_duckdb_as_on_pyarrow(key: str, how: str) -> None:
    """Keys and payload of each type DuckDB keeps come out with their values and types."""
    columns = typed_columns()
    left = pa.table({**columns, "v": [1, 2, 3, 4]})
    right = pa.table(
        {key: columns[key].take([3, 0, 0, 2]), "w": list("xyzn"), "dec": columns["dec"]}
    )
    duck = on_duckdb(planned(HashJoin, [key], how, left, right))
    got = run(duck, left, right)
    assert isinstance(duck, DuckJoin)
    want = pyarrow_join(left, right, [key], how)
    assert got is not None and got.schema == want.schema
    assert sorted(map(repr, got.to_pylist())) == sorted(map(repr, want.to_pylist()))


@pytest.mark.parametrize("how", HOWS)
def test_a_probe_side_of_an_encoded_type_after_the_build_side_ended(how: str) -> None:
    """The probe side's first batch comes after the build side ended and has a type DuckDB
    does not give back as it came (a duration): it streams in encoded and comes out as
    it went in."""
    left = pa.table(
        {"k": pa.array([3, 6, None], pa.int32()), "t": pa.array([1, 2, 3], pa.duration("s"))}
    )
    right = right_table()
    duck = on_duckdb(HashJoin(["k"], how, "j"))
    duck.open()
    try:
        out = [*duck.process(right, RIGHT), *duck.end_input(RIGHT), *duck.process(left, LEFT)]
        out += [*duck.end_input(LEFT), *duck.finish()]
    finally:
        duck.close()
    assert isinstance(duck, DuckJoin)
    assert_same(pa.concat_tables(out), pyarrow_join(left, right, ["k"], how))


def test_a_task_runs_every_join_strategy_on_duckdb() -> None:
    for cls in JOINS:
        op = cls(["k"], "inner", "j")
        duck = on_duckdb(op)
        assert isinstance(duck, DuckJoin) and duck.original is op and on_duckdb(duck) is duck


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("cls", JOINS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("side", ["left", "right"])
def test_an_empty_side_of_planned_columns_joins_as_pyarrow(
    cls: JoinClass, how: str, side: str
) -> None:
    left, right = left_table(), right_table()
    if side == "left":
        left = left.schema.empty_table()
    else:
        right = right.schema.empty_table()
    want = pyarrow_join(left, right, ["k"], how)
    # a zero-row batch, and no batch at all with the planned columns
    assert_same(run(on_duckdb(planned(cls, ["k"], how, left, right)), left, right), want)
    duck = on_duckdb(planned(cls, ["k"], how, left, right))
    if side == "right":
        assert_same(run(duck, left, None), want)


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("cls", JOINS, ids=lambda c: c.__name__)
def test_a_right_side_nobody_knows_gives_what_needs_none_of_its_columns(
    cls: JoinClass, how: str
) -> None:
    """No right batch and no planned right columns: no row (no right row can match), the
    left rows as they are (anti), or ``SchemaMismatchError`` when left rows would need the
    right side's columns (left, full)."""
    left = left_table()
    duck = on_duckdb(cls(["k"], how, "j"))
    if how in ("left", "full"):
        with pytest.raises(SchemaMismatchError, match="join 'j': the right input sent"):
            run(duck, left, None)
        return
    got = run(duck, left, None)
    if how == "anti":
        assert_same(got, left)
    else:
        assert got is None or got.num_rows == 0


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("cls", JOINS, ids=lambda c: c.__name__)
def test_float_keys_join_by_their_bits_as_pyarrows_do(cls: JoinClass, how: str) -> None:
    """pyarrow matches ``0.0`` only with ``0.0``, ``-0.0`` with ``-0.0`` and a NaN with the
    same NaN (DuckDB would tie the zeros and every NaN): the keys are joined by their
    bits and come out as they went in."""
    nans = np.array([0x7FF8000000000000, 0xFFF8000000000000], np.uint64).view(np.float64)
    left = pa.table({"f": [0.0, -0.0, nans[0], nans[1], 1.5, None], "v": [1, 2, 3, 4, 5, 6]})
    right = pa.table({"f": [0.0, nans[0], 1.5, 1.5, None], "w": [10, 20, 30, 40, 50]})
    duck = on_duckdb(planned(cls, ["f"], how, left, right))
    got = run(duck, left, right)
    want = pyarrow_join(left, right, ["f"], how)
    assert got is not None and got.schema == want.schema

    def rows(table: pa.Table) -> list[str]:
        bits = pa.array(table.column("f").to_numpy(zero_copy_only=False).view(np.uint64))
        with_bits = table.append_column(
            "bits", pc.if_else(pc.is_null(table.column("f")), None, bits)
        )
        return sorted(map(repr, with_bits.drop_columns(["f"]).to_pylist()))

    assert rows(got) == rows(want)


@pytest.mark.parametrize("how", HOWS)
def test_types_duckdb_does_not_give_back_come_back_as_they_went_in(how: str) -> None:
    """A duration and a fixed-size binary are staged encoded (as int64, binary) and come
    out with their own types and values."""
    left = left_table()
    right = pa.table(
        {
            "k": pa.array([3, 6, 6, None], pa.int32()),
            "t": pa.array([1, 2, 3, None], pa.duration("s")),
            "b": pa.array([b"ab", None, b"cd", b"\x00\x01"], pa.binary(2)),
        }
    )
    duck = on_duckdb(HashJoin(["k"], how, "j"))
    got = run(duck, left, right)
    assert isinstance(duck, DuckJoin)
    assert_same(got, pyarrow_join(left, right, ["k"], how))


def test_names_duckdb_cannot_tell_apart_are_staged_under_aliases() -> None:
    left = pa.table({"k": [1, 2], "a": [1, 2], "A": [3, 4]})
    right = pa.table({"k": [2, 2], "b": [5, 6]})
    duck = on_duckdb(planned(HashJoin, ["k"], "inner", left, right))
    assert_same(run(duck, left, right), pyarrow_join(left, right, ["k"], "inner"))


@pytest.mark.parametrize("streamed", [False, True], ids=["staged", "streamed"])
def test_a_join_larger_than_its_memory_spills_and_stays_exact(
    tmp_path: Path, streamed: bool
) -> None:
    """Past ``OPERATORS_MIN_MEMORY`` of build rows, DuckDB spills the staged rows and the join to
    the task's temp directory, whether the probe rows were staged or come after the
    build side ended; every probe row finds its one build row, and closing the
    database leaves no file behind."""
    rows, batch = 5_000_000, 1 << 20
    database = TaskDatabase(1, OPERATORS_MIN_MEMORY, str(tmp_path / "duckdb"))
    context = OperatorContext(OPERATORS_MIN_MEMORY, database=database)
    duck = on_duckdb(HashJoin(["k"], "inner", "j"))
    duck.open(context)
    out: list[pa.Table] = []
    try:
        for start in range(0, rows, batch):
            k = np.arange(start, min(start + batch, rows), dtype=np.int64)
            assert not list(duck.process(pa.table({"k": k, "w": -k}), RIGHT))
        if streamed:
            out += duck.end_input(RIGHT)
        probe = np.arange(0, rows, 7, dtype=np.int64)
        for part in np.array_split(probe, 4):
            out += duck.process(pa.table({"k": part, "v": part}), LEFT)
        out += [*duck.end_input(LEFT), *duck.end_input(RIGHT), *duck.finish()]
    finally:
        duck.close()
        database.close()
    got = pa.concat_tables(out)
    assert rows * 16 > OPERATORS_MIN_MEMORY
    assert got.num_rows == probe.size
    assert (got.column("w").to_numpy() == -got.column("k").to_numpy()).all()
    assert context.metrics.spilled_bytes > 0
    assert context.metrics.peak_memory_bytes > 0
    assert [p for p in (tmp_path / "duckdb").rglob("*") if p.is_file()] == []
