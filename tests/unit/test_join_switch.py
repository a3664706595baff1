"""A shuffled join made a broadcast join at run time (``plan.join_switch``,
``runtime.join_switch``): candidates, the hold on the probe producer, the rewrite of
the graph, and what the rewritten graph deploys.  The planner alone, no Ray."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from hybrid_shuffle.config import FailoverConfig, load_config
from hybrid_shuffle.errors import ConfigError
from hybrid_shuffle.operators import sql
from hybrid_shuffle.operators.sql import SqlQuery, bind, input_name
from hybrid_shuffle.plan.join_switch import SPLIT_TOKEN, SwitchableJoin, build_sides
from hybrid_shuffle.plan.planner import ExchangeSpec, LogicalNode, Plan, plan_job
from hybrid_shuffle.plan.regions import Region, pipelined_regions
from hybrid_shuffle.runtime.deployment import Deployer
from hybrid_shuffle.runtime.join_switch import decide_joins, held
from hybrid_shuffle.runtime.partition_tracker import PartitionTracker
from hybrid_shuffle.runtime.scheduler import Scheduler
from hybrid_shuffle.runtime.task import TaskReport, TaskState
from hybrid_shuffle.shuffle.api import ProducerDescriptor
from hybrid_shuffle.shuffle.metrics import WriteMetrics
from hybrid_shuffle.shuffle.routing import Partitioner, PartitionerKind
from hybrid_shuffle.sparkplan.physical import PhysicalPlan
from hybrid_shuffle.sparkplan.switchable import bound, estimate
from hybrid_shuffle.sparkplan.tree import Node

from .builders import Builder
from .fakes import FakePool, FakeTransport, RecordingMaster

TEMPLATE = (
    "SELECT l.customer, l.amount, r.amount AS other FROM (SELECT * FROM __hs_input_0__) AS l "
    "JOIN (SELECT * FROM __hs_input_1__) AS r ON l.customer = r.customer"
)


#: the same with a broadcast input (a broadcast join in the stage) read first
BROADCAST_TEMPLATE = (
    "SELECT l.customer, l.amount, r.amount AS other FROM (SELECT * FROM __hs_input_0__) AS l "
    "JOIN (SELECT * FROM __hs_input_1__) AS r ON l.customer = r.customer "
    "JOIN (SELECT * FROM __hs_input_2__) AS n ON n.customer = l.customer"
)


#: the query of a translated stage over ``orders`` (the probe producer, with ``stage``)
ORDERS_STAGE = "SELECT customer, amount * 2 AS amount FROM input WHERE amount > 1"


def joined(
    join_type: str = "Inner",
    sql_consumer: bool = True,
    broadcast: bool = False,
    stage: bool = False,
) -> LogicalNode:
    """``orders`` (4 subtasks, left) joined with ``customers`` (2, right) on a hash exchange
    of each into 3 join subtasks, as a translated sort-merge join's stage (with
    ``broadcast``, also joined with ``nations`` over a broadcast edge; with ``stage``,
    ``orders`` is read through a stage's ``sql`` query chained into it)."""
    b = Builder()
    left, right = b.source("orders", 4), b.source("customers", 2)
    if stage:
        operator = SqlQuery(ORDERS_STAGE, "stage_3")
        left = LogicalNode(next(b.ids), "stage_3", operator, [(left, None)])
    template = BROADCAST_TEMPLATE if broadcast else TEMPLATE
    tokens = {"left_edge": "__hs_input_0__", "right_edge": "__hs_input_1__"}
    if broadcast:
        tokens["nations_edge"] = "__hs_input_2__"
    node = _join_stage(b, left, right, _hint(template, tokens, join_type), template)
    if not sql_consumer:
        return node
    return b.agg(node, "totals", "by_customer", "blocking", 2)


def _hint(
    template: str, tokens: dict[str, str], join_type: str = "Inner", **split: Any
) -> SwitchableJoin:
    """What the translation knows of ``stage_9``'s sort-merge join of ``left_edge`` (the
    larger estimate) with ``right_edge``; ``split``: ``split`` and ``split_columns``."""
    return SwitchableJoin(
        "SortMergeJoin (9)",
        join_type,
        "left_edge",
        "right_edge",
        1000,
        10,
        template,
        tokens,
        left_bound=1000,
        right_bound=10,
        **split,
    )


def _join_stage(
    b: Builder, left: LogicalNode, right: LogicalNode, hint: SwitchableJoin, query: str
) -> LogicalNode:
    """Stage ``stage_9`` running ``query`` (its inputs as ``hint``'s tokens) over ``left``
    and ``right``, each hash-exchanged on ``customer`` into 3 subtasks, and ``nations``
    over a broadcast edge if ``hint`` names one."""
    for i, token in enumerate(hint.tokens.values()):
        query = query.replace(token, input_name(i))
    hash_of = Partitioner(PartitionerKind.HASH, ("customer",))
    inputs: list[tuple[LogicalNode, ExchangeSpec | None]] = [
        (left, ExchangeSpec(hash_of, "left_edge", "blocking", 3)),
        (right, ExchangeSpec(hash_of, "right_edge", "blocking", 3)),
    ]
    if "nations_edge" in hint.tokens:
        spec = ExchangeSpec(Partitioner(PartitionerKind.BROADCAST), "nations_edge", "blocking")
        inputs.append((b.source("nations", 1), spec))
    operator = SqlQuery(query, "stage_9", inputs=len(inputs))
    return LogicalNode(next(b.ids), "stage_9", operator, inputs, switchable=hint)


