"""``partitions: auto``: the decision rule, the subpartition ranges and the plan."""

from __future__ import annotations

import pytest

from hybrid_shuffle.config import Config, load_config
from hybrid_shuffle.errors import ConfigError
from hybrid_shuffle.plan.graph import AdaptiveParallelism
from hybrid_shuffle.plan.planner import plan_job
from hybrid_shuffle.runtime.deployment import subpartitions_of

from .builders import Builder

MiB = 1 << 20


@pytest.mark.parametrize(
    ("written", "slots", "expected"),
    [
        (0, 8, 1),  # nothing written: the minimum
        (10, 8, 1),
        (64 * MiB, 8, 1),
        (64 * MiB + 1, 8, 2),
        (10 * 64 * MiB, 8, 8),  # capped by the session's slots
        (10 * 64 * MiB, 100, 10),
        (1000 * 64 * MiB, 100, 64),  # capped by max_partitions
    ],
)
def test_decide_is_one_subtask_per_target_bytes_within_bounds(
    written: int, slots: int, expected: int
) -> None:
    a = AdaptiveParallelism(64 * MiB, 1, 64)
    assert a.decide(written, slots) == expected
    assert a.decided == expected and a.input_bytes == written


def test_min_partitions_is_kept_unless_the_slots_are_fewer() -> None:
    assert AdaptiveParallelism(64 * MiB, 3, 64).decide(0, 8) == 3
    assert AdaptiveParallelism(64 * MiB, 3, 64).decide(0, 2) == 2


@pytest.mark.parametrize(("consumers", "subpartitions"), [(1, 64), (3, 64), (5, 7), (4, 4)])
def test_subpartition_ranges_cover_every_subpartition_once(
    consumers: int, subpartitions: int
) -> None:
    ranges = [subpartitions_of(c, consumers, subpartitions) for c in range(consumers)]
    assert [s for r in ranges for s in r] == list(range(subpartitions))
    assert all(len(r) >= subpartitions // consumers for r in ranges)


def test_adaptive_section_is_validated_at_load() -> None:
    config = load_config({"adaptive": {"target_bytes": "8 MiB", "max_partitions": 16}})
    assert (config.adaptive.target_bytes, config.adaptive.max_partitions) == (8 * MiB, 16)
    with pytest.raises(ConfigError, match=r"^adaptive.min_partitions: 9 is above"):
        load_config({"adaptive": {"min_partitions": 9, "max_partitions": 4}})
    with pytest.raises(ConfigError, match=r"^adaptive.target_bytes: "):
        load_config({"adaptive": {"target_bytes": 0}})
    assert load_config({"edges": {"x": {"partitions": "auto"}}}).edges["x"].partitions == "auto"


def test_the_semi_join_filter_keys_are_validated_at_load() -> None:
    config = load_config(
        {"adaptive": {"semi_join_filters": False, "semi_join_filter_max_keys": 5000}}
    )
    assert (config.adaptive.semi_join_filters, config.adaptive.semi_join_filter_max_keys) == (
        False,
        5000,
    )
    assert Config().adaptive.semi_join_filter_max_keys == 1_000_000
    with pytest.raises(ConfigError, match=r"^adaptive.semi_join_filter_max_keys: "):
        load_config({"adaptive": {"semi_join_filter_max_keys": 0}})
    with pytest.raises(ConfigError, match=r"^adaptive.semi_join_filters: "):
        load_config({"adaptive": {"semi_join_filters": "sometimes"}})


def test_plan_marks_a_blocking_consumer_adaptive_and_explains_a_fallback() -> None:
    b = Builder()
    src = b.source("src", 2)
    agg = b.agg(src, "agg", edge="by_customer", mode="blocking", partitions="auto")
    plan = plan_job("j", agg, Config(), slots=4)
    vertex = plan.graph.vertices[plan.graph.edge("by_customer").target]
    assert vertex.adaptive is not None and vertex.awaits_parallelism
    assert "partitions auto" in plan.explain()

    b = Builder()
    agg = b.agg(b.source("src", 2), "agg", edge="e", mode="pipelined", partitions="auto")
    plan = plan_job("j", agg, Config(), slots=4)
    vertex = plan.graph.vertices[plan.graph.edge("e").target]
    assert vertex.adaptive is None and vertex.parallelism == Config().parallelism
    assert "auto falls back: edge 'e' is pipelined" in plan.explain()


def test_yaml_auto_overrides_a_count_in_code() -> None:
    config = load_config({"edges": {"e": {"mode": "blocking", "partitions": "auto"}}})
    b = Builder()
    agg = b.agg(b.source("src", 2), "agg", edge="e", partitions=3)
    plan = plan_job("j", agg, config, slots=4)
    assert plan.graph.vertices[plan.graph.edge("e").target].adaptive is not None
