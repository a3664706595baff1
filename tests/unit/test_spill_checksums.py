"""Spill files read back what was written, or say which partition and file went bad: a
flipped byte (checksum), a truncated file, a deleted one; and what ``shuffle.checksums:
false`` leaves out.  Then the way up: a partition answers the poll ``CORRUPTED``, the
gate raises ``PartitionCorruptedError`` naming the partition, the scheduler recomputes
its producer and counts it there.  No Ray."""

from __future__ import annotations

import os
import pickle
import threading
from pathlib import Path

import pyarrow as pa
import pytest

import hybrid_shuffle as hs
from hybrid_shuffle.config import FailoverConfig, load_config
from hybrid_shuffle.errors import ConfigError, JobFailedError, PartitionCorruptedError
from hybrid_shuffle.plan.planner import LogicalNode, plan_job
from hybrid_shuffle.runtime.failover import FailureKind, classify
from hybrid_shuffle.runtime.failures import describe_failure
from hybrid_shuffle.runtime.partition_tracker import PartitionTracker, TrackedState
from hybrid_shuffle.runtime.scheduler import Scheduler
from hybrid_shuffle.runtime.task import TaskState
from hybrid_shuffle.shuffle import spill_file
from hybrid_shuffle.shuffle.api import (
    ConsumerDescriptor,
    InputGateDescriptor,
    PartitionDescriptor,
    PartitionId,
    PollErrorKind,
    PollRequest,
    PollResponse,
    ProducerDescriptor,
    ShuffleDescriptor,
)
from hybrid_shuffle.shuffle.local.input_gate import PollingInputGate
from hybrid_shuffle.shuffle.memory_budget import MemoryBudget
from hybrid_shuffle.shuffle.partition_type import partition_type
from hybrid_shuffle.shuffle.result_partition import ResultPartition
from hybrid_shuffle.shuffle.routing import Partitioner, PartitionerKind
from hybrid_shuffle.shuffle.spill_file import SpillFile, SpillSegment

from .builders import Builder
from .fakes import FakePool, FakeTransport, RecordingMaster

TABLE = pa.table({"k": list(range(1000)), "v": [float(i) for i in range(1000)]})
PID = "job/e/0.0"


def spill(tmp_path: Path, checksums: bool = True) -> SpillFile:
    return SpillFile(str(tmp_path / "p.arrows"), PID, checksums)


def flip(path: str, offset: int) -> None:
    """Invert one byte of the file in place (another process's write, as a bad disk's)."""
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))


def middle(segment: SpillSegment) -> int:
    """A byte inside the segment's record batch body: the rows' values."""
    return segment.offset + segment.length // 2


# -- the spill file ---------------------------------------------------------------------


def test_every_segment_carries_a_checksum_and_reads_back_whole(tmp_path: Path) -> None:
    file = spill(tmp_path)
    first, second = file.append(TABLE), file.append(TABLE.slice(10, 5))
    assert first.checksum is not None and second.checksum is not None
    written = Path(file.path).read_bytes()
    assert first.checksum == spill_file.checksum(
        written[first.offset : first.offset + first.length]
    )
    assert file.read(second).equals(TABLE.slice(10, 5))
    assert file.read(first).equals(TABLE)


def test_a_flipped_byte_fails_the_checksum_naming_the_partition_and_the_file(
    tmp_path: Path,
) -> None:
    file = spill(tmp_path)
    first, second = file.append(TABLE), file.append(TABLE)
    flip(file.path, middle(second))
    with pytest.raises(PartitionCorruptedError) as err:
        file.read(second)
    message = str(err.value)
    assert f"spill file '{file.path}' of partition {PID} is corrupted" in message
    assert f"offset {second.offset}" in message and "checksum" in message
    assert "check that disk" in message  # what to do
    assert (err.value.partition_id, err.value.path) == (PID, file.path)
    assert file.read(first).equals(TABLE)  # the other buffer is intact