def planned(sink: LogicalNode, **adaptive: Any) -> Plan:
    return plan_job("job", sink, load_config({"adaptive": adaptive} if adaptive else None), 4)


def names(p: Plan, vids: Any) -> list[str]:
    return [p.graph.vertices[v].name for v in vids]


def test_build_sides_follow_sparks_rules() -> None:
    assert build_sides("Inner") == ("right", "left")
    assert build_sides("LeftOuter") == build_sides("LeftSemi") == ("right",)
    assert build_sides("LeftAnti") == build_sides("ExistenceJoin") == ("right",)
    assert build_sides("RightOuter") == ("left",)
    assert build_sides("FullOuter") == ()


def test_the_probe_producer_is_held_after_the_build_side() -> None:
    p = planned(joined())
    (candidate,) = p.graph.join_switches
    assert (candidate.build_edge, candidate.probe_edge) == ("right_edge", "left_edge")
    order = [p.graph.vertices[r.tasks[0][0]].name for r in p.regions]
    assert order.index("orders") > max(i for i, n in enumerate(order) if n == "customers")
    probe_region = next(r for r in p.regions if p.graph.vertices[r.tasks[0][0]].name == "orders")
    assert held(p.graph, probe_region)
    assert "may become a broadcast join" in p.explain()


def test_the_smaller_estimate_is_built_when_both_sides_may_be() -> None:
    sink = joined()
    join = sink.inputs[0][0]
    assert join.switchable is not None
    join.switchable = SwitchableJoin(
        *(getattr(join.switchable, f) for f in ("spark_join", "join_type")),
        "left_edge",
        "right_edge",
        5,
        10,
        TEMPLATE,
        join.switchable.tokens,
    )
    (candidate,) = planned(sink).graph.join_switches
    assert candidate.build_edge == "left_edge"


@pytest.mark.parametrize(
    ("join_type", "adaptive", "note"),
    [
        ("FullOuter", {}, "has no side a broadcast join may build"),
        ("Inner", {"broadcast_bytes": 0}, None),
    ],
)
def test_no_candidate(join_type: str, adaptive: dict[str, Any], note: str | None) -> None:
    p = planned(joined(join_type), **adaptive)
    assert p.graph.join_switches == []
    assert p.graph.holds() == []
    if note:
        assert any(note in n for n in p.graph.join_notes)
        assert note in p.explain()


def _finish_build_side(
    p: Plan, tracker: PartitionTracker, deployer: Deployer, bytes_: int, only: int | None = None
) -> Any:
    """Register and finish every ``customers`` task (the first ``only`` of them), as the
    scheduler does; their reports."""
    reports, finished = [], set()
    for vid, vertex in p.graph.vertices.items():
        if vertex.name not in ("customers", "nations"):
            continue
        for i in range(vertex.parallelism if only is None else only):
            for partition in deployer.output_partitions((vid, i)):
                tracker.register((vid, i), partition, ProducerDescriptor(0, None, "node"))
            tracker.producer_finished("job-1", (vid, i), {})
            report = TaskReport(f"customers[{i}]", "customers", i, 0, 0)
            edge = vertex.outputs[0].name
            report.writes = [WriteMetrics(bytes=bytes_, edge=edge, subtask=i)]
            reports.append(report)
            finished.add((vid, i))
    return reports, finished


def test_a_small_build_side_switches_the_join_into_the_probe_producer() -> None:
    p = planned(joined())
    tracker = PartitionTracker(RecordingMaster())
    deployer = Deployer(p.graph, "job-1", tracker, 1 << 20, 5.0)
    reports, finished = _finish_build_side(p, tracker, deployer, 100)
    probe_region = next(r for r in p.regions if p.graph.vertices[r.tasks[0][0]].name == "orders")
    (change,) = decide_joins(p.graph, probe_region, finished, reports, "job-1", tracker)
    assert change.switched and change.build_bytes == 200
    g = p.graph
    assert sorted(v.name for v in g.vertices.values()) == ["customers", "orders", "totals"]
    assert [e.name for e in g.edges] == ["right_edge", "by_customer"]
    build = g.edge("right_edge")
    orders = g.vertices[build.target]
    assert orders.name == "orders" and build.target_operator == len(orders.operators) - 1 == 0
    assert build.reads_whole == 3  # written for the 3 join subtasks planned
    assert g.edge("by_customer").source == orders.id
    assert g.holds() == []
    # every probe task reads every subpartition of every build producer
    regions = pipelined_regions(g)
    for i in range(4):
        for partition in deployer.output_partitions((orders.id, i)):
            tracker.register((orders.id, i), partition, ProducerDescriptor(0, None, "node"))
    gate = deployer.gate((orders.id, 0), build, 0)
    assert sorted((c.producer_subtask, c.subpartition) for c in gate.channels) == [
        (p_, s) for p_ in range(2) for s in range(3)
    ]
    assert gate.operator_index == 0 and gate.input_index == 1
    # one probe task finishing releases nothing the others still read
    tracker.consumer_finished("job-1", (orders.id, 0))
    assert all(tracker.available("job-1", "right_edge", s) for s in range(2))
    assert len(regions) == 2 + 4 + 2
    assert "became a broadcast join" in p.explain()
    joined_query = orders.operators[0]
    assert isinstance(joined_query, SqlQuery) and "FROM input) AS l" in joined_query.query


