"""The session's executor slots: their lifecycle and their allocation to one job.

``SlotPool`` owns the executor actors (one slot each): it creates them spread
over the cluster's nodes, checks they started, and releases them all on close.
``start`` returns as soon as the actors are created, so their processes start
while the session's caller goes on (builds a job, starts Spark): the first call
that needs them (``heal``, which every job and probe calls first, or ``info``)
waits for their answers, bounded, and an executor whose constructor failed is
one ``ExecutorLostError`` there, naming it and why.
It also watches them: each executor has one ``watch`` call open, whose ref fails
the moment Ray reports the actor dead (Ray's own death notification, no
heartbeat), so ``dead()`` answers without waiting and ``replace`` puts a new
executor in that slot, on a node that is alive, keeping the session's slot
count.  ``SlotAllocation`` is the per-job view the scheduler uses: which slots
are free, which run tasks of which region.

Placement rule: executor ``i`` goes to node ``i mod n`` of the alive nodes with
CPUs (sorted by id), with *hard* node affinity, so the spread holds whatever
else the cluster runs (soft affinity let Ray put every executor on one node).
Executors take no CPU of their own (slots are a logical count, as in Flink),
so hard affinity never waits for resources.

Ray calls go through the injected backend (``RayTransport`` in a session), so
allocation and placement are tested without a cluster.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from hybrid_shuffle._words import plural
from hybrid_shuffle.errors import ExecutorLostError, WaitTimeoutError
from hybrid_shuffle.shuffle.api import ShuffleEnvironmentContext

__all__ = [
    "ExecutorBackend",
    "ExecutorPool",
    "ExecutorSpec",
    "SlotAllocation",
    "SlotPool",
    "placement",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExecutorSpec:
    """What an executor actor is created from (the same for its replacement)."""

    #: ``shuffle.service``: the environment the executor creates
    service: str
    context: ShuffleEnvironmentContext
    #: ``ray.runtime_env`` where the session joined a Ray started before it (whose job's
    #: environment it cannot set): the executor's own; None otherwise
    runtime_env: Mapping[str, Any] | None = None


class ExecutorBackend(Protocol):
    """The cluster calls the pool makes (``RayTransport`` implements them)."""

    def worker_nodes(self) -> list[str]: ...

    def create_executor(self, spec: ExecutorSpec, name: str, node_id: str) -> Any: ...

    def call_all(
        self, executors: Sequence[Any], method: str, timeout: float, *args: Any
    ) -> list[Any]: ...

    def ask_all(self, executors: Sequence[Any], method: str, timeout: float) -> None: ...

    def kill(self, executor: Any) -> None: ...

    def watch(self, executor: Any) -> Any:
        """A ref that resolves only when ``executor`` closes or dies."""

    def resolved(self, refs: Sequence[Any]) -> list[int]:
        """The positions of ``refs`` that resolved already (never waits)."""

    def request(self, executor: Any, method: str) -> Any:
        """Call ``method()`` on ``executor`` without waiting; returns the answer's ref."""

    def answers(self, refs: Sequence[Any], timeout: float) -> list[Any]:
        """Each ref's value, waiting at most ``timeout`` for them all (else
        ``WaitTimeoutError``); None for an actor that died (killed, its node lost);
        ``ExecutorLostError`` for one whose constructor raised (a replacement would too)."""


class ExecutorPool(Protocol):
    """What a scheduler needs of the slots' executors (``SlotPool``; faked in tests)."""

    #: executor index -> its current actor handle (a replacement takes the same index)
    executors: list[Any]
    #: executor index -> the node it runs on
    nodes: list[str]

    def watches(self) -> list[Any]: ...

    def dead(self) -> list[int]: ...

    def starting(self) -> set[int]: ...

    def replace(self, index: int) -> Any: ...

    def heal(self) -> list[int]: ...


def placement(count: int, nodes: Sequence[str]) -> list[str]:
    """The node of each of ``count`` executors: round-robin over ``nodes``."""
    if not nodes:
        raise ExecutorLostError("the Ray cluster has no alive node to place executors on")
    return [nodes[i % len(nodes)] for i in range(count)]


