"""``deal_splits``: row groups dealt into contiguous splits of about equal rows."""

from __future__ import annotations

import pytest

from hybrid_shuffle.sources.parquet import deal_splits


def test_equal_row_groups_deal_evenly() -> None:
    assert deal_splits([10] * 6, 3) == [[0, 1], [2, 3], [4, 5]]


def test_order_is_kept_and_every_fragment_dealt_once() -> None:
    rows = [7, 100, 3, 3, 50, 1, 20]
    groups = deal_splits(rows, 3)
    assert [i for g in groups for i in g] == list(range(len(rows)))


def test_one_large_fragment_does_not_starve_the_others() -> None:
    groups = deal_splits([100, 10, 10, 10, 10], 2)
    assert groups == [[0], [1, 2, 3, 4]]


def test_more_splits_than_fragments_leaves_some_empty() -> None:
    groups = deal_splits([5, 5], 4)
    assert sorted(len(g) for g in groups) == [0, 0, 1, 1]


def test_no_fragments_and_no_rows() -> None:
    assert deal_splits([], 2) == [[], []]
    assert deal_splits([0, 0, 0, 0], 2) == [[0, 1], [2, 3]]


def test_parallelism_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        deal_splits([1], 0)
