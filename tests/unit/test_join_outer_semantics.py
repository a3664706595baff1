"""HashJoin as a task runs it (on DuckDB, ``on_duckdb``) fed in the orders a task can
feed it, against one pyarrow ``Table.join``.

What matters for a left join: no left row is lost whatever the order of arrival
(before or after the right side ended), and the right side's columns are there,
all null where nothing matched, even when the right side sent no batch at all.
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from hybrid_shuffle.errors import SchemaMismatchError
from hybrid_shuffle.operators import HashJoin
from hybrid_shuffle.operators.duck.operators import on_duckdb
from hybrid_shuffle.shuffle.api import (
    PartitionDescriptor,
    PartitionId,
    PollRequest,
    PollResponse,
)
from hybrid_shuffle.shuffle.memory_budget import MemoryBudget
from hybrid_shuffle.shuffle.partition_type import partition_type
from hybrid_shuffle.shuffle.result_partition import ResultPartition
from hybrid_shuffle.shuffle.routing import Partitioner, PartitionerKind
from hybrid_shuffle.shuffle.writer import ResultPartitionWriter

LEFT, RIGHT = 0, 1
#: one event a task can deliver: a batch of an input, or ("end", input)
Event = tuple[int | str, pa.Table | int]


def left_table(rows: int = 20_000) -> pa.Table:
    rng = np.random.default_rng(7)
    return pa.table(
        {
            "k": pa.array(rng.integers(0, 500, rows), mask=rng.random(rows) < 0.01),
            "v": np.arange(rows, dtype=np.int64),
        }
    )


def right_table(keys: Sequence[int] = range(0, 500, 3)) -> pa.Table:
    keys = list(keys)
    return pa.table(
        {"k": pa.array(keys, pa.int64()), "w": pa.array([f"w{k}" for k in keys], pa.string())}
    )


def slices(table: pa.Table, size: int) -> list[pa.Table]:
    return [table.slice(i, size) for i in range(0, table.num_rows, size)]


def drive(join: HashJoin, events: Sequence[Event]) -> pa.Table:
    """Open ``join`` as a task runs it, deliver the events in order, end inputs not ended
    yet, finish, close."""
    op = on_duckdb(join)
    op.open()
    out: list[pa.Table] = []
    ended: set[int] = set()
    try:
        for what, item in events:
            if what == "end":
                assert isinstance(item, int)
                ended.add(item)
                out.extend(op.end_input(item))
            else:
                assert isinstance(what, int) and isinstance(item, pa.Table)
                out.extend(op.process(item, what))
        for index in (LEFT, RIGHT):
            if index not in ended:
                out.extend(op.end_input(index))
        out.extend(op.finish())
    finally:
        op.close()
    assert out, "the join emitted no table at all"
    return pa.concat_tables(out)


def planned(how: str, left: pa.Table, right: pa.Table) -> HashJoin:
    """A join as the planner leaves it: ``output_schema`` called, then pickled to a task."""
    op = HashJoin(["k"], how, "j")
    op.output_schema([left.schema, right.schema])
    restored: HashJoin = pickle.loads(pickle.dumps(op))
    return restored


def assert_equals_pyarrow(got: pa.Table, left: pa.Table, right: pa.Table, how: str) -> None:
    want = left.join(right, keys="k", join_type="left outer" if how == "left" else "inner")
    assert got.schema.names == want.schema.names
    assert got.schema.types == want.schema.types
    order = [("v", "ascending")]
    assert got.sort_by(order).equals(want.sort_by(order))


def test_left_join_keeps_left_rows_that_arrive_after_the_right_side_ended() -> None:
    left, right = left_table(), right_table()
    events: list[Event] = [(RIGHT, t) for t in slices(right, 50)]
    events += [("end", RIGHT)] + [(LEFT, t) for t in slices(left, 1_000)]
    got = drive(planned("left", left, right), events)
    assert got.num_rows == left.num_rows
    assert_equals_pyarrow(got, left, right, "left")


def test_left_join_keeps_left_rows_on_both_sides_of_the_right_side_ending() -> None:
    left, right = left_table(), right_table()
    pieces = slices(left, 1_000)
    events: list[Event] = [(LEFT, t) for t in pieces[:7]]
    events += [(RIGHT, t) for t in slices(right, 50)] + [("end", RIGHT)]
    events += [(LEFT, t) for t in pieces[7:]]
    assert_equals_pyarrow(drive(planned("left", left, right), events), left, right, "left")


@pytest.mark.parametrize("left_first", [True, False])
def test_left_join_with_an_empty_right_side_has_its_columns_all_null(left_first: bool) -> None:
    left, right = left_table(), right_table([])
    lefts: list[Event] = [(LEFT, t) for t in slices(left, 1_000)]
    events = [*lefts, ("end", RIGHT)] if left_first else [("end", RIGHT), *lefts]
    got = drive(planned("left", left, right), events)
    assert got.column("w").null_count == left.num_rows
    assert_equals_pyarrow(got, left, right, "left")


def test_left_join_takes_the_right_schema_from_a_zero_row_batch_when_unplanned() -> None:
    left, right = left_table(), right_table([])
    op = HashJoin(["k"], "left", "j")  # the planner knew neither schema
    events: list[Event] = [(LEFT, t) for t in slices(left, 1_000)[:3]]
    events += [(RIGHT, right), ("end", RIGHT)] + [(LEFT, t) for t in slices(left, 1_000)[3:]]
    assert_equals_pyarrow(drive(op, events), left, right, "left")


@pytest.mark.parametrize("left_first", [True, False])
def test_left_join_without_any_right_schema_fails_naming_the_join_rather_than_drop_columns(
    left_first: bool,
) -> None:
    left = left_table()
    lefts: list[Event] = [(LEFT, t) for t in slices(left, 1_000)]
    events = [*lefts, ("end", RIGHT)] if left_first else [("end", RIGHT), *lefts]
    with pytest.raises(SchemaMismatchError, match="join 'j': the right input sent this subtask"):
        drive(HashJoin(["k"], "left", "j"), events)


def test_joins_without_any_right_schema_emit_nothing_where_nothing_can_match() -> None:
    left = left_table()
    inner = on_duckdb(HashJoin(["k"], "inner", "j"))
    inner.open()
    assert list(inner.end_input(RIGHT)) == [] and list(inner.process(left, LEFT)) == []
    inner.close()
    outer = on_duckdb(HashJoin(["k"], "left", "j"))
    outer.open()
    assert list(outer.end_input(RIGHT)) == [] and list(outer.process(left.slice(0, 0))) == []
    outer.close()


@pytest.mark.parametrize("how", ["inner", "left"])
def test_a_right_batch_schema_wins_over_nothing_and_matches_the_planned_one(how: str) -> None:
    left, right = left_table(), right_table()
    unplanned = drive(
        HashJoin(["k"], how, "j"),
        [(RIGHT, right), ("end", RIGHT), *[(LEFT, t) for t in slices(left, 1_000)]],
    )
    assert unplanned.schema == planned(how, left, right).output_schema([left.schema, right.schema])
    assert_equals_pyarrow(unplanned, left, right, how)


def test_inner_join_with_an_empty_right_side_gives_no_rows_but_the_joined_columns() -> None:
    left, right = left_table(), right_table([])
    got = drive(planned("inner", left, right), [(LEFT, t) for t in slices(left, 1_000)])
    assert got.num_rows == 0
    assert_equals_pyarrow(got, left, right, "inner")


def test_planned_schemas_survive_open_and_the_ends_of_input_are_idempotent() -> None:
    left, right = left_table(100), right_table([])
    join = planned("left", left, right)
    assert join.planned_schemas == (left.schema, right.schema)
    op = on_duckdb(join)
    op.open()
    assert list(op.end_input(RIGHT)) == []
    out = [*op.process(left, LEFT), *op.end_input(LEFT)]
    assert list(op.end_input(RIGHT)) == [] and list(op.end_input(LEFT)) == []
    out += op.finish()
    op.close()
    assert_equals_pyarrow(pa.concat_tables(out), left, right, "left")  # each row once


def finished_subpartitions(
    tmp_path: Path, tables: Sequence[pa.Table], n: int = 3
) -> list[PollResponse]:
    """The last poll of each of ``n`` hash subpartitions after a writer emitted ``tables``."""
    descriptor = PartitionDescriptor(
        PartitionId("job/right/0"),
        "job",
        "right",
        0,
        n,
        1,
        partition_type("blocking"),
        Partitioner(PartitionerKind.HASH, ("k",)),
    )
    put = lambda t: t  # noqa: E731 - a table stands in for its ObjectRef
    partition = ResultPartition(
        descriptor,
        MemoryBudget(1 << 20),
        str(tmp_path / "spill.arrows"),
        put,
        2,
        5.0,
        threading.Event(),
    )
    writer = ResultPartitionWriter(partition, 1 << 20)
    for table in tables:
        writer.emit(table)
    writer.finish()
    responses = []
    for sub in range(n):
        response = partition.poll(PollRequest(descriptor.partition_id, sub, 0, 0, 100, 0.01))
        assert response.end_of_partition
        responses.append(response)
    return responses


def test_every_subpartition_tells_its_readers_the_schema_without_an_empty_buffer(
    tmp_path: Path,
) -> None:
    right = right_table([3])  # one key: one subpartition gets it, the others nothing
    responses = finished_subpartitions(tmp_path, [right.slice(0, 0), right])
    assert sorted(len(r.buffers) for r in responses) == [0, 0, 1]  # no object for nothing
    for response in responses:
        assert response.schema == right.schema
    # what the join makes of such a subpartition, with no planned schema at all
    left = left_table(1_000)
    events: list[Event] = [(RIGHT, right.schema.empty_table())]
    got = drive(HashJoin(["k"], "left", "j"), [*events, ("end", RIGHT), (LEFT, left)])
    assert got.schema.names == ["k", "v", "w"] and got.column("w").null_count == 1_000