class SlotPool:
    def __init__(
        self,
        backend: ExecutorBackend,
        session_id: str,
        count: int,
        spec_of: Callable[[int], ExecutorSpec],
        start_timeout: float,
    ) -> None:
        self._backend = backend
        self._session_id = session_id
        self._spec_of = spec_of
        self._start_timeout = start_timeout
        self.size = count
        self.executors: list[Any] = []
        #: executor index -> node id it was placed on
        self.nodes: list[str] = []
        #: executor index -> {"node_id", "pid"} as it reported at start (``info``)
        self._info: list[dict[str, Any]] = []
        #: executor index -> its open ``watch`` call
        self._watches: list[Any] = []
        #: the first executors' pending ``ready`` refs, until ``wait_started`` took them
        self._launch: list[Any] = []
        #: replacements not known to have started: index -> their pending ``ready`` ref
        self._starting: dict[int, Any] = {}
        #: replacements that started but whose ``info`` is not fetched yet
        self._stale: set[int] = set()
        #: nodes where a new executor died before it answered: gone, or going (Ray
        #: declares a lost node dead only after its health checks fail; node ids are
        #: never reused, so they are avoided for good)
        self._suspect: set[str] = set()
        #: held across a whole replacement (kill, create, swap) and a whole ``heal``: the
        #: scheduler's thread and a caller's (a probe such as ``running_tasks`` from
        #: another thread) may see the same death, and one death gets one replacement
        self._lock = threading.RLock()
        #: executors created so far (a replacement gets a new actor name)
        self._created = 0
        #: how many executors were replaced in this session
        self.replaced = 0

    def start(self) -> None:
        """Create every executor and return without waiting for them (``wait_started``)."""
        self.nodes = placement(self.size, self._backend.worker_nodes())
        self.executors = [self._create(i, self.nodes[i]) for i in range(self.size)]
        self._watches = [self._backend.watch(e) for e in self.executors]
        self._launch = [self._backend.request(e, "ready") for e in self.executors]
        self._info = [{} for _ in self.executors]
        log.info("starting %s", self._spread())

    def wait_started(self) -> None:
        """Wait until the executors ``start`` created answered (at most the start
        timeout; at once after the first call).

        Not in ``start``: an executor takes a second or more to start (a Python
        process importing the engine), which the caller spends better on its own
        work.  One that died before it answered for another reason than its
        constructor (killed, its node lost) is left to ``dead``/``heal``, as a death
        after the start is."""
        with self._lock:
            launch = self._launch
            if not launch:
                return
            try:
                answers = self._backend.answers(launch, self._start_timeout)
            except WaitTimeoutError as e:
                raise WaitTimeoutError(
                    f"the {self.size} executor actors did not start within "
                    f"{self._start_timeout:.0f} s; the Ray cluster is out of resources, so "
                    "lower slots"
                ) from e
            for index, answer in enumerate(answers):
                if answer is None:  # died: ``dead`` reports it, ``info`` asks its successor
                    self._stale.add(index)
                else:
                    self._info[index] = answer
            self._launch = []
        log.info("started %s", self._spread())

    def _spread(self) -> str:
        """``4 executor slots on 2 nodes``, for the log."""
        slots, nodes = self.size, len(set(self.nodes))
        return f"{slots} executor {plural(slots, 'slot')} on {nodes} {plural(nodes, 'node')}"

    def _create(self, index: int, node: str) -> Any:
        suffix = "" if self._created < self.size else f".{self._created}"
        self._created += 1
        name = f"{self._session_id}-executor-{index}{suffix}"
        return self._backend.create_executor(self._spec_of(index), name, node)

    def watches(self) -> list[Any]:
        """The open watch refs: a scheduler waits on them with its tasks, so that an
        executor's death wakes it at once."""
        return list(self._watches)

    def dead(self) -> list[int]:
        """The executors Ray reported dead since they started (never waits).  A
        replacement that died before it answered marks its node suspect."""
        dead = self._backend.resolved(self._watches) if self._watches else []
        with self._lock:
            for index in dead:
                if self._starting.pop(index, None) is not None:
                    self._suspect.add(self.nodes[index])
        return dead

    def starting(self) -> set[int]:
        """The replacements still starting (never waits): a scheduler places tasks on
        the other slots first."""
        with self._lock:
            pending = list(self._starting.items())
            if not pending:
                return set()
            for position in self._backend.resolved([ref for _, ref in pending]):
                index = pending[position][0]
                del self._starting[index]
                self._stale.add(index)
            return set(self._starting)

    @property
    def info(self) -> list[dict[str, Any]]:
        """Per executor, ``{"node_id", "pid"}``; waits (bounded) for replacements still
        starting."""
        self.wait_started()
        with self._lock:
            stale = sorted(self._stale | set(self._starting))
            if stale:
                answers = self._backend.call_all(
                    [self.executors[i] for i in stale], "ready", self._start_timeout
                )
                for index, answer in zip(stale, answers, strict=True):
                    self._info[index] = answer
                self._stale.clear()
                self._starting.clear()
            return list(self._info)

    def replace(self, index: int) -> Any:
        """A new executor in slot ``index`` (the old one is killed if still there), on a
        node that is alive now; returns at once.

        Its old node is kept if it is still alive (a killed process), else the alive
        node with the fewest executors; suspect nodes are avoided.  Nobody waits for
        it to start: calls queue at the actor until it runs (a scheduler replaces off
        its critical path), ``info`` waits for it, and one that dies while starting is
        reported by ``dead()`` like any other, its node then suspect.
        """
        with self._lock:
            self._backend.kill(self.executors[index])
            self.replaced += 1
            node = self._node_for(index)
            executor = self._create(index, node)
            self.executors[index], self.nodes[index] = executor, node
            if self._watches:
                self._watches[index] = self._backend.watch(executor)
            self._stale.discard(index)
            self._starting[index] = self._backend.request(executor, "ready")
        log.info("replacing executor %d on node %s", index, node)
        return executor

    def _node_for(self, index: int) -> str:
        """The old node if alive, else the alive node with the fewest executors."""
        nodes = [n for n in self._backend.worker_nodes() if n not in self._suspect]
        if not nodes:
            raise ExecutorLostError(
                f"executor {index} died and no alive node of the Ray cluster can take its "
                "place; add nodes or lower slots"
            )
        if self.nodes[index] in nodes:
            return self.nodes[index]
        return min(nodes, key=lambda n: (self.nodes.count(n), n))

    def heal(self) -> list[int]:
        """Replace every executor that died, without waiting for the replacements to
        start; returns their indexes.  The first call waits for the first executors
        (``wait_started``): a job or probe needs them."""
        with self._lock:
            self.wait_started()
            dead = self.dead()
            for index in dead:
                self.replace(index)
            return dead

    def close(self, timeout: float) -> None:
        """Close every executor's environment (bounded), then kill the actors.  One of the
        first executors still starting is killed without asking: a ``close`` call would
        wait for its start, and it holds nothing yet."""
        with self._lock:
            started = self.executors
            if self._launch:
                up = set(self._backend.resolved(self._launch))
                started = [e for i, e in enumerate(self.executors) if i in up]
            try:
                self._backend.ask_all(started, "close", timeout)
            finally:
                for executor in self.executors:
                    self._backend.kill(executor)
                self.executors = []
                self._watches = []
                self._launch = []


