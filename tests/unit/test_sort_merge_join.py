"""SortMergeJoin as a task runs it (on DuckDB, ``on_duckdb``) against one pyarrow
Table.join of the whole inputs, every how (more of the DuckDB join: ``test_duck_join``)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from hybrid_shuffle.errors import PlanError, SchemaMismatchError
from hybrid_shuffle.operators.base import Operator
from hybrid_shuffle.operators.context import OperatorContext
from hybrid_shuffle.operators.duck.operators import on_duckdb
from hybrid_shuffle.operators.join import SortMergeJoin
from hybrid_shuffle.operators.join_types import JOIN_TYPES, check_how

from .test_co_group_operator import arrivals
from .test_co_group_operator import outputs as fed
from .test_sort import same

HOWS = list(JOIN_TYPES)


def outputs(
    op: SortMergeJoin, batches: list[tuple[int, pa.Table]], context: OperatorContext
) -> list[pa.Table]:
    """Every table ``op`` emits as a task runs it (on DuckDB), fed ``batches``."""
    task: Operator = on_duckdb(op)
    try:
        return fed(task, batches, context)
    finally:
        task.close()


def inputs(left_rows: int = 40_000, right_rows: int = 8_000) -> tuple[pa.Table, pa.Table]:
    """A string and an int key with nulls, duplicates on both sides (many to many), keys
    on one side only, and a payload column both sides have (suffixed on the right)."""
    rng = np.random.default_rng(11)

    def table(rows: int, low: int, high: int, extra: str) -> pa.Table:
        k = pa.array(rng.integers(low, high, rows), mask=rng.random(rows) < 0.02)
        s = pc.cast(pa.array(rng.integers(0, 2, rows)), pa.string())
        s = pc.if_else(pa.array(rng.random(rows) < 0.02), pa.scalar(None, pa.string()), s)
        return pa.table(
            {
                "s": s,
                "k": k,
                "v": pa.array(rng.integers(0, 1000, rows)),
                extra: pa.array(rng.random(rows)),
            }
        )

    return table(left_rows, 0, 5000, "x"), table(right_rows, 3000, 9000, "y")


def pyarrow_join(left: pa.Table, right: pa.Table, how: str) -> pa.Table:
    return left.join(right, keys=["k", "s"], join_type=JOIN_TYPES[how], right_suffix="_right")


def by_all(table: pa.Table) -> pa.Table:
    return table.sort_by([(c, "ascending", "at_end") for c in table.column_names])


@pytest.mark.parametrize("how", HOWS)
def test_a_join_under_a_small_memory_equals_one_pyarrow_join(how: str) -> None:
    left, right = inputs()
    memory = (left.nbytes + right.nbytes) // 5  # under DuckDB's floor: nothing spills
    context = OperatorContext(memory)
    op = SortMergeJoin(["k", "s"], how, "j")
    schema = op.output_schema([left.schema, right.schema])
    out = outputs(op, arrivals(left, right, 1500, seed=3), context)
    want = pyarrow_join(left, right, how)
    assert schema == want.schema
    assert all(t.schema == schema for t in out)
    same(by_all(pa.concat_tables(out)), by_all(want))
    assert context.metrics.spilled_bytes == 0


@pytest.mark.parametrize("how", ["left", "right", "full"])
def test_outer_joins_keep_null_key_rows_unmatched_on_both_sides(how: str) -> None:
    left = pa.table({"k": pa.array([None, 1, None], pa.int64()), "a": [1, 2, 3]})
    right = pa.table({"k": pa.array([None, 1], pa.int64()), "b": [10, 20]})
    out = outputs(
        SortMergeJoin(["k"], how, "j"), [(0, left), (1, right)], OperatorContext.unbounded()
    )
    got = by_all(pa.concat_tables(out))
    assert got.equals(by_all(left.join(right, keys="k", join_type=JOIN_TYPES[how])))
    nulls = got.filter(pc.is_null(got.column("k"))).to_pylist()
    kept = {"left": 2, "right": 1, "full": 3}[how]
    assert len(nulls) == kept and all(r["a"] is None or r["b"] is None for r in nulls)


@pytest.mark.parametrize("how", HOWS)
def test_an_empty_side_joins_as_pyarrow_joins_an_empty_table(how: str) -> None:
    left, right = inputs(3000, 500)
    for lt, rt in ((left, right.slice(0, 0)), (left.slice(0, 0), right)):
        batches = [(1, rt), (0, lt.slice(0, 1000)), (0, lt.slice(1000))]
        out = outputs(SortMergeJoin(["k", "s"], how, "j"), batches, OperatorContext.unbounded())
        want = pyarrow_join(lt, rt, how)
        got = pa.concat_tables(out) if out else want.schema.empty_table()
        same(by_all(got), by_all(want))


@pytest.mark.parametrize("how", HOWS)
def test_a_side_that_sent_nothing_has_the_planned_schema(how: str) -> None:
    left, right = inputs(2000, 300)
    op = SortMergeJoin(["k", "s"], how, "j")
    op.output_schema([left.schema, right.schema])
    out = outputs(op, [(0, left)], OperatorContext.unbounded())
    want = pyarrow_join(left, right.slice(0, 0), how)
    got = pa.concat_tables(out) if out else want.schema.empty_table()
    same(by_all(got), by_all(want))


@pytest.mark.parametrize("how", HOWS)
def test_an_unknown_side_is_an_error_only_when_rows_need_its_columns(how: str) -> None:
    """No batch and no planned schema: the other side's rows that the join keeps unmatched
    would need its columns (an error); an anti join keeps left rows as they are."""
    table, _ = inputs(2000, 300)
    context = OperatorContext.unbounded()
    if how in ("left", "full"):
        with pytest.raises(SchemaMismatchError, match="join 'j': the right input sent"):
            outputs(SortMergeJoin(["k", "s"], how, "j"), [(0, table)], context)
    elif how == "anti":
        got = outputs(SortMergeJoin(["k", "s"], how, "j"), [(0, table)], context)
        assert by_all(pa.concat_tables(got)).equals(by_all(table))
    else:
        assert outputs(SortMergeJoin(["k", "s"], how, "j"), [(0, table)], context) == []
    if how in ("right", "full"):
        with pytest.raises(SchemaMismatchError, match="join 'j': the left input sent"):
            outputs(SortMergeJoin(["k", "s"], how, "j"), [(1, table)], context)
    else:
        assert outputs(SortMergeJoin(["k", "s"], how, "j"), [(1, table)], context) == []


def test_how_and_key_types_are_checked_before_running() -> None:
    with pytest.raises(PlanError) as err:
        SortMergeJoin(["k"], "outer", "j")
    assert str(err.value) == (
        "join 'j': how='outer' is not supported; use one of: inner, left, right, full, semi, anti"
    )
    assert check_how("semi", "j") == "left semi"
    left = pa.schema([("k", pa.int64())])
    with pytest.raises(PlanError, match="key column 'k' is int64 on the left but string"):
        SortMergeJoin(["k"], "inner", "j").output_schema([left, pa.schema([("k", pa.string())])])
    op = SortMergeJoin(["k"], "semi", "j")
    assert op.input_columns(frozenset({"a"})) == [frozenset({"a", "k"}), frozenset({"k"})]
    both = SortMergeJoin(["k"], "full", "j").input_columns(frozenset({"a_right"}))
    assert both == [frozenset({"a_right", "a", "k"})] * 2
