"""The external store's pure parts, without a cluster: the partition holder both services
share, the order in which a store applies a producer's adds, the stores' names, and how
an executor answers a poll of a partition it does not hold."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from hybrid_shuffle.actors.partition_store import _Writes, store_directory
from hybrid_shuffle.errors import WaitTimeoutError
from hybrid_shuffle.shuffle.api import (
    PartitionDescriptor,
    PartitionId,
    PollErrorKind,
    PollRequest,
    ShuffleEnvironmentContext,
)
from hybrid_shuffle.shuffle.external.service import ExternalShuffleEnvironment, store_name
from hybrid_shuffle.shuffle.local.partition_holder import (
    _REMEMBERED_RELEASES,
    PartitionHolder,
    RecentReleases,
)
from hybrid_shuffle.shuffle.partition_type import partition_type
from hybrid_shuffle.shuffle.routing import Partitioner, PartitionerKind

BATCH = pa.table({"k": list(range(1000)), "v": [1.0] * 1000})
PID = PartitionId("job/e/0")


def context(tmp_path: Path, budget: int = 10 * BATCH.nbytes) -> ShuffleEnvironmentContext:
    return ShuffleEnvironmentContext(
        executor_index=-1,
        session_id="s0",
        buffer_size=BATCH.nbytes,
        credits=2,
        wait_timeout=5.0,
        memory_budget=budget,
        spill_dir=str(tmp_path / "session"),
    )


def descriptor(mode: str = "blocking", pid: PartitionId = PID) -> PartitionDescriptor:
    return PartitionDescriptor(
        pid, "job", "e", 0, 1, 1, partition_type(mode), Partitioner(PartitionerKind.HASH, ("k",))
    )


def holder(tmp_path: Path, budget: int = 10 * BATCH.nbytes) -> PartitionHolder:
    ctx = context(tmp_path, budget)
    return PartitionHolder(ctx, store_directory(ctx.spill_dir, "abcdef0123456789"), lambda t: t)


def request(pid: PartitionId = PID, cursor: int = 0) -> PollRequest:
    return PollRequest(pid, 0, 0, cursor, 10, 0.01)


def test_a_poll_before_the_partition_exists_says_nothing_yet(tmp_path: Path) -> None:
    response = holder(tmp_path).poll(request(cursor=3))
    assert response.error is None
    assert response.buffers == [] and response.next_cursor == 3
    assert not response.end_of_partition


def test_a_held_partition_is_polled_and_a_released_one_is_not_found(tmp_path: Path) -> None:
    h = holder(tmp_path)
    partition = h.create(descriptor(), threading.Event())
    partition.add(0, BATCH)
    partition.finish(BATCH.schema)
    assert h.held() == {PID}
    response = h.poll(request())
    assert [b.ref.table for b in response.buffers] == [BATCH] and response.end_of_partition
    h.release([PID])
    assert h.held() == set() and h.get(PID) is None and h.was_released(PID)
    gone = h.poll(request())
    assert gone.error_kind is PollErrorKind.NOT_FOUND
    assert gone.error == f"partition {PID} was already released"


def test_spill_files_live_in_the_holders_directory_and_close_removes_it(tmp_path: Path) -> None:
    h = holder(tmp_path, budget=1)  # nothing fits: every buffer spills
    partition = h.create(descriptor("hybrid-selective"), threading.Event())
    partition.add(0, BATCH)
    assert partition.metrics.spilled_bytes == BATCH.nbytes
    assert h.directory == str(tmp_path / "session" / "store-abcdef01")
    assert os.listdir(h.directory) == ["job_e_0.arrows"]
    h.close()
    assert not os.path.exists(h.directory)
    assert not os.path.exists(tmp_path / "session")  # empty: removed too
    assert h.held() == set()


def test_recent_releases_forget_the_oldest_beyond_their_bound() -> None:
    released = RecentReleases()
    released.add([PartitionId(f"j/e/{i}") for i in range(_REMEMBERED_RELEASES + 1)])
    assert PartitionId("j/e/0") not in released
    assert PartitionId("j/e/1") in released
    assert PartitionId(f"j/e/{_REMEMBERED_RELEASES}") in released


def test_a_stores_adds_apply_in_the_order_the_producer_sent_them(tmp_path: Path) -> None:
    writes = _Writes(holder(tmp_path).create(descriptor(), threading.Event()), threading.Event())
    applied: list[int] = []

    def add(seq: int) -> None:
        writes.await_turn(seq, 5.0)
        applied.append(seq)
        writes.applied()

    threads = [threading.Thread(target=add, args=(seq,)) for seq in (3, 1, 2, 0)]
    for t in threads:  # started last-first, as a threaded actor may run them
        t.start()
        time.sleep(0.01)
    for t in threads:
        t.join(5)
    assert applied == [0, 1, 2, 3]


def test_an_add_whose_predecessor_never_comes_times_out_naming_the_edge(tmp_path: Path) -> None:
    writes = _Writes(holder(tmp_path).create(descriptor(), threading.Event()), threading.Event())
    with pytest.raises(WaitTimeoutError, match=r"edge 'e': buffer 1 of producer subtask 0"):
        writes.await_turn(1, 0.05)


def test_stopping_a_partitions_writes_ends_a_wait_for_turn_at_once(tmp_path: Path) -> None:
    writes = _Writes(holder(tmp_path).create(descriptor(), threading.Event()), threading.Event())
    ended = threading.Event()

    def wait() -> None:
        writes.await_turn(5, 30.0)
        ended.set()

    threading.Thread(target=wait, daemon=True).start()
    writes.stop()
    assert ended.wait(5)


def test_store_names_start_with_the_session_and_name_replacements_apart() -> None:
    node = "059c2fe3aa0011223344"
    assert store_name("s1", node) == "s1-store-059c2fe3"
    assert store_name("s1", node, 2) == "s1-store-059c2fe3-2"


def test_an_executor_answers_polls_of_partitions_it_does_not_hold(tmp_path: Path) -> None:
    """Only polls of another service's partitions can reach it (see its ``poll_many``):
    "nothing yet" before the producer created the partition, NOT_FOUND once released."""
    env = ExternalShuffleEnvironment(context(tmp_path))
    [early] = env.poll_many([request(cursor=2)], 0.01)
    assert early.error is None and early.next_cursor == 2
    env.release_partitions_locally([PID])
    [late] = env.poll_many([request()], 0.01)
    assert late.error_kind is PollErrorKind.NOT_FOUND
    assert env.partitions_occupying_local_resources() == set()