class SlotAllocation:
    """Which slots a running job uses: a region takes whole slots, and a slot is free
    again when the last task of that region on it finished (slot sharing inside a
    region, as Flink's default group)."""

    def __init__(self, size: int) -> None:
        self._free = list(range(size))
        #: executor -> tasks running there; the slot frees at zero
        self._running: dict[int, int] = {}

    @property
    def free(self) -> int:
        return len(self._free)

    def is_free(self, executor: int) -> bool:
        return executor in self._free

    def candidates(self, later: Collection[int] = (), required: Collection[int] = ()) -> list[int]:
        """Every free slot, in the order ``acquire`` takes them: the ``required`` ones,
        then the longest free first, the ``later`` ones (executors still starting) last."""
        rest = [i for i in self._free if i not in required]
        return (
            [i for i in self._free if i in required]
            + [i for i in rest if i not in later]
            + [i for i in rest if i in later]
        )

    def acquire(
        self, count: int, later: Collection[int] = (), required: Collection[int] = ()
    ) -> list[int]:
        """The first ``count`` of ``candidates``, taken; the caller checked ``free``
        (and that the ``required`` ones are free)."""
        if count > len(self._free):
            raise ValueError(f"{count} {plural(count, 'slot')} asked, {len(self._free)} free")
        taken = self.candidates(later, required)[:count]
        self.take(taken)
        return taken

    def take(self, executors: Collection[int]) -> None:
        """Take these free slots (a placement chose them among ``candidates``)."""
        missing = [i for i in executors if i not in self._free]
        if missing:
            raise ValueError(f"slots {missing} are not free")
        self._free = [i for i in self._free if i not in executors]

    def task_started(self, executor: int) -> None:
        self._running[executor] = self._running.get(executor, 0) + 1

    def task_finished(self, executor: int) -> None:
        self._running[executor] -= 1
        if self._running[executor] == 0:
            del self._running[executor]
            self._free.append(executor)

    def busy(self) -> dict[int, int]:
        return dict(self._running)
