"""Consumers prefer the node holding most of their input bytes (issue 14, 3): what each
node holds of a task's input (``runtime.locality``), which executor each packed slot
becomes (``placement.prefer_nodes``), and the scheduler using both; no Ray."""

from __future__ import annotations

import math
from collections.abc import Callable

from hybrid_shuffle.config import FailoverConfig, load_config
from hybrid_shuffle.plan.graph import JobGraph, VertexId
from hybrid_shuffle.plan.planner import LogicalNode, plan_job
from hybrid_shuffle.plan.regions import TaskKey
from hybrid_shuffle.runtime.locality import Holder, Weight, input_weights, subpartition_bytes
from hybrid_shuffle.runtime.partition_tracker import PartitionTracker
from hybrid_shuffle.runtime.placement import place, prefer_nodes
from hybrid_shuffle.runtime.scheduler import Scheduler
from hybrid_shuffle.runtime.task import TaskReport
from hybrid_shuffle.shuffle.api import BufferRef, HandedOver
from hybrid_shuffle.shuffle.metrics import WriteMetrics

from .builders import Builder
from .fakes import FakePool, FakeTransport, RecordingMaster

A, B = "node-a", "node-b"


def graph(sink: LogicalNode, slots: int = 4) -> JobGraph:
    return plan_job("job", sink, load_config({"parallelism": 4}), slots=slots).graph


def vertex(g: JobGraph, name: str) -> VertexId:
    return next(v.id for v in g.vertices.values() if v.name == name)


def shuffle(mode: str, producers: int, consumers: int) -> LogicalNode:
    b = Builder()
    return b.agg(b.source("orders", producers), "totals", "by_customer", mode, consumers)


def tasks(*parallelisms: int) -> list[TaskKey]:
    return [(VertexId(v), i) for v, p in enumerate(parallelisms) for i in range(p)]


# -- what each node holds of a task's input ------------------------------------------------


def test_sizes_come_from_the_handed_over_buffers_else_split_evenly() -> None:
    handed = HandedOver([[BufferRef(0, None, 1, 700), BufferRef(1, None, 1, 50)], []], None, 0.0)
    assert subpartition_bytes(10_000, 2, handed) == [750, 0]
    assert subpartition_bytes(10, 3) == [4, 3, 3]


def test_a_consumer_weighs_the_bytes_of_its_own_subpartitions_per_node() -> None:
    g = graph(shuffle("blocking", producers=3, consumers=2))
    orders, totals = vertex(g, "orders"), vertex(g, "totals")
    holders = {
        (orders, 0): Holder(A, {"by_customer": [100, 1]}),
        (orders, 1): Holder(A, {"by_customer": [200, 2]}),
        (orders, 2): Holder(B, {"by_customer": [250, 3]}),
    }
    assert input_weights(g, (totals, 0), holders) == {A: Weight(300, 2), B: Weight(250, 1)}
    assert input_weights(g, (totals, 1), holders) == {A: Weight(3, 2), B: Weight(3, 1)}


def test_a_running_producer_counts_without_bytes_and_pipelined_inputs_not_at_all() -> None:
    g = graph(shuffle("hybrid-selective", producers=2, consumers=2))
    orders, totals = vertex(g, "orders"), vertex(g, "totals")
    running = {(orders, 0): Holder(B), (orders, 1): Holder(A, {"by_customer": [0, 5]})}
    assert input_weights(g, (totals, 0), running) == {B: Weight(0, 1), A: Weight(0, 1)}
    assert input_weights(g, (totals, 1), running) == {B: Weight(0, 1), A: Weight(5, 1)}
    p = graph(shuffle("pipelined", producers=2, consumers=2))
    assert input_weights(p, (vertex(p, "totals"), 0), {(vertex(p, "orders"), 0): Holder(A)}) == {}


