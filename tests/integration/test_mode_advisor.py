"""``shuffle.default_mode: auto`` on real executors: the modes it picks on few and on
many slots, and the same rows either way."""

from __future__ import annotations

import pyarrow as pa
import pytest

import hybrid_shuffle as hs

from .conftest import assert_closed_cleanly, assert_no_leaks
from .data import orders


def three_stages(session: hs.Session) -> hs.Stream:
    job = session.job("auto")
    rows = job.from_arrow(orders(20_000), name="orders", parallelism=8)
    second = rows.key_by("customer", edge="second").map_batches(lambda t: t, name="second")
    third = second.key_by("order_id", edge="third").map_batches(lambda t: t, name="third")
    return third


@pytest.mark.parametrize(("slots", "picked"), [(2, {"hybrid-selective"}), (16, {"pipelined"})])
def test_auto_picks_per_slot_count_and_the_rows_are_the_same(
    local_ray: None, slots: int, picked: set[str]
) -> None:
    config = {"parallelism": 8, "shuffle": {"default_mode": "auto", "buffer_size": "64 KiB"}}
    with hs.Session(config, slots=slots) as session:
        result = three_stages(session).collect()
        assert {e.mode for e in result.edges.values()} == picked
        assert {e.mode_origin for e in result.edges.values()} == {"auto"}
        got = result.table.sort_by("order_id")
        expected = orders(20_000)
        assert got.select(expected.column_names).equals(expected)
        assert isinstance(got, pa.Table)
        assert_no_leaks(session)
    assert_closed_cleanly(session)
