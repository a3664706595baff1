"""A spill file damaged between being written and being read: a flipped byte, a file cut
short, a file deleted.  The reader raises ``PartitionCorruptedError``, the partition
counts as lost, its producer runs again, and the job returns exactly its input, with a
restart recorded; a file damaged in every attempt fails the job, naming the file.

In blocking and hybrid-full, with partitions in the executors and in the external
store.  The memory budget is one buffer, so partitions spill.  The damage is gated on
phases, never on a timer: every consumer holds at its first batch, and the test damages
producer 0's spill file once the only tasks still running are the held consumers (so
the producers finished and the file is complete), then lets them read on.  A held
consumer has read at most two polls of buffers (``credits``) of each producer; the
damage is in the file's second half, which it has not read yet.  In hybrid-full each
buffer also stays in memory until read, while the budget holds it, and is read from
there: so the flip is one byte in every buffer of that half, of which at most a couple
fit the budget; the cut and the deletion take that half whole anyway.
"""

from __future__ import annotations

import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import hybrid_shuffle as hs

from .conftest import assert_closed_cleanly, assert_no_leaks, spill_files
from .data import orders

MODES = ["blocking", "hybrid-full"]
SERVICES = ["executor-local", "external"]
ROWS = 30_000
EDGE = "by_customer"
MAX_ATTEMPTS = 3
PHASE_TIMEOUT = 60.0
#: producer 0's partition files on the edge: ``<job id>_by_customer_0.<attempt>.arrows``
PRODUCER_0 = re.compile(rf"_{EDGE}_0\.(\d+)\.arrows$")


def config(service: str) -> dict[str, object]:
    return {
        "parallelism": 2,
        "shuffle": {
            "service": service,
            "buffer_size": "16 KiB",
            "memory_budget": "16 KiB",  # one buffer: the partitions spill
            "credits": 2,
            "wait_timeout": 30,
        },
        "failover": {"max_attempts": MAX_ATTEMPTS, "backoff": "50 ms"},
    }


@pytest.fixture(scope="module", params=SERVICES)
def session(request: pytest.FixtureRequest, local_ray: None) -> Iterator[hs.Session]:
    with hs.Session(config(request.param), slots=4) as s:
        yield s
    assert_closed_cleanly(s)


# -- the gate and the damage ----------------------------------------------------------


def hold(directory: Path) -> Callable[[pa.Table], pa.Table]:
    """A pass-through function: at a task's first batch, unless ``directory/done``
    exists, it writes a marker of its own into ``directory`` and waits (at most
    ``PHASE_TIMEOUT`` s) until the test removed it."""
    root = str(directory)
    calls = [0]

    def fn(table: pa.Table) -> pa.Table:
        calls[0] += 1
        if calls[0] == 1 and not os.path.exists(os.path.join(root, "done")):
            marker = os.path.join(root, f"held-{uuid.uuid4().hex}")
            open(marker, "w").close()
            deadline = time.monotonic() + PHASE_TIMEOUT
            while os.path.exists(marker) and time.monotonic() < deadline:
                time.sleep(0.01)
        return table

    return fn


def segments(path: str) -> list[tuple[int, int]]:
    """(offset, length) of every buffer of a complete spill file: one Arrow IPC stream
    each, one after the other."""
    data = Path(path).read_bytes()
    reader = pa.BufferReader(pa.py_buffer(data))
    out = []
    while reader.tell() < len(data):
        start = reader.tell()
        pa.ipc.open_stream(reader).read_all()
        out.append((start, reader.tell() - start))
    return out


