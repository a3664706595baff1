"""co_group within ``operators.memory``, through real jobs, on DuckDB.

co_group runs in all four modes (each key in exactly one call, the answer equal to
one single-process pyarrow computation, the vertex's memory and peak reported), with
keys on one side only and with empty sides; the output-on-EOF rule shows in
``EdgeMetrics.mode_origin`` and ``explain()``; a wrong join or co_group argument is
one sentence before running.

Spilling is DuckDB's: these jobs stay within ``operators.memory`` (64 MiB, the
smallest the engine honours), and
``test_duckdb_spilling.py`` and ``test_duckdb_join_spilling.py`` make the aggregate,
the sort, the joins and co_group spill.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import hybrid_shuffle as hs

from .conftest import assert_closed_cleanly, assert_no_leaks

MODES = ["pipelined", "blocking", "hybrid-selective", "hybrid-full"]
#: the smallest budget the engine honours (``OPERATORS_MIN_MEMORY``)
MEMORY = 64 << 20
#: rows of 16 bytes (int64 key, float64 value): 8 MiB per subtask, well within MEMORY
ROWS = 1 << 20


@pytest.fixture(scope="module")
def session(local_ray: None) -> Iterator[hs.Session]:
    config = {
        "parallelism": 2,
        "operators": {"memory": MEMORY},
        "shuffle": {"buffer_size": "256 KiB", "memory_budget": "128 MiB"},
    }
    with hs.Session(config, slots=4) as s:
        yield s
    assert_closed_cleanly(s)


def table(rows: int, keys: int, seed: int, nulls: bool = True) -> pa.Table:
    rng = np.random.default_rng(seed)
    mask = rng.random(rows) < 0.01 if nulls else None
    return pa.table(
        {
            "k": pa.array(rng.integers(0, keys, rows), mask=mask),
            "v": rng.random(rows),
        }
    )


def ordered(t: pa.Table) -> pa.Table:
    """Rows in one canonical order (every column, nulls last), chunks combined."""
    return t.sort_by([(c, "ascending") for c in t.column_names]).combine_chunks()


def reported(result: hs.JobResult, vertex: str) -> hs.VertexMetrics:
    """The vertex's memory and peak are reported (on DuckDB, its queries' peak)."""
    v = result.vertices[vertex]
    assert v.memory == MEMORY, v
    assert v.peak_memory_bytes > 0, v
    return v


def count_both_sides(left: pa.Table, right: pa.Table) -> pa.Table:
    """Per key of the call: rows on each side and the sum of the left values (vectorized,
    as a co_group function should be)."""
    lc = left.group_by("k").aggregate([("v", "count"), ("v", "sum")])
    rc = right.group_by("k").aggregate([("w", "count")])
    out = lc.join(rc, "k", join_type="full outer")
    return pa.table(
        {
            "k": out.column("k"),
            "left_rows": pc.fill_null(out.column("v_count"), 0),
            "right_rows": pc.fill_null(out.column("w_count"), 0),
            "v_sum": out.column("v_sum"),
        }
    )


def co_group_reference(left: pa.Table, right: pa.Table) -> pa.Table:
    return count_both_sides(left, right)


@pytest.mark.parametrize("mode", MODES)
def test_co_group_in_every_mode_covers_each_key_once(session: hs.Session, mode: str) -> None:
    left = table(ROWS // 2, 200_000, 5)
    # right keys overlap only half of the left's, and have keys of their own
    right = table(ROWS // 2, 200_000, 6)
    right = right.set_column(0, "k", pc.add(right.column("k"), 100_000)).rename_columns(["k", "w"])
    job = session.job("co_group")
    grouped = job.from_arrow(left).co_group(
        job.from_arrow(right), "k", count_both_sides, name="grouped", mode=mode
    )
    result = grouped.collect()
    got = result.table
    keyed = got.filter(pc.is_valid(got.column("k")))  # (fn's join never matches null keys)
    assert pc.count_distinct(keyed.column("k")).as_py() == keyed.num_rows  # each key once
    want = co_group_reference(left, right)
    assert ordered(got).drop_columns(["v_sum"]).equals(ordered(want).drop_columns(["v_sum"]))
    assert np.allclose(
        pc.fill_null(ordered(got).column("v_sum"), 0).to_numpy(),
        pc.fill_null(ordered(want).column("v_sum"), 0).to_numpy(),
    )
    assert {result.edges[f"grouped.{s}"].mode for s in ("left", "right")} == {mode}
    assert result.edges["grouped.left"].mode_origin == "code"
    reported(result, "grouped")
    assert_no_leaks(session)


@pytest.mark.parametrize("empty", ["left", "right", "both"])
def test_co_group_with_an_empty_side_sees_every_key_of_the_other(
    session: hs.Session, empty: str
) -> None:
    left = table(5_000, 1_000, 7)
    right = table(5_000, 1_000, 8).rename_columns(["k", "w"])
    if empty in ("left", "both"):
        left = left.slice(0, 0)
    if empty in ("right", "both"):
        right = right.slice(0, 0)
    job = session.job("co_group_empty")
    got = (
        job.from_arrow(left)
        .co_group(job.from_arrow(right), "k", count_both_sides, name="grouped")
        .to_arrow()
    )
    want = co_group_reference(left, right)
    if empty == "both":
        assert got.num_rows == 0
    else:
        assert (
            ordered(got)
            .drop_columns(["v_sum"])
            .equals(ordered(want.cast(got.schema)).drop_columns(["v_sum"]))
        )
    assert_no_leaks(session)


def test_output_on_eof_rule_shows_in_mode_origin_and_explain(session: hs.Session) -> None:
    data = table(20_000, 100, 9, nulls=False)
    job = session.job("rule")
    stream = (
        job.from_arrow(data)
        .rebalance(edge="spread")
        .key_by("k", edge="by_k", mode="pipelined")
        .aggregate({"v": "sum"}, name="totals")
        .sort("v_sum", edge="to_sort", name="top")
    )
    text = stream.explain()
    assert "spread" in text and "mode blocking (output-on-eof)" in text
    assert "mode pipelined (code)" in text
    assert "warning: edge 'by_k' keeps mode pipelined set in code (mode=)" in text
    result = stream.collect()
    origins = {name: (e.mode, e.mode_origin) for name, e in result.edges.items()}
    assert origins == {
        "spread": ("blocking", "output-on-eof"),
        "by_k": ("pipelined", "code"),
        "to_sort": ("blocking", "output-on-eof"),
    }
    assert result.vertices["top"].rows_out == result.table.num_rows == 100
    assert result.vertices["totals"].rows_out == 100
    assert "operator memory" in result.explain
    assert_no_leaks(session)


def test_a_wrong_join_or_co_group_argument_is_one_sentence_before_running(
    session: hs.Session,
) -> None:
    job = session.job("bad")
    left = job.from_arrow(table(100, 10, 10))
    right = job.from_arrow(table(100, 10, 11).rename_columns(["k", "w"]))
    with pytest.raises(hs.PlanError) as err:
        left.join(right, on="k", how="outer", name="j")
    assert str(err.value) == (
        "join 'j': how='outer' is not supported; use one of: inner, left, right, full, semi, anti"
    )
    with pytest.raises(hs.PlanError) as err:
        left.join(right, on="k", strategy="merge", name="j")
    assert str(err.value) == (
        "join 'j': strategy='merge' is not a join strategy; use one of: hash, sort-merge, broadcast"
    )
    as_text = right.map_batches(lambda t: t.set_column(0, "k", pc.cast(t["k"], pa.string())))
    with pytest.raises(hs.PlanError, match=r"co_group 'g'.*'k'.*int64.*string"):
        left.co_group(as_text, "k", count_both_sides, name="g").to_arrow()
    with pytest.raises(hs.PlanError, match=r"edge 'g.left': column 'nope' not in input"):
        left.co_group(right, "nope", count_both_sides, name="g").explain()
