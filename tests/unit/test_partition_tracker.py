"""Which partitions exist, who still reads them, and when they are released."""

from __future__ import annotations

from hybrid_shuffle.runtime.partition_tracker import PartitionTracker, TrackedState
from hybrid_shuffle.shuffle.api import (
    BufferRef,
    HandedOver,
    PartitionDescriptor,
    PartitionId,
    ProducerDescriptor,
)
from hybrid_shuffle.shuffle.partition_type import BLOCKING_PERSISTENT, partition_type
from hybrid_shuffle.shuffle.routing import Partitioner, PartitionerKind

from .fakes import RecordingMaster


def descriptor(subtask: int, consumers: int = 2, job: str = "j") -> PartitionDescriptor:
    return PartitionDescriptor(
        PartitionId(f"{job}/e/{subtask}"),
        job,
        "e",
        subtask,
        consumers,
        1,
        partition_type("blocking"),
        Partitioner(PartitionerKind.HASH, ("k",)),
    )


def register(tracker: PartitionTracker, subtask: int, executor: int = 0) -> None:
    tracker.register(("p", subtask), descriptor(subtask), ProducerDescriptor(executor, "ex"))


def test_a_partition_is_released_when_its_last_reader_finished() -> None:
    master = RecordingMaster()
    tracker = PartitionTracker(master)
    register(tracker, 0)
    d = tracker.descriptor("j", "e", 0)
    tracker.channel(("c", 0), d, 0, 0, 0)
    tracker.channel(("c", 1), d, 0, 1, 0)
    tracker.consumer_finished("j", ("c", 0))
    assert master.released == []
    tracker.consumer_finished("j", ("c", 1))
    assert master.released == ["j/e/0"]
    assert tracker.state(PartitionId("j/e/0")) is TrackedState.RELEASED


def test_handed_over_buffers_reach_later_consumers_and_are_dropped_once_all_have_them() -> None:
    tracker = PartitionTracker(RecordingMaster())
    register(tracker, 0)
    handed = HandedOver([[BufferRef(0, "ref-a", 1, 8)], [BufferRef(0, "ref-b", 1, 8)]], None, 1.0)
    tracker.producer_finished("j", ("p", 0), {PartitionId("j/e/0"): handed})
    d = tracker.descriptor("j", "e", 0)
    first = tracker.channel(("c", 0), d, 0, 0, 0)
    second = tracker.channel(("c", 1), d, 0, 1, 0)
    assert first.buffers is not None and first.buffers[0].ref == "ref-a"
    assert second.buffers is not None and second.buffers[0].ref == "ref-b"
    third = tracker.channel(("c", 2), d, 0, 1, 0)  # a late reader (e.g. a re-read) polls
    assert third.buffers is None


def test_release_job_frees_what_is_left_of_that_job_only() -> None:
    master = RecordingMaster()
    tracker = PartitionTracker(master)
    register(tracker, 0)
    tracker.register(("p", 0), descriptor(0, job="other"), ProducerDescriptor(0, "ex"))
    tracker.release_job("j")
    assert master.released == ["j/e/0"]
    assert [d.partition.job_id for d in tracker.partitions()] == ["other"]


def test_held_by_names_the_partitions_an_executor_loss_would_take() -> None:
    tracker = PartitionTracker(RecordingMaster())
    register(tracker, 0, executor=0)
    register(tracker, 1, executor=1)
    assert tracker.held_by(1) == ["j/e/1"]


def test_a_job_that_ended_early_leaves_nothing_in_the_tracker() -> None:
    tracker = PartitionTracker(RecordingMaster())
    register(tracker, 0)  # its producer never finished: the job failed
    tracker.channel(("c", 0), tracker.descriptor("j", "e", 0), 0, 0, 0)
    tracker.release_job("j")
    assert tracker.partitions() == []
    assert not tracker._by_edge and not tracker._by_producer and not tracker._reads


