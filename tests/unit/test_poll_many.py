"""One request per producer process: ``PartitionHolder.poll_many`` answers a consumer's
channels together and wakes on any of them, ``PartitionWatch`` wakes only the waiters of
the partition that changed, ``by_producer`` groups a task's channels by process, and a
gate in producer order delivers one producer's rows after the other's.
Plain objects, no Ray (``put`` is the identity); every wait is gated on a phase."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import pyarrow as pa

from hybrid_shuffle.shuffle.api import (
    BufferRef,
    ConsumerDescriptor,
    InputGateDescriptor,
    PartitionDescriptor,
    PartitionId,
    PollErrorKind,
    PollRequest,
    ShuffleDescriptor,
    ShuffleEnvironmentContext,
)
from hybrid_shuffle.shuffle.inline_table import InlineTable
from hybrid_shuffle.shuffle.local.input_gate import PollingInputGate, by_producer, read_gates
from hybrid_shuffle.shuffle.local.partition_holder import PartitionHolder
from hybrid_shuffle.shuffle.partition_type import partition_type
from hybrid_shuffle.shuffle.partition_watch import PartitionWatch
from hybrid_shuffle.shuffle.routing import Partitioner, PartitionerKind

BATCH = pa.table({"k": list(range(100)), "v": [1.0] * 100})
A, B = PartitionId("job/e/0"), PartitionId("job/e/1")


def holder(tmp_path: Path) -> PartitionHolder:
    context = ShuffleEnvironmentContext(
        executor_index=0,
        session_id="s0",
        buffer_size=BATCH.nbytes,
        credits=2,
        wait_timeout=30.0,
        memory_budget=100 * BATCH.nbytes,
        spill_dir=str(tmp_path / "session"),
    )
    return PartitionHolder(context, str(tmp_path / "session" / "executor-0"), lambda t: t)


def descriptor(pid: PartitionId, mode: str, producer: int = 0) -> PartitionDescriptor:
    return PartitionDescriptor(
        pid,
        "job",
        "e",
        producer,
        1,
        1,
        partition_type(mode),
        Partitioner(PartitionerKind.HASH, ("k",)),
    )


def request(pid: PartitionId, cursor: int = 0) -> PollRequest:
    return PollRequest(pid, 0, 0, cursor, 8, 30.0)


def test_a_request_answers_at_once_every_channel_when_one_has_data(tmp_path: Path) -> None:
    h = holder(tmp_path)
    cancelled = threading.Event()
    a = h.create(descriptor(A, "hybrid-selective"), cancelled)
    h.create(descriptor(B, "hybrid-selective", 1), cancelled)
    a.add(0, BATCH)
    got_a, got_b = h.poll_many([request(A), request(B)], 30.0)
    assert [b.rows for b in got_a.buffers] == [100] and got_a.next_cursor == 1
    assert got_b.buffers == [] and got_b.error is None and not got_b.end_of_partition


def test_a_buffer_added_while_the_request_waits_wakes_it(tmp_path: Path) -> None:
    """The producer's add answers the open request (push): gated on the request having
    subscribed, never on a timer; a missed wake-up would return empty after 30 s."""
    h = holder(tmp_path)
    cancelled = threading.Event()
    h.create(descriptor(A, "hybrid-selective"), cancelled)
    b = h.create(descriptor(B, "hybrid-selective", 1), cancelled)
    answers: list = []
    waiter = threading.Thread(
        target=lambda: answers.extend(h.poll_many([request(A), request(B)], 30.0))
    )
    waiter.start()
    while not h._watch._waiters.get(B):  # the phase: the request is waiting
        threading.Event().wait(0.001)
    b.add(0, BATCH)
    waiter.join(timeout=30)
    assert not waiter.is_alive()
    assert answers[0].buffers == [] and [x.rows for x in answers[1].buffers] == [100]


def test_one_request_acknowledges_every_channel_so_credit_returns_for_all(tmp_path: Path) -> None:
    """Pipelined buffers are dropped once read: the cursors of one request release both."""
    h = holder(tmp_path)
    cancelled = threading.Event()
    a = h.create(descriptor(A, "pipelined"), cancelled)
    b = h.create(descriptor(B, "pipelined", 1), cancelled)
    a.add(0, BATCH)
    b.add(0, BATCH)
    h.poll_many([request(A, cursor=1), request(B, cursor=1)], 0.0)
    again = h.poll_many([request(A), request(B)], 0.0)
    assert all(x.error_kind is PollErrorKind.NOT_FOUND for x in again)


def test_the_end_of_a_partition_is_news_and_an_unknown_id_is_nothing_yet(tmp_path: Path) -> None:
    h = holder(tmp_path)
    a = h.create(descriptor(A, "blocking"), threading.Event())
    a.finish(BATCH.schema)
    done, unknown = h.poll_many([request(A), request(PartitionId("job/e/9"))], 30.0)
    assert done.end_of_partition and done.schema == BATCH.schema
    assert unknown.error is None and unknown.buffers == [] and not unknown.end_of_partition


def test_a_change_wakes_only_the_waiters_of_that_partition() -> None:
    watch = PartitionWatch()
    on_a, on_b = threading.Event(), threading.Event()
    watch.subscribe([A], on_a)
    watch.subscribe([B], on_b)
    watch.changed(A)
    assert on_a.is_set() and not on_b.is_set()
    watch.unsubscribe([B], on_b)
    watch.changed(B)
    assert not on_b.is_set() and watch._waiters == {A: {on_a}}


def test_a_task_asks_each_producer_process_once_for_all_its_channels_of_every_input() -> None:
    """Four producers on two executors, read by two inputs of one task: two requests."""

    def channel(pid: str, producer: int, where: str) -> ConsumerDescriptor:
        shuffle = ShuffleDescriptor(
            descriptor(PartitionId(pid), "hybrid-selective", producer), object(), where
        )
        return ConsumerDescriptor(shuffle, producer, 0, 0)

    left = InputGateDescriptor(
        0, "left", 0, tuple(channel(f"j/l/{i}", i, f"executor {i % 2}") for i in range(4))
    )
    right = InputGateDescriptor(1, "right", 0, (channel("j/r/0", 0, "executor 1"),))
    gates = [PollingInputGate(left, 8, 30.0), PollingInputGate(right, 8, 30.0)]
    producers = by_producer(gates)
    assert sorted(producers) == ["executor 0", "executor 1"]
    assert [c.spec.producer_subtask for _, c in producers["executor 0"].channels] == [0, 2]
    assert [
        (g.spec.edge, c.spec.producer_subtask) for g, c in producers["executor 1"].channels
    ] == [
        ("left", 1),
        ("left", 3),
        ("right", 0),
    ]


def _gather(producers: list[int], handed: dict[int, pa.Table] | None = None) -> PollingInputGate:
    """A gate in producer order over channels of ``producers`` (in that order), those in
    ``handed`` with their one buffer handed over."""
    handed = handed or {}

    def channel(producer: int) -> ConsumerDescriptor:
        shuffle = ShuffleDescriptor(
            descriptor(PartitionId(f"j/g/{producer}"), "blocking", producer), object(), "x"
        )
        table = handed.get(producer)
        inline = None if table is None else InlineTable.of(table)
        buffers = None if table is None else (BufferRef(0, inline, table.num_rows, table.nbytes),)
        return ConsumerDescriptor(shuffle, producer, 0, 0, buffers, schema=BATCH.schema)

    spec = InputGateDescriptor(
        0, "gather", 0, tuple(channel(p) for p in producers), in_producer_order=True
    )
    return PollingInputGate(spec, 8, 30.0)


def test_a_gate_in_producer_order_holds_a_later_producer_s_rows_until_the_earlier_end() -> None:
    gate = _gather([2, 0, 1])
    c0, c1, c2 = gate.channels
    assert [c.spec.producer_subtask for c in (c0, c1, c2)] == [0, 1, 2]
    t = {name: BATCH.slice(i, 1) for i, name in enumerate(["0a", "1a", "1b", "2a", "2b"])}
    assert gate.in_order(c2, [t["2a"]]) == []
    assert gate.in_order(c1, [t["1a"]]) == []
    c0.done = True  # producer 0 ended without a row: the turn passes on
    assert gate.in_order(None, []) == [t["1a"]]
    assert gate.in_order(c2, [t["2b"]]) == []
    c1.done = c2.done = True
    assert gate.in_order(c1, [t["1b"]]) == [t["1b"], t["2a"], t["2b"]]
    assert gate.held == {}
    anyhow = PollingInputGate(dataclasses.replace(gate.spec, in_producer_order=False), 8, 30.0)
    assert anyhow.in_order(anyhow.channels[0], [t["2a"]]) == [t["2a"]]  # as it comes


def test_handed_over_buffers_of_a_gate_in_producer_order_come_in_subtask_order() -> None:
    tables = {p: BATCH.slice(p * 10, 10) for p in range(3)}
    gate = _gather([2, 0, 1], tables)
    got = [t for _, t in read_gates([gate], threading.Event())]
    assert got == [tables[0], tables[1], tables[2], None]
