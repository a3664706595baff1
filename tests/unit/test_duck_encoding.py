"""The inputs DuckDB would answer differently from pyarrow, staged encoded
(``operators.duck.encoding``), give pyarrow's rows: keys and columns of types DuckDB
does not give back as they came (durations, ``month_day_nano`` intervals, fixed-size
binary, string views, null-typed columns), float keys, and names equal but for case,
through the aggregate, the sort, the top-n and co_group as a task runs them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from hybrid_shuffle.operators import CoGroup, HashAggregate, SortPartition, TopN
from hybrid_shuffle.operators.base import Operator
from hybrid_shuffle.operators.context import OperatorContext
from hybrid_shuffle.operators.duck.encoding import Encoding
from hybrid_shuffle.operators.duck.operators import on_duckdb
from hybrid_shuffle.operators.duck.sort import DuckSort

ROWS = 3_000


def pick(pool: list[Any], key_type: pa.DataType, seed: int) -> pa.Array:
    rng = np.random.default_rng(seed)
    index = rng.integers(0, len(pool), ROWS)
    mask = rng.random(ROWS) < 0.05
    return pa.array([None if m else pool[i] for i, m in zip(index, mask, strict=True)], key_type)


KEYS: dict[str, pa.Array] = {
    "duration": pick([1, -5, 0, 2**40], pa.duration("us"), 1),
    "fsb": pick([b"ab", b"cd", b"\x00\x00"], pa.binary(2), 2),
    "view": pick(["", "a", "ab"], pa.string_view(), 3),
    "mdn": pick(
        [pa.MonthDayNano([1, 2, 3]), pa.MonthDayNano([0, 0, 0]), pa.MonthDayNano([0, 0, 1])],
        pa.month_day_nano_interval(),
        4,
    ),
    "none": pa.nulls(ROWS),
    "tz": pick([0, 10**12, -5], pa.timestamp("ns", "Europe/Paris"), 5),
}


def run(op: Operator, batches: list[tuple[int, pa.Table]], path: str = "arrow") -> pa.Table:
    """``op`` as a task runs it; a sort on ``path`` ``duckdb`` sorts on DuckDB however
    little it holds (``DuckSort.held``)."""
    task = on_duckdb(op)
    task.open(OperatorContext.unbounded())
    if path == "duckdb" and isinstance(task, DuckSort):
        task.held.limit = 0
    try:
        out = [t for index, table in batches for t in task.process(table, index)]
        for index in range(op.num_inputs):
            out += task.end_input(index)
        out += task.finish()
    finally:
        task.close()
    return pa.concat_tables(out) if out else pa.table({})


def in_batches(table: pa.Table, size: int = 700) -> list[tuple[int, pa.Table]]:
    return [(0, table.slice(i, size)) for i in range(0, table.num_rows, size)]


def as_rows(table: pa.Table) -> list[str]:
    return sorted(map(repr, table.to_pylist()))


@pytest.mark.parametrize("key", list(KEYS))
def test_keys_of_every_encoded_type_group_as_pyarrow_groups_them(key: str) -> None:
    table = pa.table({"k": KEYS[key], "v": np.arange(ROWS) % 17})
    got = run(HashAggregate(["k"], {"v": ["sum", "count", "max"]}, "agg"), in_batches(table))
    want = table.group_by("k", use_threads=False).aggregate(
        [("v", "sum"), ("v", "count"), ("v", "max")]
    )
    assert got.schema == want.schema
    assert as_rows(got) == as_rows(want)


@pytest.mark.parametrize("path", ["arrow", "duckdb"])
@pytest.mark.parametrize("descending", [False, True])
def test_a_sort_gives_every_encoded_column_back_as_it_came(descending: bool, path: str) -> None:
    # (pyarrow's sort, the oracle, cannot take a string view)
    columns = {f"c_{name}": array for name, array in KEYS.items() if name != "view"}
    table = pa.table({"k": np.arange(ROWS)[::-1] % 1000, "i": np.arange(ROWS), **columns})
    got = run(SortPartition(["k", "i"], descending, "s"), in_batches(table), path)
    order = "descending" if descending else "ascending"
    want = table.sort_by([("k", order), ("i", order)])
    assert got.schema == want.schema
    assert got.equals(want)


@pytest.mark.parametrize("path", ["arrow", "duckdb"])
@pytest.mark.parametrize("key", ["duration", "fsb", "tz"])
def test_a_sort_by_an_encoded_key_orders_as_pyarrow(key: str, path: str) -> None:
    table = pa.table({"k": KEYS[key], "i": np.arange(ROWS)})
    got = run(SortPartition(["k", "i"], True, "s"), in_batches(table), path)
    assert got.equals(table.sort_by([("k", "descending"), ("i", "descending")]))


def test_names_equal_but_for_case_keep_their_own_columns() -> None:
    """DuckDB's identifiers ignore case: such columns are staged under aliases."""
    rng = np.random.default_rng(6)
    table = pa.table(
        {
            "k": rng.integers(0, 50, ROWS),
            "K": rng.integers(0, 3, ROWS),
            "v": rng.integers(0, 100, ROWS),
            "V": rng.random(ROWS),
        }
    )
    got = run(HashAggregate(["k", "K"], {"v": "sum", "V": "max"}, "agg"), in_batches(table))
    want = table.group_by(["k", "K"], use_threads=False).aggregate([("v", "sum"), ("V", "max")])
    assert got.schema == want.schema and as_rows(got) == as_rows(want)

    got = run(SortPartition(["K", "v"], False, "s"), in_batches(table))
    want = table.sort_by([("K", "ascending"), ("v", "ascending")])
    assert got.select(["K", "v"]).equals(want.select(["K", "v"]))
    assert as_rows(got) == as_rows(want)

    got = run(HashAggregate.of(TopN(["K"], 2, ["V"], "top")), in_batches(table))
    best = table.sort_by([("V", "descending")]).to_pylist()
    want_top = [r for K in (0, 1, 2) for r in [r for r in best if r["K"] == K][:2]]
    assert as_rows(got) == sorted(map(repr, want_top))

    calls: list[tuple[pa.Table, pa.Table]] = []
    co_group = CoGroup(["K"], lambda a, b: calls.append((a, b)), "cg")
    run(co_group, [(0, table), (1, table.slice(0, 10))])
    left = pa.concat_tables([a for a, _ in calls])
    assert left.schema == table.schema and as_rows(left) == as_rows(table)


