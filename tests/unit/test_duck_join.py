"""The DuckDB join (``operators.duck.join``) against pyarrow's ``Table.join`` and the
Arrow operator it stands in for, for every ``how`` of both join operators.

Each case feeds the inputs interleaved as a task may (probe, build, probe), then
compares the rows (sorted) and the schema with pyarrow's join and with the Arrow
operator's output.  Float keys, column types DuckDB does not give back and
sides whose columns nobody knows go to the Arrow operator: those cases check
that the DuckDB join handed over (with the rows it had staged) and answers as it does.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from hybrid_shuffle.errors import SchemaMismatchError
from hybrid_shuffle.operators import HashJoin, SortMergeJoin
from hybrid_shuffle.operators.base import Operator
from hybrid_shuffle.operators.context import OperatorContext
from hybrid_shuffle.operators.duck.database import MIN_MEMORY, TaskDatabase
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
def test_duckdb_join_equals_pyarrow_and_the_arrow_operator(
    cls: JoinClass, how: str, on: list[str]
) -> None:
    left, right = left_table(), right_table()
    duck = on_duckdb(planned(cls, on, how, left, right))
    assert isinstance(duck, DuckJoin)
    got = run(duck, left, right)
    assert duck._fallback is None  # DuckDB ran it
    assert_same(got, pyarrow_join(left, right, on, how))
    assert_same(got, run(planned(cls, on, how, left, right), left, right))


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
    assert isinstance(duck, DuckJoin) and duck._fallback is None
    want = pyarrow_join(left, right, [key], how)
    assert got is not None and got.schema == want.schema
    assert sorted(map(repr, got.to_pylist())) == sorted(map(repr, want.to_pylist()))


@pytest.mark.parametrize("how", HOWS)
def test_a_fallback_after_the_build_side_ended_still_ends_it(how: str) -> None:
    """The probe side's first batch comes after the build side ended and has a type DuckDB
    does not keep: the Arrow operator gets the build rows, their end, then the probe."""
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
    assert isinstance(duck, DuckJoin) and duck._fallback is not None
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
def test_a_right_side_nobody_knows_answers_as_the_arrow_operator(cls: JoinClass, how: str) -> None:
    """No right batch and no planned right columns: the Arrow operator decides (no row, the
    left rows as they are, or ``SchemaMismatchError``)."""
    left = left_table()
    arrow, duck = cls(["k"], how, "j"), on_duckdb(cls(["k"], how, "j"))
    try:
        want = run(arrow, left, None)
    except SchemaMismatchError as e:
        with pytest.raises(SchemaMismatchError, match=str(e)[:40]):
            run(duck, left, None)
        return
    got = run(duck, left, None)
    if want is None or got is None:
        assert want is None or want.num_rows == 0
        assert got is None or got.num_rows == 0
    else:
        assert_same(got, want)


@pytest.mark.parametrize("how", HOWS)
def test_float_keys_fall_back_to_the_arrow_operator(how: str) -> None:
    """DuckDB matches 0.0 with -0.0 and NaN with NaN; pyarrow's join is the answer."""
    left = pa.table({"f": [0.0, -0.0, float("nan"), 1.5, None], "v": [1, 2, 3, 4, 5]})
    right = pa.table({"f": [0.0, float("nan"), 1.5, 1.5, None], "w": [10, 20, 30, 40, 50]})
    duck = on_duckdb(planned(HashJoin, ["f"], how, left, right))
    got = run(duck, left, right)
    assert isinstance(duck, DuckJoin) and duck._fallback is not None
    want = run(planned(HashJoin, ["f"], how, left, right), left, right)
    assert got is not None and want is not None and got.schema == want.schema
    assert sorted(map(repr, got.to_pylist())) == sorted(map(repr, want.to_pylist()))


@pytest.mark.parametrize("how", HOWS)
def test_a_type_duckdb_does_not_keep_hands_over_the_rows_it_staged(how: str) -> None:
    """The left side is staged in DuckDB before the right side's duration shows up:
    the staged rows are read back, with their types, into the Arrow operator."""
    left = left_table()
    durations = pa.array([1, 2, 3, None], pa.duration("s"))
    right = pa.table({"k": pa.array([3, 6, 6, None], pa.int32()), "t": durations})
    duck = on_duckdb(HashJoin(["k"], how, "j"))
    got = run(duck, left, right)
    assert isinstance(duck, DuckJoin) and duck._fallback is not None
    assert_same(got, pyarrow_join(left, right, ["k"], how))


def test_names_duckdb_cannot_tell_apart_fall_back() -> None:
    left = pa.table({"k": [1, 2], "a": [1, 2], "A": [3, 4]})
    right = pa.table({"k": [2, 2], "b": [5, 6]})
    duck = on_duckdb(planned(HashJoin, ["k"], "inner", left, right))
    assert_same(run(duck, left, right), pyarrow_join(left, right, ["k"], "inner"))


@pytest.mark.parametrize("streamed", [False, True], ids=["staged", "streamed"])
def test_a_join_larger_than_its_memory_spills_and_stays_exact(
    tmp_path: Path, streamed: bool
) -> None:
    """Past ``MIN_MEMORY`` of build rows, DuckDB spills the staged rows and the join to
    the task's temp directory, whether the probe rows were staged or come after the
    build side ended; every probe row finds its one build row, and closing the
    database leaves no file behind."""
    rows, batch = 5_000_000, 1 << 20
    database = TaskDatabase(1, 16 << 20, str(tmp_path / "duckdb"))
    context = OperatorContext(16 << 20, database=database)
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
    assert rows * 16 > MIN_MEMORY
    assert got.num_rows == probe.size
    assert (got.column("w").to_numpy() == -got.column("k").to_numpy()).all()
    assert context.metrics.spilled_bytes > 0
    assert context.metrics.peak_memory_bytes > 0
    assert [p for p in (tmp_path / "duckdb").rglob("*") if p.is_file()] == []