@pytest.mark.parametrize("checksums", [True, False])
def test_a_truncated_file_is_refused_with_or_without_checksums(
    tmp_path: Path, checksums: bool
) -> None:
    file = spill(tmp_path, checksums)
    first, second = file.append(TABLE), file.append(TABLE)
    os.truncate(file.path, second.offset + second.length // 2)
    with pytest.raises(PartitionCorruptedError, match=r"is truncated: its buffer at offset"):
        file.read(second)
    assert file.read(first).equals(TABLE)


@pytest.mark.parametrize("checksums", [True, False])
def test_a_deleted_file_is_refused_though_the_open_descriptor_still_reads_it(
    tmp_path: Path, checksums: bool
) -> None:
    file = spill(tmp_path, checksums)
    segment = file.append(TABLE)
    os.unlink(file.path)
    with pytest.raises(PartitionCorruptedError, match=r"was deleted while its partition") as err:
        file.read(segment)
    assert file.path in str(err.value) and PID in str(err.value)
    file.delete()  # still fine: the file is gone already


def test_with_checksums_off_no_hash_is_computed_or_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def never(data: object) -> int:
        raise AssertionError("hashed with checksums off")

    monkeypatch.setattr(spill_file, "checksum", never)
    file = spill(tmp_path, checksums=False)
    segment = file.append(TABLE)
    assert segment.checksum is None
    flip(file.path, middle(segment))
    # nothing checks the rows' bytes any more: the flipped value reads back as it is now
    assert not file.read(segment).equals(TABLE)


def test_a_segment_that_no_longer_decodes_is_corrupted_even_with_checksums_off(
    tmp_path: Path,
) -> None:
    file = spill(tmp_path, checksums=False)
    segment = file.append(TABLE)
    flip(file.path, segment.offset)  # the IPC continuation marker
    with pytest.raises(PartitionCorruptedError, match=r"is not readable Arrow IPC"):
        file.read(segment)


# -- a partition answers its readers ------------------------------------------------------


def partition(tmp_path: Path, mode: str = "blocking", checksums: bool = True) -> ResultPartition:
    descriptor = PartitionDescriptor(
        PartitionId(PID),
        "job",
        "e",
        0,
        1,
        1,
        partition_type(mode),
        Partitioner(PartitionerKind.HASH, ("k",)),
    )
    return ResultPartition(
        descriptor,
        MemoryBudget(1),  # nothing fits: every buffer spills
        str(tmp_path / "p.arrows"),
        lambda t: t,  # a table stands in for its ObjectRef
        2,
        5.0,
        threading.Event(),
        checksums=checksums,
    )


def poll(p: ResultPartition) -> PollResponse:
    return p.poll(PollRequest(PartitionId(PID), 0, 0, 0, 10, 0.01))


@pytest.mark.parametrize("mode", ["blocking", "hybrid-full", "hybrid-selective"])
def test_a_corrupted_spilled_buffer_is_a_corrupted_answer_naming_edge_partition_and_file(
    tmp_path: Path, mode: str
) -> None:
    p = partition(tmp_path, mode)
    p.add(0, TABLE)
    p.add(0, TABLE)
    p.finish()
    path = str(tmp_path / "p.arrows")
    flip(path, os.path.getsize(path) - 4000)  # inside the second buffer
    answer = poll(p)
    assert answer.error_kind is PollErrorKind.CORRUPTED
    assert answer.error is not None and answer.buffers == []
    assert answer.error.startswith(f"edge 'e': spill file '{path}' of partition {PID} is")
    p.release()


def test_a_partition_released_under_a_read_is_gone_not_corrupted(tmp_path: Path) -> None:
    p = partition(tmp_path)
    p.add(0, TABLE)
    p.finish()
    file = p._spill
    assert file is not None
    read = file.read

    def released_first(segment: SpillSegment) -> pa.Table:
        p.release()  # the scheduler's release lands between the poll's pick and its read
        return read(segment)

    file.read = released_first  # type: ignore[method-assign]
    answer = poll(p)
    assert answer.error_kind is PollErrorKind.NOT_FOUND
    assert answer.error is not None and "was released" in answer.error


def test_a_spilling_partition_with_checksums_off_writes_none(tmp_path: Path) -> None:
    p = partition(tmp_path, checksums=False)
    p.add(0, TABLE)
    p.finish()
    assert p._spill is not None and not p._spill.checksums
    (buffer,) = poll(p).buffers
    assert buffer.ref.table.equals(TABLE)
    p.release()


def test_the_gate_raises_a_corrupted_answer_as_partition_corrupted_with_its_id() -> None:
    descriptor = ShuffleDescriptor(
        PartitionDescriptor(
            PartitionId(PID),
            "job",
            "e",
            0,
            1,
            1,
            partition_type("blocking"),
            Partitioner(PartitionerKind.HASH, ("k",)),
        ),
        None,
        "executor 0",
        0,
    )
    gate = PollingInputGate(
        InputGateDescriptor(0, "e", 0, (ConsumerDescriptor(descriptor, 0, 0, 0),)), 2, 5.0
    )
    answer = PollResponse(error="edge 'e': spill file '/x' is corrupted", error_kind=None)
    answer.error_kind = PollErrorKind.CORRUPTED
    with pytest.raises(PartitionCorruptedError, match="spill file '/x'") as err:
        gate.accept(gate.channels[0], answer)
    assert err.value.partition_id == PID


# -- the error and the config -------------------------------------------------------------


def test_the_error_is_public_keeps_its_partition_across_pickling_and_is_collateral() -> None:
    assert hs.PartitionCorruptedError is PartitionCorruptedError
    try:
        raise PartitionCorruptedError("spill file '/x' is corrupted", partition_id=PID, path="/x")
    except PartitionCorruptedError as e:
        failure = describe_failure(e)
    copy = pickle.loads(pickle.dumps(failure))
    assert isinstance(copy.library_error, PartitionCorruptedError)
    assert (copy.library_error.partition_id, copy.library_error.path) == (PID, "/x")
    assert classify(copy) is FailureKind.COLLATERAL  # counted against its producer


def test_checksums_are_on_by_default_and_must_be_a_boolean() -> None:
    assert load_config({}).shuffle.checksums is True
    assert load_config({"shuffle": {"checksums": False}}).shuffle.checksums is False
    with pytest.raises(ConfigError, match=r"shuffle.checksums: must be true or false, got 'no'"):
        load_config({"shuffle": {"checksums": "no"}})


# -- the scheduler: the partition is lost, its producer runs again ------------------------


def two_stages() -> LogicalNode:
    b = Builder()
    return b.agg(b.map(b.source("orders", 4), "clean"), "totals", "by_customer", "blocking")


def corrupting(made: FakeTransport, producer: str, edge: str) -> FakeTransport:
    """``made``, whose failing tasks report the current attempt of ``producer``'s
    partition on ``edge`` corrupted."""

    def error(name: str) -> Exception:
        attempt = max(s.deployment.attempt for s in made.submitted if s.deployment.name == producer)
        pid = f"job-1/{edge}/{producer[-2]}.{attempt}"
        return PartitionCorruptedError(
            f"edge '{edge}': spill file '/spill/{pid.replace('/', '_')}.arrows' of partition "
            f"{pid} is corrupted",
            partition_id=pid,
        )

    made.error = error
    return made


def schedule(transport: FakeTransport, max_attempts: int) -> tuple[Scheduler, PartitionTracker]:
    plan = plan_job("job", two_stages(), load_config({"parallelism": 4}), slots=4)
    tracker = PartitionTracker(RecordingMaster())
    scheduler = Scheduler(
        plan,
        "job-1",
        tracker,
        FakePool(list(range(4))),
        transport,
        1 << 20,
        5.0,
        FailoverConfig(max_attempts=max_attempts, backoff=0.0),
    )
    scheduler.run()
    return scheduler, tracker


def test_a_corrupted_partition_is_recomputed_by_its_producer_and_reread() -> None:
    transport = corrupting(
        FakeTransport(
            lambda name, attempt: (
                TaskState.FAILED if name == "totals[2]" and attempt == 0 else TaskState.FINISHED
            )
        ),
        "orders->clean[1]",
        "by_customer",
    )
    scheduler, _ = schedule(transport, max_attempts=2)
    attempts = transport.attempts()
    assert "orders->clean[1]#1" in attempts  # the corrupted partition's producer ran again
    assert "totals[2]#1" in attempts
    assert not any(a.startswith("orders->clean[0]") and a.endswith("#1") for a in attempts)
    assert scheduler.restarts == 1
    # the corruption was counted against the producer, not the reader
    counted = {
        f"{scheduler.graph.vertices[vid].name}[{subtask}]": [a for a, _ in failures]
        for (vid, subtask), failures in scheduler._failures.items()
        if failures
    }
    assert counted == {"orders->clean[1]": [0]}


def test_a_partition_corrupted_in_every_attempt_fails_the_job_naming_its_file() -> None:
    transport = corrupting(
        FakeTransport(
            lambda name, attempt: TaskState.FAILED if name == "totals[2]" else TaskState.FINISHED
        ),
        "orders->clean[1]",
        "by_customer",
    )
    with pytest.raises(JobFailedError) as err:
        schedule(transport, max_attempts=2)
    message = str(err.value)
    assert "task 'orders->clean[1]'" in message and "failed in attempts 0, 1" in message
    assert "PartitionCorruptedError: edge 'by_customer': spill file " in message
    assert "/spill/job-1_by_customer_1.0.arrows" in message
    assert (err.value.operator, err.value.subtask, err.value.attempts) == ("orders->clean", 1, 2)
    cause = err.value.__cause__  # the corruption that ran out the attempts, with its id
    assert isinstance(cause, PartitionCorruptedError)
    assert cause.partition_id == "job-1/by_customer/1.1"


def test_the_tracker_marks_a_corrupted_partition_lost_once() -> None:
    master = RecordingMaster()
    tracker = PartitionTracker(master)
    descriptor = PartitionDescriptor(
        PartitionId("job-1/e/0.0"),
        "job-1",
        "e",
        0,
        1,
        1,
        partition_type("blocking"),
        Partitioner(PartitionerKind.HASH, ("k",)),
    )
    tracker.register(("v", 0), descriptor, ProducerDescriptor(0, "executor"))
    tracker.producer_finished("job-1", ("v", 0), {})
    assert tracker.available("job-1", "e", 0)
    assert tracker.corrupted(descriptor.partition_id) == (("v", 0), descriptor)
    assert tracker.state(descriptor.partition_id) is TrackedState.LOST
    assert not tracker.available("job-1", "e", 0)
    assert tracker.lost_producers("job-1") == {("v", 0)}
    assert tracker.corrupted(descriptor.partition_id) is None  # told once
    assert tracker.corrupted(PartitionId("job-1/e/9.0")) is None  # never tracked


def test_a_corrupted_result_partition_read_by_the_driver_reruns_its_sink() -> None:
    transport = FakeTransport()
    scheduler, tracker = schedule(transport, max_attempts=2)
    result = [
        d.partition.partition_id
        for d in tracker.partitions("job-1")
        if "/result/" in d.partition.partition_id
    ]
    assert result, "the plan writes a result partition"
    lost = PartitionCorruptedError("spill file '/x' is corrupted", partition_id=result[0])
    scheduler.recover(lost)
    assert any(a.startswith("totals[") and a.endswith("#1") for a in transport.attempts())
    assert scheduler.restarts == 1
