"""``runtime.process_cpu``: the process's CPU shared out among the tasks running."""

from __future__ import annotations

import threading
import time

import pytest

from hybrid_shuffle.runtime import process_cpu
from hybrid_shuffle.runtime.process_cpu import CpuLedger


def spin(seconds: float) -> None:
    """Burn ``seconds`` of this thread's CPU."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_a_task_alone_gets_the_process_cpu_its_helper_threads_spent() -> None:
    ledger = CpuLedger()
    share = ledger.enter()
    spin(0.02)
    helper = threading.Thread(target=spin, args=(0.05,))  # like a DuckDB or reader thread
    helper.start()
    helper.join()
    seconds = ledger.leave(share)
    assert seconds >= 0.07  # its own thread's and the helper's


def test_tasks_running_together_share_exactly_what_the_process_spent() -> None:
    ledger = CpuLedger()
    began = time.process_time()
    shares: list[float] = []
    ready = threading.Barrier(2)

    def task(burn: float) -> None:
        share = ledger.enter()
        ready.wait()
        spin(burn)
        shares.append(ledger.leave(share))

    threads = [threading.Thread(target=task, args=(b,)) for b in (0.03, 0.06)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    spent = time.process_time() - began
    assert len(shares) == 2 and min(shares) >= 0.03
    assert sum(shares) <= spent + 1e-6  # nothing counted twice


def test_without_thread_clocks_the_rest_is_shared_evenly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(process_cpu, "_thread_clock", lambda: None)
    ledger = CpuLedger()
    began = time.process_time()
    first, second = ledger.enter(), ledger.enter()
    spin(0.02)
    a = ledger.leave(first)
    b = ledger.leave(second)
    spent = time.process_time() - began
    # the 0.02 s spun while both ran is halved; the first alone also gets the instant
    # before the second entered, the second the instant after the first left (whatever
    # the process's other threads spent in them: either may be the larger)
    assert a >= 0.009 and b >= 0.009 and abs(b - a) < 0.005
    assert a + b <= spent + 1e-6