def test_a_large_build_side_leaves_the_join_shuffled() -> None:
    p = planned(joined(), broadcast_bytes="150 B", broadcast_max_bytes=0)
    tracker = PartitionTracker(RecordingMaster())
    deployer = Deployer(p.graph, "job-1", tracker, 1 << 20, 5.0)
    reports, finished = _finish_build_side(p, tracker, deployer, 100)
    probe_region = next(r for r in p.regions if p.graph.vertices[r.tasks[0][0]].name == "orders")
    (change,) = decide_joins(p.graph, probe_region, finished, reports, "job-1", tracker)
    assert not change.switched and change.threshold == 150
    assert sorted(v.name for v in p.graph.vertices.values()) == [
        "customers",
        "orders",
        "stage_9",
        "totals",
    ]
    assert p.graph.holds() == [] and "stayed shuffled" in p.explain()


def _held_at_150_bytes(**adaptive: Any) -> tuple[Plan, PartitionTracker, Deployer, Region]:
    """The joined job under a 150-byte threshold (the limit only that, unless ``adaptive``
    says otherwise), its probe producer's (held) region."""
    p = planned(joined(), **{"broadcast_bytes": "150 B", "broadcast_max_bytes": 0, **adaptive})
    tracker = PartitionTracker(RecordingMaster())
    deployer = Deployer(p.graph, "job-1", tracker, 1 << 20, 5.0)
    probe_region = next(r for r in p.regions if p.graph.vertices[r.tasks[0][0]].name == "orders")
    return p, tracker, deployer, probe_region


def test_a_build_side_past_the_threshold_before_its_last_task_releases_the_probe_at_once() -> None:
    """The rest of the build side can only add bytes: the probe producer need not wait."""
    p, tracker, deployer, probe_region = _held_at_150_bytes()
    reports, finished = _finish_build_side(p, tracker, deployer, 200, only=1)
    (change,) = decide_joins(p.graph, probe_region, finished, reports, "job-1", tracker)
    assert not change.switched and change.build_bytes == 200
    assert (change.build_subtasks_finished, change.build_subtasks) == (1, 2)
    assert change.as_dict()["build_subtasks_finished"] == 1
    assert "the first 1 of its 2 build subtasks wrote" in change.describe()
    assert p.graph.holds() == [] and not held(p.graph, probe_region)
    assert "stage_9" in {v.name for v in p.graph.vertices.values()}  # still shuffled


def test_a_build_side_within_the_threshold_so_far_keeps_the_probe_waiting() -> None:
    p, tracker, deployer, probe_region = _held_at_150_bytes()
    reports, finished = _finish_build_side(p, tracker, deployer, 100, only=1)
    assert decide_joins(p.graph, probe_region, finished, reports, "job-1", tracker) == []
    assert held(p.graph, probe_region)
    reports, finished = _finish_build_side(p, tracker, deployer, 100)
    (change,) = decide_joins(p.graph, probe_region, finished, reports, "job-1", tracker)
    assert not change.switched and change.build_bytes == 200  # all of it: 200 > 150
    assert (change.build_subtasks_finished, change.build_subtasks) == (2, 2)
    assert "first" not in change.describe()


# -- the limit past adaptive.broadcast_bytes: copies within the probe side's estimate -------
# (the probe side, orders, has 4 tasks and Spark's estimate 1000 bytes: 250 bytes a copy)


def test_a_build_side_over_the_threshold_is_broadcast_while_a_copy_per_probe_task_fits() -> None:
    p, tracker, deployer, probe_region = _held_at_150_bytes(broadcast_max_bytes="1 MiB")
    (candidate,) = p.graph.join_switches
    assert candidate.limit(p.graph) == 250
    assert "or up to 1 MiB (adaptive.broadcast_max_bytes, at most a quarter" in p.explain()
    reports, finished = _finish_build_side(p, tracker, deployer, 120)
    (change,) = decide_joins(p.graph, probe_region, finished, reports, "job-1", tracker)
    assert change.switched and change.build_bytes == 240 > change.threshold == 150
    assert (change.limit, change.probe_estimate) == (250, 1000)
    assert change.as_dict()["limit"] == 250
    assert "its limit" in change.describe() and "'left_edge'" in change.describe()
    assert "stage_9" not in {v.name for v in p.graph.vertices.values()}


