"""Credits, spilling and release of one result partition, with plain objects for refs."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

from hybrid_shuffle.errors import PartitionNotFoundError, WaitTimeoutError
from hybrid_shuffle.shuffle.api import PartitionDescriptor, PartitionId, PollErrorKind, PollRequest
from hybrid_shuffle.shuffle.memory_budget import MemoryBudget
from hybrid_shuffle.shuffle.partition_type import partition_type
from hybrid_shuffle.shuffle.result_partition import (
    _INLINE_TOTAL,
    INLINE_BYTES,
    PartitionState,
    ResultPartition,
)
from hybrid_shuffle.shuffle.routing import Partitioner, PartitionerKind

BATCH = pa.table({"k": list(range(1000)), "v": [1.0] * 1000})


def make(
    mode: str, tmp_path, budget: int = 10 * BATCH.nbytes, credits: int = 2, timeout: float = 5.0
) -> tuple[ResultPartition, MemoryBudget]:
    descriptor = PartitionDescriptor(
        PartitionId("job/e/0"),
        "job",
        "e",
        0,
        1,
        1,
        partition_type(mode),
        Partitioner(PartitionerKind.HASH, ("k",)),
    )
    memory = MemoryBudget(budget)
    put = lambda t: t  # noqa: E731 - a table stands in for its ObjectRef
    partition = ResultPartition(
        descriptor,
        memory,
        str(tmp_path / "spill.arrows"),
        put,
        credits,
        timeout,
        threading.Event(),
    )
    return partition, memory


def poll(partition: ResultPartition, cursor: int, max_buffers: int = 10):
    return partition.poll(PollRequest(PartitionId("job/e/0"), 0, 0, cursor, max_buffers, 0.01))


def test_pipelined_producer_waits_at_its_credit_bound_until_the_consumer_acks(tmp_path) -> None:
    partition, _ = make("pipelined", tmp_path, credits=2)
    written = []

    def produce() -> None:
        for _ in range(5):
            partition.add(0, BATCH)
            written.append(1)

    def blocked_after(count: int) -> None:
        deadline = time.monotonic() + 5
        while not (partition.waiting_for_credit and len(written) == count):
            assert time.monotonic() < deadline, f"producer never blocked after {count} buffers"
            time.sleep(0.001)

    producer = threading.Thread(target=produce)
    producer.start()
    blocked_after(2)  # stopped at the bound
    response = poll(partition, cursor=0)
    assert len(response.buffers) == 2
    poll(partition, cursor=response.next_cursor)  # acknowledge: two credits back
    blocked_after(4)
    poll(partition, cursor=4)
    producer.join(5)
    assert len(written) == 5
    assert partition.metrics.peak_backlog_buffers == 2
    assert partition.metrics.spilled_bytes == 0


def test_pipelined_producer_facing_a_stalled_consumer_times_out_naming_the_edge(tmp_path) -> None:
    partition, _ = make("pipelined", tmp_path, credits=1, timeout=0.5)
    partition.add(0, BATCH)
    with pytest.raises(WaitTimeoutError, match="edge 'e': producer subtask 0 waited"):
        partition.add(0, BATCH)


def test_hybrid_producer_never_waits_and_spills_past_the_budget(tmp_path) -> None:
    partition, memory = make("hybrid-selective", tmp_path, budget=2 * BATCH.nbytes)
    for _ in range(6):
        partition.add(0, BATCH)  # no consumer at all
    assert partition.metrics.spilled_bytes == 4 * BATCH.nbytes
    assert memory.used == 2 * BATCH.nbytes
    response = poll(partition, cursor=0)
    assert [b.seq for b in response.buffers] == list(range(6))
    assert all(b.ref.table.equals(BATCH) for b in response.buffers)


def test_selective_buffers_are_gone_once_consumed_and_cannot_be_read_twice(tmp_path) -> None:
    partition, memory = make("hybrid-selective", tmp_path)
    partition.add(0, BATCH)
    partition.finish()
    first = poll(partition, cursor=0)
    assert first.end_of_partition
    poll(partition, cursor=first.next_cursor)
    assert memory.used == 0
    assert poll(partition, cursor=0).error_kind is PollErrorKind.NOT_FOUND


@pytest.mark.parametrize("mode", ["blocking", "hybrid-full"])
def test_reconsumable_partitions_can_be_read_again_after_consumption(tmp_path, mode) -> None:
    partition, memory = make(mode, tmp_path)
    partition.add(0, BATCH)
    partition.add(0, BATCH)
    partition.finish()
    poll(partition, cursor=2)  # everything acknowledged
    again = poll(partition, cursor=0)
    assert again.error is None and len(again.buffers) == 2
    partition.release()
    assert memory.used == 0


def test_hybrid_full_persists_every_buffer_and_frees_memory_after_consumption(tmp_path) -> None:
    partition, memory = make("hybrid-full", tmp_path)
    partition.add(0, BATCH)
    partition.finish()
    assert partition.metrics.persisted_bytes == BATCH.nbytes
    poll(partition, cursor=1)
    assert memory.used == 0
    assert poll(partition, cursor=0).buffers[0].ref.table.equals(BATCH)  # read back from disk


def test_release_deletes_the_spill_file_and_reports_gone_to_late_readers(tmp_path) -> None:
    partition, memory = make("blocking", tmp_path, budget=BATCH.nbytes)
    partition.add(0, BATCH)
    partition.add(0, BATCH)  # spilled
    assert (tmp_path / "spill.arrows").exists()
    partition.release()
    assert not (tmp_path / "spill.arrows").exists()
    assert memory.used == 0
    assert poll(partition, cursor=0).error_kind is PollErrorKind.NOT_FOUND


def test_failed_producer_is_reported_to_its_consumers(tmp_path) -> None:
    partition, _ = make("hybrid-selective", tmp_path)
    partition.fail("producer task 'x[0]' failed: ValueError: boom")
    response = poll(partition, cursor=0)
    assert response.error_kind is PollErrorKind.PRODUCER_FAILED
    assert "boom" in (response.error or "")


def test_add_after_release_is_an_error_that_leaks_no_spill_file(tmp_path) -> None:
    partition, memory = make("hybrid-selective", tmp_path, budget=BATCH.nbytes)
    partition.add(0, BATCH)
    partition.add(0, BATCH)  # over the budget: spilled
    partition.release()
    for _ in range(2):  # the second one would go to disk
        with pytest.raises(PartitionNotFoundError, match="released"):
            partition.add(0, BATCH)
    assert not (tmp_path / "spill.arrows").exists()
    assert memory.used == 0
    assert partition.state is PartitionState.RELEASED


def test_partition_state_moves_from_writing_to_finished_to_released(tmp_path) -> None:
    partition, _ = make("blocking", tmp_path)
    assert partition.state is PartitionState.WRITING
    partition.add(0, BATCH)
    partition.finish()
    assert partition.state is PartitionState.FINISHED
    with pytest.raises(PartitionNotFoundError, match="finished"):
        partition.add(0, BATCH)
    partition.release()
    assert partition.state is PartitionState.RELEASED


def test_small_buffers_go_inline_up_to_the_partitions_total_and_large_ones_are_put(
    tmp_path,
) -> None:
    descriptor = PartitionDescriptor(
        PartitionId("job/e/0"),
        "job",
        "e",
        0,
        1,
        1,
        partition_type("blocking"),
        Partitioner(PartitionerKind.HASH, ("k",)),
    )
    put: list[tuple[str, pa.Table]] = []  # what was put, as (marker, table)

    def record(table: pa.Table) -> tuple[str, pa.Table]:
        put.append(("ref", table))
        return put[-1]

    partition = ResultPartition(
        descriptor,
        MemoryBudget(1 << 30),
        str(tmp_path / "spill.arrows"),
        record,
        2,
        5.0,
        threading.Event(),
    )
    small = pa.table({"k": list(range(100))})  # 800 bytes
    large = pa.table({"k": list(range(INLINE_BYTES))})  # 8 bytes a row: past the threshold
    partition.add(0, small)
    partition.add(0, large)
    for _ in range(_INLINE_TOTAL // small.nbytes + 1):  # past the partition's inline total
        partition.add(0, small)
    partition.finish(small.schema)
    handed = partition.finished_buffers()
    assert handed is not None
    buffers = handed.buffers[0]
    assert buffers[0].inline and buffers[0].ref.table.equals(small)  # by value
    assert not buffers[1].inline and buffers[1].ref == ("ref", large)
    inline = sum(b.nbytes for b in buffers if b.inline)
    assert inline <= _INLINE_TOTAL and not buffers[-1].inline  # the last small ones were put
    assert partition.metrics.bytes == sum(b.nbytes for b in buffers)  # all counted alike


def test_an_inline_buffer_cut_from_a_larger_batch_keeps_only_its_own_rows(tmp_path) -> None:
    partition, _ = make("blocking", tmp_path)
    batch = pa.table({"k": list(range(100_000)), "s": [str(i) for i in range(100_000)]})
    piece = batch.slice(500, 100)  # how the writer's buffers arrive: slices of one take
    partition.add(0, piece)
    partition.finish(batch.schema)
    handed = partition.finished_buffers()
    assert handed is not None
    kept = handed.buffers[0][0]
    assert kept.inline and kept.ref.table.equals(piece)
    # the 100 rows' bytes, not the 100,000-row batch they were cut from
    assert kept.ref.ipc_bytes < 4 * piece.nbytes + 4096
