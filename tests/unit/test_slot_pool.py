"""Executor placement and per-job slot allocation, with a recording backend (no Ray)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pytest

from hybrid_shuffle.errors import ExecutorLostError
from hybrid_shuffle.runtime.slot_pool import ExecutorSpec, SlotAllocation, SlotPool, placement
from hybrid_shuffle.shuffle.api import ShuffleEnvironmentContext


class Backend:
    def __init__(self, nodes: list[str]) -> None:
        self.nodes = nodes
        self.created: list[tuple[str, str]] = []
        self.killed: list[Any] = []
        #: executors whose watch has resolved (Ray reported them dead)
        self.dead: set[Any] = set()
        #: requests that have been answered
        self.up: set[Any] = set()
        #: executors whose constructor raised
        self.broken: set[Any] = set()
        #: the refs each ``answers`` call waited for
        self.awaited: list[list[Any]] = []

    def worker_nodes(self) -> list[str]:
        return list(self.nodes)

    def create_executor(self, spec: ExecutorSpec, name: str, node_id: str) -> Any:
        self.created.append((name, node_id))
        return name

    def call_all(self, executors: Sequence[Any], method: str, timeout: float, *a: Any) -> list:
        return [{"node_id": "n", "pid": 1} for _ in executors]

    def ask_all(self, executors: Sequence[Any], method: str, timeout: float) -> None:
        pass

    def kill(self, executor: Any) -> None:
        self.killed.append(executor)

    def watch(self, executor: Any) -> Any:
        return executor

    def resolved(self, refs: Sequence[Any]) -> list[int]:
        return [i for i, ref in enumerate(refs) if ref in self.dead or ref in self.up]

    def request(self, executor: Any, method: str) -> Any:
        return f"{executor}.{method}"

    def answers(self, refs: Sequence[Any], timeout: float) -> list[Any]:
        self.awaited.append(list(refs))
        executors = [ref.rpartition(".")[0] for ref in refs]
        if self.broken & set(executors):
            raise ExecutorLostError("executor 0 failed to start: ValueError: boom")
        return [None if e in self.dead else {"node_id": "n", "pid": 1} for e in executors]


def spec(i: int) -> ExecutorSpec:
    return ExecutorSpec("executor-local", ShuffleEnvironmentContext(i, "s", 1, 1, 1.0, 1, "/x"))


def test_executors_spread_round_robin_over_the_nodes() -> None:
    assert placement(5, ["a", "b"]) == ["a", "b", "a", "b", "a"]
    with pytest.raises(ExecutorLostError, match="no alive node"):
        placement(1, [])


def test_a_replaced_executor_goes_to_an_alive_node() -> None:
    backend = Backend(["a", "b"])
    pool = SlotPool(backend, "s", 2, spec, 5.0)
    pool.start()
    backend.nodes = ["a"]  # node b was removed
    pool.replace(1)
    assert pool.nodes == ["a", "a"]
    assert backend.killed == ["s-executor-1"]


def test_heal_replaces_exactly_the_executors_ray_reported_dead_under_new_names() -> None:
    backend = Backend(["a", "b"])
    pool = SlotPool(backend, "s", 2, spec, 5.0)
    pool.start()
    backend.dead.add("s-executor-0")
    assert pool.dead() == [0]
    assert pool.heal() == [0]
    assert pool.executors == ["s-executor-0.2", "s-executor-1"]  # a name Ray has not seen
    assert pool.dead() == [] and pool.replaced == 1


def test_a_slot_frees_when_the_last_task_of_its_region_finished() -> None:
    slots = SlotAllocation(2)
    taken = slots.acquire(2)
    assert slots.free == 0
    for executor in taken:
        slots.task_started(executor)
    slots.task_started(taken[0])  # slot sharing: two tasks of one region on one slot
    slots.task_finished(taken[0])
    assert slots.free == 0
    slots.task_finished(taken[0])
    assert slots.free == 1


def test_a_replacement_that_dies_while_starting_makes_its_node_avoided() -> None:
    backend = Backend(["a", "b"])
    pool = SlotPool(backend, "s", 2, spec, 5.0)
    pool.start()
    pool.replace(1)  # node b is kept: it still counts as alive
    assert pool.starting() == {1} and pool.nodes == ["a", "b"]
    backend.dead.add(pool.executors[1])  # it died before answering: b is gone
    assert pool.dead() == [1]
    pool.replace(1)
    assert pool.nodes == ["a", "a"]
    backend.up.add(f"{pool.executors[1]}.ready")
    assert pool.starting() == set()


def test_tasks_go_to_slots_whose_executor_is_up_before_one_still_starting() -> None:
    slots = SlotAllocation(3)
    assert slots.acquire(2, later={0}) == [1, 2]
    assert slots.acquire(1, later={0}) == [0]


def test_candidates_are_the_acquire_order_and_take_takes_exactly_the_chosen_slots() -> None:
    slots = SlotAllocation(4)
    assert slots.candidates(later={0}, required={3}) == [3, 1, 2, 0]
    slots.take([2, 0])
    assert slots.candidates() == [1, 3] and slots.free == 2
    with pytest.raises(ValueError, match=r"slots \[2\] are not free"):
        slots.take([2])


def test_start_returns_at_once_and_the_first_heal_waits_for_the_executors() -> None:
    backend = Backend(["a"])
    pool = SlotPool(backend, "s", 2, spec, 5.0)
    pool.start()
    assert backend.awaited == []  # nobody waited yet
    assert pool.heal() == []
    assert backend.awaited == [["s-executor-0.ready", "s-executor-1.ready"]]
    pool.heal()
    assert pool.info == [{"node_id": "n", "pid": 1}] * 2
    assert len(backend.awaited) == 1  # only the first call waits


def test_an_executor_whose_constructor_raised_is_one_error_at_first_use() -> None:
    backend = Backend(["a"])
    pool = SlotPool(backend, "s", 2, spec, 5.0)
    pool.start()
    backend.broken.add("s-executor-0")
    with pytest.raises(ExecutorLostError, match="failed to start: ValueError: boom"):
        pool.heal()
    assert backend.created == [("s-executor-0", "a"), ("s-executor-1", "a")]  # no replacement


def test_one_death_seen_by_two_threads_gets_one_replacement_and_no_orphan() -> None:
    """The scheduler's thread and a probe from another thread (``running_tasks``) both
    heal; the first one's replacement is held until the second thread looked for dead
    executors (or half a second passed, which is what happens when healing is atomic)."""
    looked = threading.Event()

    class Racing(Backend):
        def resolved(self, refs: Sequence[Any]) -> list[int]:
            if threading.current_thread().name == "second":
                looked.set()
            return super().resolved(refs)

        def create_executor(self, spec: ExecutorSpec, name: str, node_id: str) -> Any:
            if threading.current_thread().name == "first":
                looked.wait(0.5)
            return super().create_executor(spec, name, node_id)

    backend = Racing(["a"])
    pool = SlotPool(backend, "s", 2, spec, 5.0)
    pool.start()
    pool.heal()  # the first heal waits for the start; both threads below only look
    backend.dead.add("s-executor-1")
    threads = [threading.Thread(target=pool.heal, name=n) for n in ("first", "second")]
    threads[0].start()
    threads[1].start()
    for thread in threads:
        thread.join(10)
    assert pool.replaced == 1
    assert pool.executors == ["s-executor-0", "s-executor-1.2"]
    orphans = {name for name, _ in backend.created} - set(pool.executors) - set(backend.killed)
    assert orphans == set()


def test_an_executor_killed_while_starting_is_replaced_by_the_first_heal() -> None:
    backend = Backend(["a"])
    pool = SlotPool(backend, "s", 2, spec, 5.0)
    pool.start()
    backend.dead.add("s-executor-1")
    assert pool.heal() == [1]
    assert pool.executors == ["s-executor-0", "s-executor-1.2"] and pool.nodes == ["a", "a"]


def test_close_kills_executors_still_starting_without_asking_them() -> None:
    asked: list[list[Any]] = []

    class Recording(Backend):
        def ask_all(self, executors: Sequence[Any], method: str, timeout: float) -> None:
            asked.append(list(executors))

    backend = Recording(["a"])
    pool = SlotPool(backend, "s", 2, spec, 5.0)
    pool.start()
    backend.up.add("s-executor-0.ready")
    pool.close(1.0)
    assert asked == [["s-executor-0"]]
    assert backend.killed == ["s-executor-0", "s-executor-1"]