def test_a_build_side_whose_copies_outgrow_the_probe_estimate_stays_shuffled() -> None:
    p, tracker, deployer, probe_region = _held_at_150_bytes(broadcast_max_bytes="1 MiB")
    reports, finished = _finish_build_side(p, tracker, deployer, 130)
    (change,) = decide_joins(p.graph, probe_region, finished, reports, "job-1", tracker)
    assert not change.switched and (change.build_bytes, change.limit) == (260, 250)
    assert "stage_9" in {v.name for v in p.graph.vertices.values()}


def test_broadcast_max_bytes_caps_the_limit() -> None:
    p, tracker, deployer, probe_region = _held_at_150_bytes(broadcast_max_bytes="200 B")
    assert p.graph.join_switches[0].limit(p.graph) == 200
    reports, finished = _finish_build_side(p, tracker, deployer, 120)
    (change,) = decide_joins(p.graph, probe_region, finished, reports, "job-1", tracker)
    assert not change.switched and change.limit == 200


def test_a_quarter_of_operators_memory_caps_the_limit() -> None:
    """Every probe task's join holds a switched build side whole."""
    sink = joined()
    join = sink.inputs[0][0]
    assert join.switchable is not None
    join.switchable = dataclasses.replace(join.switchable, left_bound=1 << 40)
    raw = {"adaptive": {"broadcast_max_bytes": "1 GiB"}, "operators": {"memory": "64 MiB"}}
    p = plan_job("job", sink, load_config(raw), 4)
    assert p.graph.join_switches[0].limit(p.graph) == 16 << 20
    assert "up to 16 MiB (adaptive.broadcast_max_bytes, at most a quarter of" in p.explain()


def test_without_a_probe_estimate_the_limit_is_the_threshold() -> None:
    sink = joined("LeftSemi")
    join = sink.inputs[0][0]
    assert join.switchable is not None
    join.switchable = SwitchableJoin(
        "SortMergeJoin (9)", "LeftSemi", "left_edge", "right_edge", None, None, TEMPLATE,
        join.switchable.tokens,
    )  # fmt: skip
    p = planned(sink, broadcast_bytes="150 B")
    (candidate,) = p.graph.join_switches
    assert candidate.probe_edge == "left_edge" and candidate.probe_estimate() is None
    assert candidate.limit(p.graph) == 150
    assert "adaptive.broadcast_max_bytes" not in p.explain()


def _side(*operators: Node) -> Node:
    """A join side as Spark plans it: a sort over an exchange over ``operators`` (each the
    child of the one before) over a Parquet scan."""
    node = Node("FileSourceScanExec", {})
    for operator in reversed(operators):
        node = dataclasses.replace(operator, children=[node])
    return Node("SortExec", {}, [Node("ShuffleExchangeExec", {}, [node])])


@pytest.mark.parametrize(
    ("operator", "trusted"),
    [
        (Node("ProjectExec", {}), True),
        (Node("BroadcastHashJoinExec", {"joinType": {"object": "...Inner$"}}), True),
        (Node("HashAggregateExec", {}), False),
        (Node("SortMergeJoinExec", {"joinType": {"object": "...LeftSemi$"}}), False),
        (Node("BroadcastHashJoinExec", {"joinType": {"object": "...LeftAnti$"}}), False),
        (Node("GlobalLimitExec", {}), False),
    ],
)
def test_a_probe_estimate_bounds_the_build_side_unless_rows_may_drop_by_any_factor(
    operator: Node, trusted: bool
) -> None:
    """Spark estimates an aggregate, a semi or anti join and a limit as their input."""
    side = _side(operator)
    plan = PhysicalPlan(side, {}, "", None)
    below = side.children[0].children[0]
    plan.sizes[id(below)] = 1000  # Spark's estimate of what the exchange reads
    for node in below.walk():
        plan.sizes.setdefault(id(node), 1000)
    assert estimate(plan, side) == 1000
    assert bound(plan, side) == (1000 if trusted else None)


