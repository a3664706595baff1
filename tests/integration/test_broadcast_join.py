"""``join(strategy="broadcast")``: the build side goes whole to every join subtask, the
probe side stays where its producer made it, and every supported ``how`` equals
pyarrow's join, in every mode (on DuckDB, the one kernel).

The probe side runs at a parallelism (3) other than the session's default (2), so a
join that kept it without an exchange shows it: the join has the probe producer's
parallelism and is chained into its task, whose only input edge is the build side's.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pytest

import hybrid_shuffle as hs
from hybrid_shuffle.errors import PlanError
from hybrid_shuffle.operators.join_types import JOIN_TYPES

from .conftest import assert_closed_cleanly, assert_no_leaks

MODES = ["pipelined", "blocking", "hybrid-selective", "hybrid-full"]
HOWS = ["inner", "left", "semi", "anti"]
PROBE_ROWS = 20_000
PROBE_PARALLELISM = 3


@pytest.fixture(scope="module")
def session(local_ray: None) -> Iterator[hs.Session]:
    config = {
        "parallelism": 2,
        "shuffle": {"buffer_size": "16 KiB", "memory_budget": "32 MiB"},
    }
    with hs.Session(config, slots=4) as s:
        yield s
    assert_closed_cleanly(s)


def probe_table() -> pa.Table:
    """Int and string keys with nulls; most keys have build rows, some have none."""
    rng = np.random.default_rng(23)
    k = rng.integers(0, 300, PROBE_ROWS)
    return pa.table(
        {
            "k": pa.array(k, pa.int64(), mask=rng.random(PROBE_ROWS) < 0.02),
            "s": pa.array([f"s{i % 7}" for i in k], mask=rng.random(PROBE_ROWS) < 0.02),
            "v": np.arange(PROBE_ROWS, dtype=np.int64),
        }
    )


def build_table() -> pa.Table:
    """Every third key, each twice (duplicate keys), a null key; ``v`` collides."""
    keys = [k for k in range(0, 250, 3) for _ in range(2)] + [None]
    return pa.table(
        {
            "k": pa.array(keys, pa.int64()),
            "s": pa.array([None if k is None else f"s{k % 7}" for k in keys]),
            "v": pa.array([None if k is None else -k for k in keys], pa.int64()),
            "w": pa.array([f"w{i}" for i in range(len(keys))]),
        }
    )


def pyarrow_join(on: list[str], how: str) -> pa.Table:
    return probe_table().join(
        build_table(), keys=on, join_type=JOIN_TYPES[how], right_suffix="_right"
    )


def broadcast_join(
    session: hs.Session, job_name: str, on: list[str], how: str, mode: str | None = None
) -> tuple[hs.Job, hs.Stream]:
    job = session.job(job_name)
    probe = job.from_arrow(probe_table(), name="probe", parallelism=PROBE_PARALLELISM)
    probe = probe.map_batches(lambda t: t, name="probe_map")
    build = job.from_arrow(build_table(), name="build", parallelism=2)
    joined = probe.join(build, on=on, how=how, mode=mode, name="j", strategy="broadcast")
    return job, joined


def assert_equal_rows(got: pa.Table, want: pa.Table) -> None:
    assert got.schema == want.schema
    order = [(n, "ascending") for n in want.column_names]
    assert got.sort_by(order).equals(want.sort_by(order))


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("mode", MODES)
def test_broadcast_join_equals_pyarrow_in_every_mode(
    session: hs.Session, mode: str, how: str
) -> None:
    _, joined = broadcast_join(session, f"broadcast-{how}-{mode}", ["k"], how, mode)
    result = joined.collect()
    assert_equal_rows(result.table, pyarrow_join(["k"], how))
    assert result.edges["j.right"].mode == mode
    assert_no_leaks(session)


@pytest.mark.parametrize("how", HOWS)
def test_broadcast_join_on_a_string_and_an_int_key_equals_pyarrow(
    session: hs.Session, how: str
) -> None:
    _, joined = broadcast_join(session, f"broadcast-two-keys-{how}", ["s", "k"], how)
    assert_equal_rows(joined.to_arrow(), pyarrow_join(["s", "k"], how))
    assert_no_leaks(session)


def test_broadcast_join_with_an_empty_build_side_keeps_or_drops_every_probe_row(
    session: hs.Session,
) -> None:
    empty = build_table().schema.empty_table()
    for how in HOWS:
        job = session.job(f"broadcast-empty-{how}")
        probe = job.from_arrow(probe_table(), name="probe", parallelism=PROBE_PARALLELISM)
        build = job.from_arrow(empty, name="build", parallelism=2)
        got = probe.join(build, on="k", how=how, strategy="broadcast").to_arrow()
        want = probe_table().join(empty, keys="k", join_type=JOIN_TYPES[how], right_suffix="_right")
        assert_equal_rows(got, want)
    assert_no_leaks(session)


def test_the_probe_side_is_not_exchanged_and_the_build_side_is_broadcast(
    session: hs.Session,
) -> None:
    job, joined = broadcast_join(session, "broadcast-plan", ["k"], "left")
    plan = job.explain_data(joined)
    join_vertex = next(v for v in plan["vertices"] if v["operators"][-1:] == ["j"])
    assert join_vertex["parallelism"] == PROBE_PARALLELISM
    # the join is chained into its probe side's producer: one task, no edge between them
    assert join_vertex["operators"][-2:] == ["probe_map", "j"]
    into_join = {e["name"]: e for e in plan["edges"] if e["target"] == join_vertex["name"]}
    assert list(into_join) == ["j.right"]
    assert into_join["j.right"]["partitioner"] == "broadcast"
    assert "broadcast" in job.explain(joined).split("edges:", 1)[1]


@pytest.mark.parametrize("how", ["right", "full"])
def test_a_broadcast_join_that_would_repeat_build_rows_is_refused_in_one_sentence(
    session: hs.Session, how: str
) -> None:
    job = session.job(f"broadcast-{how}")
    probe = job.from_arrow(probe_table(), name="probe")
    build = job.from_arrow(build_table(), name="build")
    with pytest.raises(PlanError) as error:
        probe.join(build, on="k", how=how, name="j", strategy="broadcast")
    message = str(error.value)
    assert "join 'j'" in message and f"how='{how}'" in message
    assert "strategy='hash'" in message and "'sort-merge'" in message
    assert message.count(". ") == 0


def test_a_broadcast_join_refuses_partitions_it_would_not_use(session: hs.Session) -> None:
    job = session.job("broadcast-partitions")
    probe = job.from_arrow(probe_table(), name="probe")
    build = job.from_arrow(build_table(), name="build")
    with pytest.raises(PlanError, match="join 'j': strategy='broadcast' runs in as many"):
        probe.join(build, on="k", partitions=4, name="j", strategy="broadcast")


@pytest.mark.parametrize("mode", MODES)
def test_a_broadcast_join_chained_behind_an_exchange_and_in_a_diamond_equals_pyarrow(
    session: hs.Session, mode: str
) -> None:
    """The chained join's task reads its head input (an aggregate's exchange) and the build
    side interleaved; both sides come from one source (a diamond), which must not wait
    on itself in any mode."""
    job = session.job(f"broadcast-diamond-{mode}")
    rows = job.from_arrow(probe_table(), name="rows", parallelism=PROBE_PARALLELISM)
    per_key = rows.key_by("k").aggregate({"v": "sum"}, name="per_key")
    small = rows.filter(lambda t: pa.compute.less(t["k"], 30), name="small")
    joined = per_key.join(small, on="k", how="left", mode=mode, strategy="broadcast")
    table = probe_table()
    totals = table.group_by("k").aggregate([("v", "sum")])
    want = totals.join(
        table.filter(pa.compute.less(table["k"], 30)),
        keys="k",
        join_type="left outer",
        right_suffix="_right",
    )
    assert_equal_rows(joined.to_arrow(), want)
    assert_no_leaks(session)
