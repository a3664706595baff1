"""Issue 15, progress: one bar per vertex while a job runs, on a real session.

The bars' final state is what a run leaves on stderr (tqdm redraws in place with
``\\r``; the last drawing of each bar holds its final counts).  Results are
checked against single-process pyarrow, with and without bars.
"""

from __future__ import annotations

import io
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import hybrid_shuffle as hs
from hybrid_shuffle.cli import main

from .conftest import assert_no_leaks

ROWS = 20_000
CONFIG = {
    "parallelism": 2,
    "shuffle": {"buffer_size": "64 KiB", "memory_budget": "64 MiB"},
    "adaptive": {"target_bytes": "64 KiB", "max_partitions": 2},
}


@pytest.fixture(scope="module")
def session(local_ray: None) -> Iterator[hs.Session]:
    with hs.Session(CONFIG, slots=2) as s:
        yield s


def orders(rows: int = ROWS) -> pa.Table:
    i = np.arange(rows)
    return pa.table({"customer": i % 97, "amount": (i % 100).astype("float64") / 4})


def expected(table: pa.Table) -> pa.Table:
    return (
        table.group_by("customer")
        .aggregate([("amount", "sum"), ("amount", "count")])
        .select(["customer", "amount_sum", "amount_count"])
        .sort_by("customer")
    )


def revenue(
    session: hs.Session, fail: bool = False, partitions: int | str | None = None
) -> hs.Stream:
    def clean(batch: pa.Table) -> pa.Table:
        if fail:
            raise ValueError("bad batch")
        return batch

    job = session.job("progress")
    source = job.from_arrow(orders(), name="orders", parallelism=2)
    return (
        source.map_batches(clean, name="clean")
        .key_by("customer", edge="by_customer", mode="blocking", partitions=partitions)
        .aggregate({"amount": ["sum", "count"]}, name="totals")
    )


def final_counts(text: str) -> dict[str, tuple[int, int]]:
    """Each bar's last drawing: vertex name -> (done, total)."""
    counts = {}
    for line in re.split(r"[\r\n]", text):
        m = re.match(r"^(\S+)\s*: (\d+)/(\d+) \|", line)
        if m:
            counts[m[1]] = (int(m[2]), int(m[3]))
    return counts


def vertices(stream: hs.Stream) -> dict[str, int]:
    plan = stream.job.plan(stream)
    return {v.name: v.parallelism for v in plan.graph.vertices.values()}


def test_collect_with_progress_shows_each_vertexs_final_counts_and_the_same_result(
    session: hs.Session, capsys: pytest.CaptureFixture[str]
) -> None:
    stream = revenue(session)
    names = vertices(stream)
    result = stream.collect(progress=True)
    err = capsys.readouterr().err
    assert final_counts(err) == {name: (n, n) for name, n in names.items()}
    assert f"{result.table.num_rows:,} rows" in err  # the sink's bar: the rows it sent
    assert result.table.sort_by("customer").equals(expected(orders()))
    assert_no_leaks(session)


def test_with_progress_off_nothing_is_printed(
    session: hs.Session, capsys: pytest.CaptureFixture[str]
) -> None:
    table = revenue(session).to_arrow()
    assert capsys.readouterr().err == ""
    assert table.sort_by("customer").equals(expected(orders()))
    assert_no_leaks(session)


def test_an_adaptive_vertex_gets_its_total_when_it_is_decided(session: hs.Session) -> None:
    out = io.StringIO()
    result = revenue(session, partitions="auto").collect(progress=hs.ProgressBars(file=out))
    decided = result.edges["by_customer"].partitions
    assert final_counts(out.getvalue())["totals"] == (decided, decided)
    assert result.table.sort_by("customer").equals(expected(orders()))
    assert_no_leaks(session)


def test_a_failed_job_closes_its_bars(
    session: hs.Session, capsys: pytest.CaptureFixture[str]
) -> None:
    out = io.StringIO()
    bars = hs.ProgressBars(file=out)
    with pytest.raises(hs.JobFailedError, match="bad batch"):
        revenue(session, fail=True).collect(progress=bars)
    assert bars.open_bars == 0 and not bars.disabled
    counts = final_counts(out.getvalue())
    assert counts["totals"][0] < counts["totals"][1]
    assert "failed" in out.getvalue()
    with pytest.raises(hs.JobFailedError):  # progress=True: its own bars, closed too
        revenue(session, fail=True).collect(progress=True)
    assert "failed" in capsys.readouterr().err
    assert_no_leaks(session)


PIPELINE = """
import numpy as np
import pyarrow as pa


def build(session):
    i = np.arange(20_000)
    table = pa.table({"customer": i % 97, "amount": (i % 100).astype("float64") / 4})
    job = session.job("cli-progress")
    return (
        job.from_arrow(table, name="orders", parallelism=2)
        .map_batches(lambda t: t, name="clean")
        .key_by("customer", edge="by_customer")
        .aggregate({"amount": ["sum"]}, name="totals")
    )
"""


@pytest.fixture
def pipeline(tmp_path: Path) -> list[str]:
    (tmp_path / "pipeline.py").write_text(textwrap.dedent(PIPELINE))
    (tmp_path / "job.yaml").write_text("parallelism: 2\nslots: 2\n")
    return [str(tmp_path / "pipeline.py"), "--config", str(tmp_path / "job.yaml")]


def test_run_progress_names_every_vertex_with_its_count(
    session: hs.Session, pipeline: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", *pipeline, "--progress"]) == 0
    out = capsys.readouterr()
    assert final_counts(out.err) == {"orders->clean": (2, 2), "totals": (2, 2)}
    assert "97 rows in" in out.out  # the result is printed as before
    # stderr is no terminal here: without --progress the bars are off, and so with
    # --no-progress
    for flags in ([], ["--no-progress"]):
        assert main(["run", *pipeline, *flags]) == 0
        assert final_counts(capsys.readouterr().err) == {}
    assert_no_leaks(session)
