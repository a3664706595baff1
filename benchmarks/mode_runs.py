"""Issue 36: what the mode benchmarks share: a session's config with other exchange
modes, the CPU a run took (this process tree's and the machine's), and what each edge
of a finished job ran as.

``benchmarks.hybrid_spill`` and ``benchmarks.tpch_modes`` run one job in two modes in
the same session, alternating; the modes are swapped through ``session.config`` (the
planner reads it when a job is planned; the executors' memory budget, set when the
session started, stays the same), as ``tests/spark/oracle.py``'s ``configured`` does.

The machine is shared: ``/proc/stat``'s busy share counts every process on it, so it
says little about a run of ours while others run.  ``TreeCpu`` counts only this
process and its descendants (an embedded Ray's raylet, its workers: the executors, and
a Spark backend's JVM), which is what the run itself spent.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import hybrid_shuffle as hs
from hybrid_shuffle.config import Config

__all__ = ["CpuSample", "edge_facts", "modes_config", "non_blocking_edges", "with_modes"]

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def modes_config(config: Config, default_mode: str, batch_mode: str) -> Config:
    """``config`` with ``shuffle.default_mode`` and ``shuffle.batch_mode`` replaced."""
    shuffle = dataclasses.replace(config.shuffle, default_mode=default_mode, batch_mode=batch_mode)
    return dataclasses.replace(config, shuffle=shuffle)


@contextmanager
def with_modes(session: hs.Session, default_mode: str, batch_mode: str) -> Iterator[None]:
    """The session planning its jobs with these two modes, for the block."""
    before = session.config
    session.config = modes_config(before, default_mode, batch_mode)
    try:
        yield
    finally:
        session.config = before


def edge_facts(result: Any) -> dict[str, dict[str, Any]]:
    """Per edge of a finished job: the mode it ran as and where that came from, what it
    moved, spilled and held, and whether a consumer read a producer that was still
    running (the overlap hybrid modes are for)."""
    return {
        name: {
            "mode": e.mode,
            "mode_origin": e.mode_origin,
            "partitioner": e.partitioner,
            "rows": e.rows,
            "bytes": e.bytes,
            "spilled_bytes": e.spilled_bytes,
            "peak_memory_bytes": e.peak_memory_bytes,
            "consumed_before_produced": e.consumed_before_produced(),
        }
        for name, e in result.edges.items()
    }


def non_blocking_edges(result: Any) -> int:
    """How many of the job's edges ran in a mode other than ``blocking``."""
    return sum(1 for e in result.edges.values() if e.mode != "blocking")


def _proc_cpu_ticks(pids: set[int]) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return total


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def _machine() -> tuple[int, int] | None:
    try:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return sum(ticks) - idle, sum(ticks)


@dataclasses.dataclass
class CpuSample:
    """CPU seconds between ``start()`` and ``stop()``: this process tree's (``own``) and
    the machine's busy share (``machine_busy``, every process); None off Linux."""

    own: float | None = None
    machine_busy: float | None = None
    _own0: int | None = None
    _pids: set[int] = dataclasses.field(default_factory=set)
    _machine0: tuple[int, int] | None = None

    def start(self) -> CpuSample:
        if not os.path.isdir("/proc"):
            return self
        self._pids = _descendants(os.getpid())
        self._own0 = _proc_cpu_ticks(self._pids)
        self._machine0 = _machine()
        return self

    def stop(self) -> CpuSample:
        if self._own0 is None:
            return self
        # processes started during the run (none in a warm session) are left out of both
        self.own = (_proc_cpu_ticks(self._pids) - self._own0) / _TICK
        end = _machine()
        if self._machine0 is not None and end is not None and end[1] > self._machine0[1]:
            self.machine_busy = (end[0] - self._machine0[0]) / (end[1] - self._machine0[1])
        return self
