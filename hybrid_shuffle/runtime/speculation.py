"""Speculative execution (Flink's FLIP-168): when a task gets a second attempt.

Two plain rules, apart from the scheduler that acts on them:

- *Eligibility* (``plan.speculation``): which vertices may be copied at all, a fact of
  the plan that ``explain()`` shows.  The scheduler adds the checks that depend on the
  run: the task's producers all finished, and no consumer of its outputs has deployed.
- *Slowness* (``slow_tasks``, here): once ``quantile`` of a vertex's subtasks have
  finished, a running subtask is slow past ``multiplier`` times their median runtime,
  and never before ``min_runtime``.

Plain Python: unit-tested on plain data.
"""

from __future__ import annotations

import statistics
from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

from hybrid_shuffle.config import SpeculationConfig

__all__ = ["slow_tasks"]

K = TypeVar("K", bound=Hashable)


def slow_tasks(
    finished: Sequence[float],
    running: Mapping[K, float],
    subtasks: int,
    config: SpeculationConfig,
) -> list[K]:
    """The running tasks of one vertex to speculate: ``finished`` are the runtimes
    (seconds) of its finished subtasks, ``running`` how long each running one has run,
    ``subtasks`` its parallelism.  Longest running first."""
    if not finished or not running or subtasks <= 0:
        return []
    if len(finished) / subtasks < config.quantile:
        return []
    threshold = max(config.multiplier * statistics.median(finished), config.min_runtime)
    slow = [task for task, seconds in running.items() if seconds > threshold]
    return sorted(slow, key=lambda task: -running[task])