def test_a_lost_partition_cannot_be_reread_and_names_its_producer_until_it_runs_again() -> None:
    tracker = PartitionTracker(RecordingMaster())
    register(tracker, 0, executor=0)
    register(tracker, 1, executor=1)
    tracker.producer_finished("j", ("p", 0), {})
    tracker.producer_finished("j", ("p", 1), {})
    assert tracker.available("j", "e", 0) and tracker.available("j", "e", 1)
    assert tracker.executor_lost(1) == ["j/e/1"]
    assert not tracker.available("j", "e", 1)
    assert tracker.lost_producers("j") == {("p", 1)}
    tracker.task_restarted("j", ("p", 1))  # its old attempt's partition goes
    assert tracker.lost_producers("j") == set()


def test_a_consumer_that_runs_again_is_counted_once_toward_a_partitions_readers() -> None:
    master = RecordingMaster()
    tracker = PartitionTracker(master)
    register(tracker, 0)
    d = tracker.descriptor("j", "e", 0)
    tracker.channel(("c", 0), d, 0, 0, 0)
    tracker.consumer_finished("j", ("c", 0))
    tracker.task_restarted("j", ("c", 0))  # it runs again (its output was lost)
    tracker.channel(("c", 0), d, 0, 0, 0)
    tracker.consumer_finished("j", ("c", 0))
    assert master.released == []  # the other reader has not finished
    tracker.channel(("c", 1), d, 0, 1, 0)
    tracker.consumer_finished("j", ("c", 1))
    assert master.released == ["j/e/0"]


def test_services_report_lost_partitions_through_the_master() -> None:
    master = RecordingMaster()
    tracker = PartitionTracker(master)
    register(tracker, 0)
    master.lost.append(PartitionId("j/e/0"))
    assert tracker.poll_lost() == ["j/e/0"]
    assert tracker.state(PartitionId("j/e/0")) is TrackedState.LOST


def persistent(subtask: int, job: str = "j") -> PartitionDescriptor:
    return PartitionDescriptor(
        PartitionId(f"{job}/cache:c/{subtask}"),
        job,
        "cache:c",
        subtask,
        1,
        1,
        BLOCKING_PERSISTENT,
        Partitioner(PartitionerKind.FORWARD),
    )


def test_a_promoted_cache_partition_outlives_its_job_until_it_is_released() -> None:
    master = RecordingMaster()
    tracker = PartitionTracker(master)
    tracker.register(("p", 0), persistent(0), ProducerDescriptor(1, "ex"))
    handed = HandedOver([[BufferRef(0, "ref", 1, 8)]], None, 1.0)
    tracker.producer_finished("j", ("p", 0), {PartitionId("j/cache:c/0"): handed})
    tracker.promote([PartitionId("j/cache:c/0")])
    tracker.release_job("j")
    assert master.released == []
    assert tracker.state(PartitionId("j/cache:c/0")) is TrackedState.PRODUCED
    # later readers poll: nothing of the partition is pinned in the driver for them
    assert tracker._partitions[PartitionId("j/cache:c/0")].handed_over is None
    tracker.release([PartitionId("j/cache:c/0")])
    assert master.released == ["j/cache:c/0"]


def test_a_cache_partition_not_promoted_goes_with_its_failed_job() -> None:
    master = RecordingMaster()
    tracker = PartitionTracker(master)
    tracker.register(("p", 0), persistent(0), ProducerDescriptor(1, "ex"))
    tracker.release_job("j")
    assert master.released == ["j/cache:c/0"]


def test_a_promoted_partition_is_lost_with_its_executor() -> None:
    tracker = PartitionTracker(RecordingMaster())
    tracker.register(("p", 0), persistent(0), ProducerDescriptor(1, "ex"))
    tracker.producer_finished("j", ("p", 0), {})
    tracker.promote([PartitionId("j/cache:c/0")])
    tracker.release_job("j")
    assert tracker.executor_lost(1) == [PartitionId("j/cache:c/0")]
    assert tracker.state(PartitionId("j/cache:c/0")) is TrackedState.LOST
    assert not tracker.all_produced([PartitionId("j/cache:c/0")])