def test_a_probe_estimate_counts_its_parquet_rows_as_arrow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``bound`` weighs the probe side in the build side's unit: a Parquet scan's rows as
    Arrow (row counts from the footers, the required columns' widths, a string's values
    uncompressed); ``estimate``, which chooses the side to build, keeps Spark's figure.
    Files past the footers read are scaled by size."""
    import pyarrow.parquet as pq

    from hybrid_shuffle.sparkplan import switchable
    from hybrid_shuffle.sparkplan.physical import ScanFiles

    rows = 1000
    table = pa.table({
        "k": pa.array(range(rows), pa.int64()),
        "price": pa.array([1] * rows, pa.decimal128(15, 2)),
        "note": pa.array(["x" * 40] * rows),
        "unread": pa.array(range(rows), pa.int32()),
    })  # fmt: skip
    folder = tmp_path / "t"
    folder.mkdir()
    for i in range(3):
        pq.write_table(table, folder / f"part-{i}.parquet", compression="zstd")
    meta = pq.ParquetFile(folder / "part-0.parquet").metadata
    groups = range(meta.num_row_groups)
    note = sum(meta.row_group(g).column(2).total_uncompressed_size for g in groups)
    per_file = rows * (8 + 16 + 4) + note

    required = {"fields": [{"name": n} for n in ("k", "price", "note")]}
    scan = Node("FileSourceScanExec", {"requiredSchema": required}, op_id=3)
    side = _side(Node("ProjectExec", {}))
    side.children[0].children[0].children = [scan]
    plan = PhysicalPlan(side, {}, "", None, scans={3: ScanFiles("Parquet", [f"file:{folder}"])})
    below = side.children[0].children[0]
    plan.sizes[id(below)] = 1000  # Spark's estimate of what the exchange reads
    assert bound(plan, side) == 3 * per_file
    assert estimate(plan, side) == 1000

    plan = PhysicalPlan(side, {}, "", None, scans={3: ScanFiles("Parquet", [f"file:{folder}"])})
    monkeypatch.setattr(switchable, "_FOOTERS_READ", 1)
    assert bound(plan, side) == 3 * per_file  # same-sized files: scaled exactly


def test_a_probe_side_with_a_join_below_keeps_sparks_figures(tmp_path: Path) -> None:
    """Below a join the scans' sum is no estimate (a join with a filtered table may keep
    1% of the rows), so Spark's figures stay, read or not."""
    import pyarrow.parquet as pq

    from hybrid_shuffle.sparkplan.physical import ScanFiles

    pq.write_table(pa.table({"k": list(range(100))}), tmp_path / "t.parquet")
    scan = Node("FileSourceScanExec", {"requiredSchema": {"fields": [{"name": "k"}]}}, op_id=3)
    side = _side(Node("BroadcastHashJoinExec", {"joinType": {"object": "...Inner$"}}))
    side.children[0].children[0].children = [scan]
    plan = PhysicalPlan(side, {}, "", None, scans={3: ScanFiles("Parquet", [str(tmp_path)])})
    plan.sizes[id(scan)] = 70  # Spark's figure of the scan
    assert bound(plan, side) == 70


def test_a_probe_estimate_of_files_not_read_here_is_sparks() -> None:
    from hybrid_shuffle.sparkplan.physical import ScanFiles

    scan = Node("FileSourceScanExec", {"requiredSchema": {"fields": [{"name": "k"}]}}, op_id=3)
    side = _side(Node("ProjectExec", {}))
    side.children[0].children[0].children = [scan]
    missing = ScanFiles("Parquet", ["s3a://bucket/t"])
    plan = PhysicalPlan(side, {}, "", None, scans={3: missing})
    plan.sizes[id(side.children[0].children[0])] = 1000
    assert bound(plan, side) == 1000


def test_a_build_side_past_the_threshold_but_within_the_limit_keeps_the_probe_waiting() -> None:
    """Its other subtasks may still bring it over the limit, or not: the probe waits."""
    p, tracker, deployer, probe_region = _held_at_150_bytes(broadcast_max_bytes="1 MiB")
    reports, finished = _finish_build_side(p, tracker, deployer, 200, only=1)
    assert decide_joins(p.graph, probe_region, finished, reports, "job-1", tracker) == []
    assert held(p.graph, probe_region)


def test_the_join_as_the_jobs_last_stage_moves_the_result() -> None:
    p = planned(joined(sql_consumer=False))
    tracker = PartitionTracker(RecordingMaster())
    deployer = Deployer(p.graph, "job-1", tracker, 1 << 20, 5.0)
    reports, finished = _finish_build_side(p, tracker, deployer, 1)
    probe_region = next(r for r in p.regions if p.graph.vertices[r.tasks[0][0]].name == "orders")
    decide_joins(p.graph, probe_region, finished, reports, "job-1", tracker)
    assert p.graph.vertices[p.graph.sink].name == "orders"


@pytest.mark.parametrize(("raw", "want"), [(0, 0), ("4 MiB", 4 << 20), (1024, 1024)])
def test_broadcast_bytes_loads(raw: Any, want: int) -> None:
    assert load_config({"adaptive": {"broadcast_bytes": raw}}).adaptive.broadcast_bytes == want


def test_broadcast_bytes_defaults_to_sparks_threshold_and_rejects_a_negative() -> None:
    assert load_config(None).adaptive.broadcast_bytes == 10 << 20
    with pytest.raises(ConfigError, match=r"adaptive\.broadcast_bytes"):
        load_config({"adaptive": {"broadcast_bytes": -1}})


@pytest.mark.parametrize(("raw", "want"), [(0, 0), ("64 MiB", 64 << 20)])
def test_broadcast_max_bytes_loads_and_defaults_to_128_mib(raw: Any, want: int) -> None:
    assert load_config(None).adaptive.broadcast_max_bytes == 128 << 20
    loaded = load_config({"adaptive": {"broadcast_max_bytes": raw}}).adaptive
    assert loaded.broadcast_max_bytes == want
    with pytest.raises(ConfigError, match=r"adaptive\.broadcast_max_bytes"):
        load_config({"adaptive": {"broadcast_max_bytes": "lots"}})


