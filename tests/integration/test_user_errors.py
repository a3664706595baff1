"""Mistakes a user can make end in one short sentence naming the thing and the fix,
and a failed or interrupted job stops its tasks and leaves nothing behind."""

from __future__ import annotations

import _thread
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import hybrid_shuffle as hs

from .conftest import assert_no_leaks, wait_until
from .data import orders

CONFIG = {"parallelism": 2, "shuffle": {"buffer_size": "64 KiB", "wait_timeout": 30}}


@pytest.fixture(scope="module")
def session(local_ray: None) -> Iterator[hs.Session]:
    with hs.Session(CONFIG, slots=4) as s:
        yield s


def test_a_batch_whose_column_changes_type_names_the_operator_column_and_both_types(
    session: hs.Session,
) -> None:
    def flip(table: pa.Table) -> pa.Table:  # the second source split gets a string column
        if table.column("k")[0].as_py() >= 100:
            return table.set_column(1, "v", table.column("v").cast(pa.string()))
        return table

    job = session.job("drift")
    table = pa.table({"k": list(range(200)), "v": [1.0] * 200})
    stream = (
        job.from_arrow([table.slice(0, 100), table.slice(100)], name="src", parallelism=1)
        .map_batches(flip, name="flip")
        .rebalance(partitions=1)
    )
    with pytest.raises(hs.SchemaMismatchError) as err:
        stream.collect()
    message = str(err.value)
    assert "'flip'" in message and "'v'" in message
    assert "double" in message and "string" in message
    assert len(message) < 400
    assert_no_leaks(session)


@pytest.mark.parametrize(
    "key_type",
    [pa.list_(pa.int64()), pa.struct([("a", pa.int64())]), pa.map_(pa.string(), pa.int64())],
)
def test_a_list_struct_or_map_key_is_refused_before_anything_runs(
    session: hs.Session, key_type: pa.DataType
) -> None:
    values = {
        pa.types.is_list(key_type): [[1]],
        pa.types.is_struct(key_type): [{"a": 1}],
        pa.types.is_map(key_type): [[("x", 1)]],
    }[True]
    table = pa.table({"k": pa.array(values, key_type), "v": [1.0]})
    job = session.job("nested-key")
    stream = job.from_arrow(table, name="src").key_by("k", edge="by_k").aggregate({"v": "sum"})
    with pytest.raises(hs.PlanError, match=r"key column 'k' is .*cannot be hashed"):
        stream.explain()


def test_a_function_that_cannot_be_pickled_names_the_operator_and_the_object(
    session: hs.Session,
) -> None:
    lock = threading.Lock()

    def locked(table: pa.Table) -> pa.Table:
        with lock:
            return table

    job = session.job("unpicklable")
    with pytest.raises(hs.PlanError) as err:
        job.from_arrow(orders(10), name="src").map_batches(locked, name="guarded")
    message = str(err.value)
    assert message.startswith("map_batches 'guarded': its function cannot be sent")
    assert "lock" in message
    assert len(message) < 400


def test_a_key_that_collides_with_an_aggregate_output_is_a_plan_error(session: hs.Session) -> None:
    table = pa.table({"v_sum": [1, 2], "v": [1.0, 2.0]})
    job = session.job("collide")
    keyed = job.from_arrow(table, name="src").key_by("v_sum")
    with pytest.raises(hs.PlanError, match="key column 'v_sum' has the name of an aggregate"):
        keyed.aggregate({"v": "sum"})  # refused as it is built


def test_ctrl_c_during_collect_cancels_the_job_and_raises_keyboard_interrupt(
    session: hs.Session, tmp_path: Path
) -> None:
    # CPython drops a KeyboardInterrupt that lands while a finalizer runs on the main
    # thread ("Exception ignored in ... __del__": Ray's ObjectRefs die there all the
    # time), as it would drop a real Ctrl-C: the job then simply ends, and the user
    # presses again.  So the interrupt gets up to three jobs to land in.
    # A suite started from a shell's background job inherits SIGINT ignored, and Python
    # then installs no handler, so the terminal's default that a Ctrl-C meets is put
    # in place for the test.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        for attempt in range(3):
            if _interrupt_a_collect(session, tmp_path / f"attempt-{attempt}"):
                break
        else:
            pytest.fail("collect() never raised KeyboardInterrupt in three interrupted jobs")
    finally:
        signal.signal(signal.SIGINT, previous)
    wait_until(
        lambda: not any(session.running_tasks().values()),
        what="the interrupted job's tasks ended",
    )
    assert_no_leaks(session)
    assert session.job("again").from_arrow(orders(100), name="again").to_arrow().num_rows == 100


