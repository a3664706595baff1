"""Checks of what users pass in code, before anything is planned."""

from __future__ import annotations

from hybrid_shuffle.config import AUTO
from hybrid_shuffle.errors import PlanError

__all__ = ["partition_count", "positive_count"]


def positive_count(value: object, what: str) -> int | None:
    """``value`` if it is None or a positive integer; else a ``PlanError`` naming ``what``
    (``partitions=0`` would otherwise mean "the default" or fail deep in the planner)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlanError(f"{what}: must be a positive integer, got {value!r}")
    return value


def partition_count(value: object, what: str) -> int | str | None:
    """An exchange's ``partitions=``: ``positive_count``, or ``"auto"`` (decided when the
    producers finish; see ``hybrid_shuffle.config.AdaptiveConfig``)."""
    if value is None:
        return None
    if value == AUTO:
        return AUTO
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlanError(f"{what}: must be a positive integer or 'auto', got {value!r}")
    return value