def test_a_broadcast_input_of_the_stage_goes_with_the_join() -> None:
    p = planned(joined(broadcast=True))
    tracker = PartitionTracker(RecordingMaster())
    deployer = Deployer(p.graph, "job-1", tracker, 1 << 20, 5.0)
    reports, finished = _finish_build_side(p, tracker, deployer, 100)
    probe_region = next(r for r in p.regions if p.graph.vertices[r.tasks[0][0]].name == "orders")
    (change,) = decide_joins(p.graph, probe_region, finished, reports, "job-1", tracker)
    assert change.switched
    g = p.graph
    nations = g.edge("nations_edge")
    orders = g.vertices[nations.target]
    assert orders.name == "orders"
    assert (nations.target_input, nations.target_operator, nations.reads_whole) == (2, 0, 1)
    gate = deployer.gate((orders.id, 3), nations, 3)
    assert [(c.producer_subtask, c.subpartition, c.reader) for c in gate.channels] == [(0, 0, 0)]
    query = orders.operators[0]
    assert isinstance(query, SqlQuery) and query.num_inputs == 3
    assert "FROM input2) AS n" in query.query and "FROM input1) AS r" in query.query
    # every probe task finishing its read releases nothing: the partitions go with the job
    for i in range(4):
        deployer.gate((orders.id, i), nations, i)
        tracker.consumer_finished("job-1", (orders.id, i))
    assert tracker.available("job-1", "nations_edge", 0)


def _decided(sink: LogicalNode) -> tuple[Plan, Any]:
    """``sink`` planned, its build side finished (100 bytes a task) and its join decided:
    the plan and the decision."""
    p = planned(sink)
    tracker = PartitionTracker(RecordingMaster())
    deployer = Deployer(p.graph, "job-1", tracker, 1 << 20, 5.0)
    reports, finished = _finish_build_side(p, tracker, deployer, 100)
    probe = next(r for r in p.regions if p.graph.vertices[r.tasks[0][0]].name.startswith("orders"))
    (change,) = decide_joins(p.graph, probe, finished, reports, "job-1", tracker)
    return p, change


def _switched(sink: LogicalNode) -> Any:
    """The probe producer's vertex after ``sink``'s join switched."""
    p, change = _decided(sink)
    assert change.switched
    return p.graph.vertices[p.graph.edge("right_edge").target]


def _run(query: SqlQuery, inputs: list[pa.Table]) -> pa.Table:
    """``query`` over ``inputs`` (input 0 last, as a switched join's task reads them), on
    DuckDB outside any task."""
    query.open()
    try:
        for index, table in enumerate(inputs[1:], start=1):
            list(query.process(table, index))
            query.end_input(index)
        out = list(query.process(inputs[0], 0))
        query.end_input(0)
        out += query.finish()
    finally:
        query.close()
    return pa.concat_tables(out).sort_by([("customer", "ascending"), ("amount", "ascending")])


@pytest.mark.parametrize("broadcast", [False, True])
def test_a_switched_join_takes_in_the_probe_producers_query(broadcast: bool) -> None:
    """The probe producer's own query and the join become one DuckDB query (no hand-over of
    every probe row between two queries); its answer is the two chained queries'."""
    orders = _switched(joined(stage=True, broadcast=broadcast))
    (query,) = orders.operators
    assert isinstance(query, SqlQuery) and query.name == "stage_3->stage_9"
    assert f"({ORDERS_STAGE})" in query.query and query.streams
    wanted = ["right_edge", "nations_edge"] if broadcast else ["right_edge"]
    assert [(e.name, e.target_input, e.target_operator) for e in orders.inputs] == [
        (name, i, 0) for i, name in enumerate(wanted, start=1)
    ]
    customers = pa.table({"customer": ["a", "b", "c"], "amount": [10.0, 20.0, 30.0]})
    raw = pa.table({"customer": ["a", "b", "b", "d"], "amount": [1.0, 2.0, 3.0, 4.0]})
    sides = [customers, customers] if broadcast else [customers]
    chained = SqlQuery(
        (BROADCAST_TEMPLATE if broadcast else TEMPLATE)
        .replace("__hs_input_0__", "input")
        .replace("__hs_input_1__", "input1")
        .replace("__hs_input_2__", "input2"),
        "join",
        inputs=len(sides) + 1,
    )
    head = SqlQuery(ORDERS_STAGE, "head")
    head.open()
    probe = pa.concat_tables(head.process(raw, 0))
    head.close()
    chained.output_schema([probe.schema, *(t.schema for t in sides)])
    expected = _run(chained, [probe, *sides])
    assert expected.num_rows == 2  # b's two orders over 1, each joined once
    assert _run(query, [raw, *sides]).equals(expected)


