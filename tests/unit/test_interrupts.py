"""Ctrl-C during a job is recorded and raised where the scheduler can act on it."""

from __future__ import annotations

import _thread
import signal

import pytest

from hybrid_shuffle.runtime.interrupts import deferred_interrupts, raise_if_interrupted


def _press_ctrl_c() -> None:
    _thread.interrupt_main()  # the handler runs at the main thread's next instruction
    for _ in range(1000):
        pass


def test_a_ctrl_c_waits_for_the_loops_look_and_the_default_handler_comes_back() -> None:
    with deferred_interrupts():
        _press_ctrl_c()  # recorded, not raised here (a finalizer could have eaten it)
        with pytest.raises(KeyboardInterrupt):
            raise_if_interrupted()
        raise_if_interrupted()  # raised once, then forgotten
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_ctrl_c_after_the_loops_last_look_is_raised_when_the_job_returns() -> None:
    with pytest.raises(KeyboardInterrupt), deferred_interrupts():
        _press_ctrl_c()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_second_ctrl_c_is_raised_at_once() -> None:
    with pytest.raises(KeyboardInterrupt), deferred_interrupts():
        _press_ctrl_c()
        _press_ctrl_c()
        raise AssertionError("the second Ctrl-C should have been raised by now")
    raise_if_interrupted()  # nothing left over for the next job


def test_a_handler_the_user_installed_is_left_alone() -> None:
    pressed: list[int] = []
    before = signal.signal(signal.SIGINT, lambda signum, frame: pressed.append(signum))
    try:
        with deferred_interrupts():
            _press_ctrl_c()
            raise_if_interrupted()  # nothing recorded: the user's handler had it
        assert pressed == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, before)