def _interrupt_a_collect(session: hs.Session, folder: Path) -> bool:
    """Interrupt the main thread once the first batch reached a user function of a
    running job; whether ``collect()`` raised ``KeyboardInterrupt`` (else the job ended)."""
    folder.mkdir()
    started = folder / "first-batch"
    sent = folder / "interrupt-sent"

    def slow(table: pa.Table) -> pa.Table:
        import time

        if not started.exists():
            started.touch()
            # keep the job running until the interrupt was sent, and then for longer than
            # the scheduler's look at its tasks (0.5 s), where the driver's main thread
            # takes the interrupt; less than the 2 s a cancelled job's tasks get to stop.
            # Without it a loaded machine could finish the job before the interrupt landed.
            deadline = time.monotonic() + 30
            while not sent.exists() and time.monotonic() < deadline:
                time.sleep(0.005)
            time.sleep(1.0)
        time.sleep(0.01)
        return table

    job = session.job("interrupted")
    stream = (
        job.from_arrow(orders(400_000), name="orders")
        .map_batches(slow, name="slow")
        .key_by("customer", edge="by_customer", mode="pipelined")
        .aggregate({"cents": "sum"})
    )

    def interrupt() -> None:
        wait_until(started.exists, what="the first batch reached the user function")
        _thread.interrupt_main()
        sent.touch()

    threading.Thread(target=interrupt, daemon=True).start()
    try:
        stream.collect()
    except KeyboardInterrupt:
        return True
    return False


def test_a_failed_job_stops_its_other_tasks_and_prints_no_unhandled_errors(
    session: hs.Session, capfd: pytest.CaptureFixture[str]
) -> None:
    def fail_one(table: pa.Table) -> pa.Table:
        if table.column("order_id")[0].as_py() == 0:
            raise ValueError("bad first batch")
        return table

    job = session.job("fails")
    stream = (
        job.from_arrow(orders(100_000), name="orders", parallelism=4)
        .map_batches(fail_one, name="check")
        .key_by("customer", edge="by_customer", mode="pipelined")
        .aggregate({"cents": "sum"})
    )
    with pytest.raises(hs.JobFailedError, match="ValueError: bad first batch"):
        stream.collect()
    wait_until(
        lambda: not any(session.running_tasks().values()),
        what="the failed job's tasks ended",
    )
    assert_no_leaks(session)
    output = capfd.readouterr()
    assert "Unhandled error" not in output.err + output.out
    assert "JobCancelledError" not in output.err + output.out


def test_running_a_stream_after_its_session_closed_says_the_session_is_closed(
    local_ray: None,
) -> None:
    with hs.Session(CONFIG, slots=1) as closed:
        stream = closed.job("late").from_arrow(orders(10), name="src")
    with pytest.raises(hs.SessionClosedError, match=r"is closed; open a new hs\.Session"):
        stream.collect()
    with pytest.raises(hs.SessionClosedError):
        closed.job("later")


@pytest.mark.parametrize("count", [0, -2])
def test_a_partition_count_or_parallelism_below_one_in_code_is_a_plan_error(
    session: hs.Session, count: int
) -> None:
    job = session.job("counts")
    source = job.from_arrow(orders(10), name="src")
    with pytest.raises(
        hs.PlanError,
        match=rf"key_by: partitions: must be a positive integer or 'auto', got {count}$",
    ):
        source.key_by("customer", partitions=count)
    with pytest.raises(hs.PlanError, match=r"join 'j': partitions: must be a positive"):
        source.join(source, on="customer", partitions=count, name="j")
    with pytest.raises(hs.PlanError, match=r"from_arrow 'again': parallelism: must be a positive"):
        job.from_arrow(orders(10), name="again", parallelism=count)


@pytest.mark.parametrize("mode", ["pipelined", "blocking", "hybrid-selective", "hybrid-full"])
def test_an_empty_result_keeps_the_columns_only_running_could_tell(
    session: hs.Session, mode: str
) -> None:
    def add_column(table: pa.Table) -> pa.Table:  # unknown to the plan
        return table.append_column("flag", pa.array([True] * table.num_rows))

    job = session.job("empty-result")
    result = (
        job.from_arrow(orders(1_000), name="src")
        .map_batches(add_column, name="add")
        .rebalance(mode=mode, partitions=3)
        .filter(lambda t: pa.array([False] * t.num_rows), name="none")
        .to_arrow()
    )
    assert result.num_rows == 0
    assert result.column_names == [*orders(1).column_names, "flag"]
    assert_no_leaks(session)


def test_a_blocking_edge_inside_a_pipelined_region_is_a_plan_error_before_running(
    local_ray: None,
) -> None:
    """Issue 37: a diamond streamed on both sides but blocking into the join is one region
    whose join would wait for its own producer; explain() and collect() both refuse it,
    naming the edge, before any task runs (it used to fail at run time: "can never
    deploy")."""
    edges = {"left_branch": "pipelined", "right_branch": "pipelined"}
    edges |= {"rejoin.left": "pipelined", "rejoin.right": "blocking"}
    config = {**CONFIG, "job": "diamond", "edges": {k: {"mode": v} for k, v in edges.items()}}
    table = pa.table({"k": list(range(100)), "v": list(range(100))})
    with hs.Session(config, slots=2) as diamond_session:
        job = diamond_session.job("diamond")
        src = job.from_arrow(table, name="src")
        left = src.rebalance(edge="left_branch").select("k", "v", name="left")
        right = src.rebalance(edge="right_branch").select("k", name="right")
        joined = left.join(right, on="k", edge="rejoin")
        for plan_or_run in (joined.explain, joined.collect):
            with pytest.raises(hs.PlanError) as err:
                plan_or_run()
            message = str(err.value)
            assert message.startswith("job 'diamond': edge 'rejoin.right' is blocking")
            assert "edges.rejoin.right.mode pipelined or hybrid-selective" in message
        assert_no_leaks(diamond_session)