@pytest.mark.parametrize("broadcast", [False, True])
@pytest.mark.parametrize("stage", [False, True], ids=["chained", "fused"])
def test_a_switched_join_is_bound_as_its_stage_without_duckdb(
    monkeypatch: pytest.MonkeyPatch, broadcast: bool, stage: bool
) -> None:
    """The moved query takes the join stage's output schema without DuckDB planning it
    between two stages; DuckDB, asked, gives the same binding."""
    p = planned(joined(stage=stage, broadcast=broadcast))
    tracker = PartitionTracker(RecordingMaster())
    deployer = Deployer(p.graph, "job-1", tracker, 1 << 20, 5.0)
    reports, finished = _finish_build_side(p, tracker, deployer, 100)
    probe = next(r for r in p.regions if p.graph.vertices[r.tasks[0][0]].name.startswith("orders"))

    def no_duckdb(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the switch asked DuckDB to bind the moved query")

    monkeypatch.setattr(sql, "bind", no_duckdb)
    (change,) = decide_joins(p.graph, probe, finished, reports, "job-1", tracker)
    monkeypatch.undo()
    assert change.switched
    orders = p.graph.vertices[p.graph.edge("right_edge").target]
    query = orders.operators[-1]
    assert isinstance(query, SqlQuery) and query.binding is not None
    inputs = query.planned_inputs
    assert len(inputs) == query.num_inputs
    assert bind(query.query, inputs[0], query.what, inputs[1:]) == query.binding


def test_bind_as_needs_several_inputs() -> None:
    """With one input, whether a query is per-row takes DuckDB's plan."""
    schema = pa.schema([("customer", pa.string())])
    with pytest.raises(ValueError, match="several inputs"):
        SqlQuery("SELECT * FROM input", "q").bind_as([schema], schema)


#: a variable of the producer's query over its input 1 (``SqlQuery.variables``)
VARIABLES = {"hs_every_row_regions_edge": "(SELECT count(*) FROM input1) > 10"}


def test_a_switched_join_reads_a_multi_input_producers_inputs_under_their_numbers() -> None:
    """A producer query that reads other inputs too (a broadcast join in its stage) keeps
    their numbers, and so its variables over them; the join's build side comes after
    them."""
    b = Builder()
    left, right, extra = b.source("orders", 4), b.source("customers", 2), b.source("regions", 1)
    spec = ExchangeSpec(Partitioner(PartitionerKind.BROADCAST), "regions_edge", "blocking")
    head_sql = "SELECT input.customer, input.amount FROM input JOIN input1 USING (customer)"
    head = LogicalNode(
        next(b.ids),
        "stage_3",
        SqlQuery(head_sql, "stage_3", inputs=2, streams=True, variables=VARIABLES),
        [(left, None), (extra, spec)],
    )
    hint = _hint(TEMPLATE, {"left_edge": "__hs_input_0__", "right_edge": "__hs_input_1__"})
    join = _join_stage(b, head, right, hint, TEMPLATE)
    orders = _switched(b.agg(join, "totals", "by_customer", "blocking", 2))
    (query,) = orders.operators
    assert isinstance(query, SqlQuery) and query.num_inputs == 3 and query.streams
    assert f"({head_sql})" in query.query and "FROM input2) AS r" in query.query
    assert query.variables == VARIABLES
    assert sorted((e.name, e.target_input) for e in orders.inputs) == [
        ("regions_edge", 1),
        ("right_edge", 2),
    ]


def _scheduled(p: Plan, transport: FakeTransport) -> Scheduler:
    scheduler = Scheduler(
        p,
        "job-1",
        PartitionTracker(RecordingMaster()),
        FakePool(list(range(4))),
        transport,
        1 << 20,
        5.0,
        FailoverConfig(max_attempts=2, backoff=0.0),
    )
    scheduler.run()
    return scheduler


def test_the_scheduler_runs_the_build_side_first_then_the_join_in_the_probe_tasks() -> None:
    transport = FakeTransport()
    _scheduled(planned(joined()), transport)
    names = transport.names()
    last_build = max(i for i, n in enumerate(names) if n.startswith("customers"))
    first_probe = min(i for i, n in enumerate(names) if n.startswith("orders"))
    assert last_build < first_probe
    assert not any(n.startswith("stage_9") for n in names)  # the join ran in orders' tasks
    orders = [s.deployment for s in transport.submitted if s.deployment.vertex == "orders"]
    assert all(isinstance(d.operators[-1], SqlQuery) for d in orders)
    assert all(len(d.gates[0].channels) == 2 * 3 for d in orders)  # every build subpartition


def test_a_probe_task_that_fails_after_the_switch_reads_the_build_side_again() -> None:
    def outcome(name: str, attempt: int) -> TaskState:
        return (
            TaskState.FAILED
            if name.startswith("orders[1]") and attempt == 0
            else (TaskState.FINISHED)
        )

    transport = FakeTransport(outcome)
    scheduler = _scheduled(planned(joined()), transport)
    assert scheduler.restarts == 1
    again = [s.deployment for s in transport.submitted if s.deployment.name.startswith("orders[1]")]
    assert [d.attempt for d in again] == [0, 1]
    assert len(again[1].gates[0].channels) == 2 * 3
    assert sum(n.startswith("customers") for n in transport.names()) == 2  # not run again


#: a join stage whose rest needs the join's hash partitioning: a final aggregate on the
#: join key over the join's rows (``SwitchableJoin.split``), optionally a broadcast input
#: read by the rest only
REST = "SELECT j.customer, sum(j.other) AS amount FROM (__JOIN__) AS j GROUP BY j.customer"
REST_WITH_INPUT = (
    "SELECT j.customer, sum(j.other) AS amount FROM (__JOIN__) AS j "
    "WHERE j.customer <> (SELECT min(customer) FROM __hs_input_2__) GROUP BY j.customer"
)


def split_joined(
    rest: str = REST, columns: tuple[str, ...] = ("customer", "amount", "other")
) -> LogicalNode:
    """``orders`` joined with ``customers`` on ``customer`` in stage ``stage_9``, whose rest
    (``rest``, with ``__JOIN__`` where the join's rows go) aggregates them by the key:
    the stage may only split.  ``columns``: what the translation says the join outputs."""
    b = Builder()
    left, right = b.source("orders", 4), b.source("customers", 2)
    tokens = {"left_edge": "__hs_input_0__", "right_edge": "__hs_input_1__"}
    if "__hs_input_2__" in rest:
        tokens["nations_edge"] = "__hs_input_2__"
    hint = _hint(
        rest.replace("__JOIN__", f"SELECT * FROM {SPLIT_TOKEN}"),
        tokens,
        split=TEMPLATE,
        split_columns=columns,
    )
    node = _join_stage(b, left, right, hint, rest.replace("__JOIN__", TEMPLATE))
    return b.agg(node, "totals", "by_customer", "blocking", 2)


def test_a_split_stage_runs_its_join_in_the_probe_tasks_and_keeps_the_probe_edge() -> None:
    """The rest of the stage needs the join's partitioning: only the join moves, and the
    probe edge carries its rows, hashed on the same keys, to the rest."""
    p, change = _decided(split_joined())
    assert change.switched and change.split
    g = p.graph
    assert sorted(v.name for v in g.vertices.values()) == [
        "customers",
        "orders",
        "stage_9",
        "totals",
    ]
    probe, build = g.edge("left_edge"), g.edge("right_edge")
    orders, rest = g.vertices[probe.source], g.vertices[probe.target]
    assert (orders.name, rest.name) == ("orders", "stage_9")
    assert build.target == orders.id and build.reads_whole == 3
    assert probe.partitioner.keys == ("customer",) and probe.columns is None
    assert [(e.name, e.target_input) for e in rest.inputs] == [("left_edge", 0)]
    (join,) = orders.operators
    (query,) = rest.operators
    assert isinstance(join, SqlQuery) and isinstance(query, SqlQuery)
    assert join.name == "stage_9.join" and "FROM input1) AS r" in join.query
    assert query.num_inputs == 1 and "FROM input) AS j" in query.query
    assert query.binding is not None and query.binding.schema.names == ["customer", "amount"]
    assert "carried the joined rows to the rest of the stage" in p.explain()
    assert change.as_dict()["split"] is True


def test_a_split_stage_answers_as_the_whole_stage_did() -> None:
    """The join's query and then the rest's give the whole stage's query's answer."""
    sink = split_joined()
    whole = sink.inputs[0][0].operator
    p, _ = _decided(sink)
    g = p.graph
    probe = g.edge("left_edge")
    (join,) = g.vertices[probe.source].operators
    (rest,) = g.vertices[probe.target].operators
    customers = pa.table({"customer": ["a", "b", "c"], "amount": [10.0, 20.0, 30.0]})
    orders = pa.table({"customer": ["a", "b", "b", "d"], "amount": [1.0, 2.0, 3.0, 4.0]})
    assert isinstance(whole, SqlQuery)
    expected = _run(whole, [orders, customers])
    assert expected.to_pydict() == {"customer": ["a", "b"], "amount": [10.0, 40.0]}
    rows = _run(join, [orders, customers])
    assert _run(rest, [rows]).equals(expected)


def test_a_broadcast_input_the_rest_reads_stays_with_the_rest() -> None:
    p, change = _decided(split_joined(REST_WITH_INPUT))
    assert change.split
    g = p.graph
    nations = g.edge("nations_edge")
    rest = g.vertices[nations.target]
    assert rest.name == "stage_9"
    assert [(e.name, e.target_input) for e in rest.inputs] == [
        ("left_edge", 0),
        ("nations_edge", 1),
    ]
    assert nations.reads_whole is None  # read as the broadcast edge it was
    (query,) = rest.operators
    assert isinstance(query, SqlQuery) and "FROM input1)" in query.query


def test_a_split_whose_join_drops_the_probe_key_stays_shuffled() -> None:
    p = planned(split_joined(columns=("amount", "other")))
    assert p.graph.join_switches == []
    assert any("lack the key columns of 'left_edge'" in n for n in p.graph.join_notes)
