"""When an executor gives glibc's free pages back (``actors.idle_trim``): once idle for its
delay, never while a task runs, and at once when a leak probe asks while idle.  The
trim is a recording function here; the real one is exercised by the executor-memory
test of ``tests/integration/test_session_lifecycle.py``."""

from __future__ import annotations

import threading

from hybrid_shuffle.actors.idle_trim import IdleTrim, trim_malloc

_BOUND = 10.0  # seconds any wait here may take (a phase, never a timer)


class _Trims:
    def __init__(self) -> None:
        self.count = 0
        self.done = threading.Event()

    def __call__(self) -> None:
        self.count += 1
        self.done.set()


def test_an_idle_executor_trims_once_its_delay_passed() -> None:
    trims = _Trims()
    idle = IdleTrim(delay=0.0, trim=trims)
    try:
        idle.busy()
        idle.idle()
        assert trims.done.wait(_BOUND)
        assert trims.count == 1
    finally:
        idle.close()


def test_a_task_that_starts_puts_the_trim_off() -> None:
    trims = _Trims()
    idle = IdleTrim(delay=3600.0, trim=trims)
    try:
        idle.idle()
        idle.busy()  # before the hour passed: no trim is pending any more
        idle.now()  # a probe while the task runs trims nothing either
        assert trims.count == 0
        idle.idle()
        idle.now()  # idle again: the probe trims at once
        assert trims.count == 1
    finally:
        idle.close()


def test_a_trim_after_one_idle_spell_is_not_repeated() -> None:
    trims = _Trims()
    idle = IdleTrim(delay=0.0, trim=trims)
    try:
        idle.idle()
        assert trims.done.wait(_BOUND)
        trims.done.clear()
        idle.busy()
        idle.idle()  # a second spell trims a second time, and only then
        assert trims.done.wait(_BOUND)
        assert trims.count == 2
    finally:
        idle.close()


def test_the_real_trim_runs_on_any_thread() -> None:
    worker = threading.Thread(target=trim_malloc)
    worker.start()
    worker.join(_BOUND)
    assert not worker.is_alive()