def flip(path: str) -> None:
    """Invert one byte in the middle of every buffer of the file's second half."""
    found = segments(path)
    assert len(found) >= 8, f"{path} holds {len(found)} buffers: too few to damage unread ones"
    with open(path, "r+b") as f:
        for offset, length in found[len(found) // 2 :]:
            f.seek(offset + length // 2)
            byte = f.read(1)
            f.seek(offset + length // 2)
            f.write(bytes([byte[0] ^ 0xFF]))


def truncate(path: str) -> None:
    """Cut the file in the middle of a buffer, halfway through it."""
    found = segments(path)
    assert len(found) >= 8, f"{path} holds {len(found)} buffers: too few to damage unread ones"
    offset, length = found[len(found) // 2]
    os.truncate(path, offset + length // 2)


def delete(path: str) -> None:
    os.unlink(path)


DAMAGES: dict[str, Callable[[str], None]] = {
    "flipped": flip,
    "truncated": truncate,
    "deleted": delete,
}
#: what the error says of each damage
SAYS = {
    "flipped": "does not match the checksum",
    "truncated": "is truncated",
    "deleted": "was deleted",
}


class Damager(threading.Thread):
    """Per round: waits until consumers are held and nothing else runs, damages the
    newest spill file of producer 0 on the edge, and lets the consumers go.  After
    ``rounds`` rounds (None: until ``stop``) it lets every later gate pass."""

    def __init__(
        self, session: hs.Session, directory: Path, damage: str, rounds: int | None = 1
    ) -> None:
        super().__init__(daemon=True)
        self.session, self.directory, self.damage = session, directory, damage
        self.rounds = rounds
        self.damaged: list[str] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def held(self) -> list[Path]:
        return list(self.directory.glob("held-*"))

    def newest_file(self) -> str | None:
        files = [
            (int(m.group(1)), path)
            for path in spill_files(self.session)
            if (m := PRODUCER_0.search(path)) and path not in self.damaged
        ]
        return max(files)[1] if files else None

    def ready(self) -> str | None:
        """Producer 0's complete, undamaged spill file, once the only running tasks are
        held consumers."""
        held = len(self.held())
        if not held or sum(self.session.running_tasks().values()) != held:
            return None
        return self.newest_file()

    def run(self) -> None:
        try:
            done = 0
            while self.rounds is None or done < self.rounds:
                deadline = time.monotonic() + PHASE_TIMEOUT
                while (path := self.ready()) is None:
                    if self.stop.is_set():
                        return
                    if time.monotonic() > deadline:
                        raise AssertionError(
                            f"phase not reached within {PHASE_TIMEOUT:.0f} s: consumers held "
                            "after producer 0 finished its spill file"
                        )
                    time.sleep(0.05)
                DAMAGES[self.damage](path)
                self.damaged.append(path)
                done += 1
                if self.rounds is not None and done == self.rounds:
                    (self.directory / "done").touch()  # before the release: no more holds
                for marker in self.held():
                    marker.unlink()
        except BaseException as e:
            self.error = e
        finally:
            (self.directory / "done").touch()
            for marker in self.held():
                marker.unlink(missing_ok=True)


def pipeline(session: hs.Session, mode: str, directory: Path) -> hs.Stream:
    job = session.job(f"corruption-{mode}")
    stream = job.from_arrow(orders(ROWS), name="orders", parallelism=2)
    keyed = stream.key_by("customer", edge=EDGE, mode=mode, partitions=2)
    return keyed.map_batches(hold(directory), name="consume")


def assert_exact(result: hs.JobResult) -> None:
    """Every input row exactly once, every value as pyarrow holds it."""
    expected = orders(ROWS)
    table = result.table.sort_by("order_id")
    assert table.num_rows == expected.num_rows
    assert table.select(expected.column_names).equals(expected)


def attempts(result: hs.JobResult, vertex_prefix: str) -> list[int]:
    return sorted(r.attempt for r in result.tasks if r.vertex.startswith(vertex_prefix))


# -- the tests --------------------------------------------------------------------------


@pytest.mark.parametrize("damage", list(DAMAGES))
@pytest.mark.parametrize("mode", MODES)
def test_a_damaged_spill_file_is_recomputed_and_the_result_is_exact(
    session: hs.Session, mode: str, damage: str, tmp_path: Path
) -> None:
    damager = Damager(session, tmp_path, damage)
    damager.start()
    try:
        result = pipeline(session, mode, tmp_path).collect()
    finally:
        damager.stop.set()
        damager.join(PHASE_TIMEOUT)
    assert damager.error is None, damager.error
    assert len(damager.damaged) == 1
    assert_exact(result)
    assert result.restarts >= 1
    assert max(attempts(result, "orders")) >= 1  # the damaged partition was produced again
    assert max(attempts(result, "consume")) >= 1
    assert result.spilled_bytes > 0
    assert_no_leaks(session)


@pytest.mark.parametrize("damage", ["flipped", "deleted"])
def test_a_spill_file_damaged_in_every_attempt_fails_the_job_naming_the_file(
    session: hs.Session, damage: str, tmp_path: Path
) -> None:
    damager = Damager(session, tmp_path, damage, rounds=None)
    damager.start()
    try:
        with pytest.raises(hs.JobFailedError) as err:
            pipeline(session, "blocking", tmp_path).collect()
    finally:
        damager.stop.set()
        damager.join(PHASE_TIMEOUT)
    assert damager.error is None, damager.error
    assert len(damager.damaged) == MAX_ATTEMPTS  # producer 0's attempts 0, 1 and 2
    message = str(err.value)
    assert f"failed in attempts 0, 1, 2 (failover.max_attempts {MAX_ATTEMPTS})" in message
    assert "PartitionCorruptedError" in message and SAYS[damage] in message
    assert f"spill file '{damager.damaged[0]}'" in message  # the first one it met
    assert err.value.operator == "orders" and err.value.subtask == 0
    assert_no_leaks(session)