def test_a_range_consumer_reads_its_share_of_the_one_stream() -> None:
    b = Builder()
    g = graph(b.sort(b.agg(b.source("orders", 2), "totals", mode="blocking"), "s", "r", "blocking"))
    totals, sort = vertex(g, "totals"), vertex(g, "s")
    holders = {(totals, i): Holder(A if i else B, {"r": [400 * (i + 1)]}) for i in range(4)}
    assert input_weights(g, (sort, 0), holders) == {B: Weight(100, 1), A: Weight(900, 3)}


# -- which executor each slot becomes ------------------------------------------------------

NODES = [A, B, A, B]  # executors 0 and 2 on a, 1 and 3 on b (the session's round-robin)


def test_input_on_one_node_pulls_its_consumers_there() -> None:
    placed = place(tasks(2), [0, 1])
    wants = {t: {A: Weight(1 << 20, 1)} for t in placed}
    moved = prefer_nodes(placed, [0, 1, 2, 3], NODES, wants)
    assert sorted(moved.values()) == [0, 2]
    assert moved[(VertexId(0), 0)] == 0  # a slot already on the node stays


def test_ties_and_no_input_keep_todays_placement() -> None:
    placed = place(tasks(1, 1, 1, 4), [1, 2, 3, 0])
    free = [1, 2, 3, 0]
    assert prefer_nodes(placed, free, NODES, {}) == placed
    even = {t: {A: Weight(10, 1), B: Weight(10, 1)} for t in placed}
    assert prefer_nodes(placed, free, NODES, even) == placed
    assert prefer_nodes(placed, free, ["one"] * 4, {t: {"one": Weight(9, 1)} for t in placed}) == (
        placed
    )


def test_more_bytes_win_over_more_producers() -> None:
    placed = place(tasks(1), [1])
    wants = {(VertexId(0), 0): {A: Weight(5 << 20, 1), B: Weight(1 << 20, 3)}}
    assert prefer_nodes(placed, [1, 2, 3], NODES, wants) == {(VertexId(0), 0): 2}


def test_the_balance_bound_groups_and_one_subtask_per_executor_still_hold() -> None:
    shape = (1, 1, 1, 4, 2)
    region = tasks(*shape)
    groups = {VertexId(4): "other"}
    placed = place(region, [3, 1, 0, 2, 5, 4], groups)
    nodes = [A, B, A, B, A, B]
    wants = {t: {A: Weight(7, 1)} for t in region if t[0] == VertexId(4)}  # only "other" reads
    moved = prefer_nodes(placed, [3, 1, 0, 2, 5, 4], nodes, wants)
    assert {nodes[e] for t, e in moved.items() if t[0] == VertexId(4)} == {A}
    load = {e: list(moved.values()).count(e) for e in set(moved.values())}
    assert max(load.values()) <= math.ceil(len(region) / len(load))
    assert sorted(load.values()) == sorted(
        list(placed.values()).count(s) for s in set(placed.values())
    )
    other = {e for t, e in moved.items() if t[0] == VertexId(4)}
    assert not other & {e for t, e in moved.items() if t[0] != VertexId(4)}
    for v, p in enumerate(shape):
        assert len({moved[(VertexId(v), i)] for i in range(p)}) == p


def test_a_busy_preferred_node_falls_back_to_the_next_node_then_to_todays_slot() -> None:
    placed = place(tasks(2), [1, 3])
    wants = {t: {A: Weight(9, 1)} for t in placed}
    assert prefer_nodes(placed, [1, 3], NODES, wants) == placed  # no executor of a is free
    moved = prefer_nodes(placed, [1, 3, 2], NODES, wants)  # one is: the first slot takes it
    assert moved == {(VertexId(0), 0): 2, (VertexId(0), 1): 3}
    three = [A, B, "node-c", B]
    second = {t: {A: Weight(9, 1), "node-c": Weight(4, 1)} for t in placed}
    assert prefer_nodes(placed, [1, 3, 2], three, second)[(VertexId(0), 0)] == 2