def test_a_top_n_by_a_float_descending_puts_nan_after_every_number() -> None:
    """DuckDB's NaN is above every number; pyarrow's comes after them in both directions."""
    table = pa.table(
        {
            "k": pa.array([0.0, -0.0, 0.0, -0.0, float("nan"), float("nan")]),
            "score": [float("nan"), 1.0, 2.0, float("nan"), float("nan"), 3.0],
            "id": [1, 2, 3, 4, 5, 6],
        }
    )
    got = run(HashAggregate.of(TopN(["k"], 1, ["score"], "top")), in_batches(table, 1))
    assert sorted(got.column("id").to_pylist()) == [2, 3, 6]  # the zeros two keys, NaN one


def test_an_encoding_views_float_keys_as_their_bits_and_renames_case_clashes() -> None:
    schema = pa.schema([("f", pa.float32()), ("F", pa.int64()), ("d", pa.duration("s"))])
    encoding = Encoding(schema, ["f"])
    assert encoding.staged.types == [pa.int32(), pa.int64(), pa.int64()]
    assert encoding.names == {"f": "__hs_0_f", "F": "__hs_1_F", "d": "d"}
    table = pa.table(
        {
            "f": pa.array([-0.0, 1.0, None], pa.float32()),
            "F": [1, 2, 3],
            "d": pa.array([1, 2, None], pa.duration("s")),
        }
    )
    staged = encoding.encode(table)
    assert staged.column(0).to_pylist() == [-(2**31), 0x3F800000, None]
    assert pc.is_null(staged.column(2)).to_pylist() == [False, False, True]
    assert Encoding(pa.schema([("k", pa.int64())]), ["k"]).identity
