from __future__ import annotations

import pytest

from hybrid_shuffle.shuffle.memory_budget import MemoryBudget


def test_reservations_beyond_the_limit_are_refused_and_the_peak_is_kept() -> None:
    budget = MemoryBudget(100)
    assert budget.try_reserve(60)
    assert not budget.try_reserve(50)
    budget.release(60)
    assert budget.try_reserve(100)
    assert budget.peak == 100


def test_releasing_more_than_reserved_is_a_bug_not_a_silent_negative() -> None:
    budget = MemoryBudget(10)
    with pytest.raises(AssertionError):
        budget.release(1)