def test_a_pinned_slot_stays_and_no_other_slot_takes_its_executor() -> None:
    region = tasks(2, 2)
    pinned = {(VertexId(1), 0): 0}
    placed = place(region, [0, 1], units={VertexId(0): "k", VertexId(1): "k"}, pinned=pinned)
    wants = {t: {B: Weight(9, 1)} for t in region}
    moved = prefer_nodes(placed, [0, 1, 3], NODES, wants, fixed={0})
    assert moved[(VertexId(0), 0)] == moved[(VertexId(1), 0)] == 0
    assert moved[(VertexId(0), 1)] == moved[(VertexId(1), 1)] == 1


# -- the scheduler ---------------------------------------------------------------------------


class WritingTransport(FakeTransport):
    """Reports what ``sizes(producer subtask, subpartitions)`` says each producer wrote in
    each subpartition of every edge, and, with ``hand_over``, hands the buffers over as a
    finished blocking partition does."""

    def __init__(self, sizes: Callable[[int, int], list[int]], hand_over: bool) -> None:
        super().__init__()
        self.sizes = sizes
        self.hand_over = hand_over

    def report(self, ref: int, timeout: float, executor: int, task: str) -> TaskReport:
        deployment = self._refs[ref].deployment
        report = super().report(ref, timeout, executor, task)
        for out in deployment.outputs:
            p = out.partition
            if p.edge == "result":
                continue
            sizes = self.sizes(p.producer_subtask, p.num_subpartitions)
            report.writes.append(WriteMetrics(p.edge, p.producer_subtask, bytes=sum(sizes)))
            if self.hand_over:
                buffers = [[BufferRef(0, None, 1, size)] for size in sizes]
                report.ready_buffers[p.partition_id] = HandedOver(buffers, None, 0.0)
        return report


def executors(
    sink: LogicalNode,
    nodes: list[str],
    sizes: Callable[[int, int], list[int]],
    hand_over: bool = True,
) -> dict[str, int]:
    """Task name -> the executor the scheduler ran it on."""
    transport = WritingTransport(sizes, hand_over)
    pool = FakePool(list(range(len(nodes))), nodes)
    p = plan_job("job", sink, load_config({"parallelism": 4}), slots=len(nodes))
    Scheduler(
        p,
        "job-1",
        PartitionTracker(RecordingMaster()),
        pool,
        transport,
        1 << 20,
        5.0,
        FailoverConfig(max_attempts=1, backoff=0.0),
    ).run()
    return {s.deployment.name: s.executor for s in transport.submitted}


def even(producer: int, subpartitions: int) -> list[int]:
    return [4 << 20] * subpartitions


def test_the_scheduler_runs_blocking_consumers_on_their_producers_node() -> None:
    placed = executors(shuffle("blocking", producers=1, consumers=2), NODES, even)
    assert placed["orders[0]"] == 0  # the first region takes executor 0, on node a
    assert {NODES[placed["totals[0]"]], NODES[placed["totals[1]"]]} == {A}


def test_on_one_node_the_scheduler_places_as_before() -> None:
    placed = executors(shuffle("blocking", producers=1, consumers=2), ["n"] * 4, even)
    assert (placed["totals[0]"], placed["totals[1]"]) == (1, 2)  # the longest free first


def test_each_consumer_follows_the_bytes_of_its_own_subpartition() -> None:
    """Producer 0 (executor 0, node a) wrote 10 MiB, all for consumer 0; producer 1
    (executor 1, node b) 12 MiB, all for consumer 1.  Split evenly, both consumers would
    lean to b; the handed-over buffers' sizes send consumer 0 to a."""

    def skewed(producer: int, subpartitions: int) -> list[int]:
        return [10 << 20, 0] if producer == 0 else [0, 12 << 20]

    sink = shuffle("blocking", producers=2, consumers=2)
    placed = executors(sink, NODES, skewed)
    assert (placed["orders[0]"], placed["orders[1]"]) == (0, 1)
    assert (NODES[placed["totals[0]"]], NODES[placed["totals[1]"]]) == (A, B)
    polled = executors(sink, NODES, skewed, hand_over=False)  # the report's bytes only
    assert (NODES[polled["totals[0]"]], NODES[polled["totals[1]"]]) == (B, B)
