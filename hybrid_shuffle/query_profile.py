"""Where a query's time went: ``JobResult.profile()`` and ``hybrid-shuffle sql --analyze``.

A ``QueryProfile`` is what DuckDB's ``EXPLAIN ANALYZE`` and Spark's SQL tab show,
as data: the phases outside the tasks, then every vertex and edge with what it did.

**Phases** (seconds; they add up to ``total_seconds``): for a job that came from
Spark (``Session.sql`` / ``from_dataframe``), ``spark`` (Spark's parsing, analysis
and physical planning, adaptive execution off) and ``translate`` (the Spark plan
made into the job); then the run (``Job.run``): ``plan`` (the engine's job
planning), ``sources`` (lazy sources fetched: Spark -> Arrow), ``deploy`` (from
the runtime's start to the first task's start: waiting for the previous job's
releases, registering partitions, shipping the tasks), ``tasks`` (from the first
task's start to the last one's end), ``hand-back`` (from the last task's end until
the result is in the caller's hands: the scheduler hearing of it, the result read
and copied out of the object store, the partitions released), ``other`` (what is
left: executors healed, caches checked, a run repeated for a lost cache).  The
time between ``Session.sql`` returning and ``collect()`` being called is the
caller's and counted nowhere.  Task times are the executors' clocks, the rest the
driver's: on one machine they are one clock.

**Vertices**: subtasks, wall (first subtask's start to last one's end), CPU,
rows in and out, operators' spills and peak memory, and the vertex's share of the
critical path.  ``cpu_seconds`` is the executor processes' CPU time over each
subtask (``runtime.process_cpu``: DuckDB's and pyarrow's reader threads
included; a subtask that shared its executor with others gets a share of it in
proportion to its thread's CPU; where no executor reported that figure, the
thread figure); ``thread_cpu_seconds`` is what the task's thread and its
streamed DuckDB queries' threads counted alone.
The critical path is walked back from the vertex that finished last: each vertex
on it adds the time from its latest-finishing input's end (its own first start,
for a vertex with no input) to its own end, hops between stages included;
``critical_seconds`` is that, ``critical_share`` it over the ``tasks`` phase.

**Edges**: mode, partitioner, rows, bytes, spilled bytes, consumer partitions, the
producers' time blocked on backpressure and a partition's peak memory.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hybrid_shuffle.plan.planner import Plan
    from hybrid_shuffle.result import JobResult

__all__ = ["EdgeProfile", "Phase", "QueryProfile", "RunTimes", "VertexProfile", "run_times"]


@dataclass(frozen=True)
class RunTimes:
    """What a run's task reports do not hold: the driver's time points (epoch seconds)
    and durations, and the graph's shape.  ``Job.run`` records it (``run_times``) into
    ``JobResult.times``; ``JobResult.profile()`` reads it."""

    job: str
    #: ``Job.run`` started and ended
    started_at: float
    finished_at: float
    #: the engine's planning (``Job.plan`` calls) and the lazy sources' fetches in it
    planning_seconds: float
    sources_seconds: float
    #: ``runtime.execution.execute``'s points: entered, tasks all done (the scheduler
    #: returned), result read, returned (0.0: not reached)
    executed_at: float = 0.0
    tasks_done_at: float = 0.0
    result_read_at: float = 0.0
    returned_at: float = 0.0
    #: a job from Spark: ``Session.sql``/``from_dataframe`` in all, Spark's physical
    #: planning and the translation in it (None: not from Spark)
    spark_total_seconds: float | None = None
    spark_plan_seconds: float = 0.0
    translate_seconds: float = 0.0
    #: edge name -> (producer vertex, consumer vertex)
    edge_ends: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)


def run_times(
    plan: Plan,
    started_at: float,
    planning_seconds: float,
    sources_seconds: float,
    execute_times: dict[str, float],
    spark: Any = None,
    spark_total_seconds: float | None = None,
) -> RunTimes:
    """The ``RunTimes`` of a run that ends now; ``spark`` is the job's ``SparkPlanInfo``."""
    g = plan.graph
    return RunTimes(
        job=g.job_name,
        started_at=started_at,
        finished_at=time.time(),
        planning_seconds=planning_seconds,
        sources_seconds=sources_seconds,
        executed_at=execute_times.get("executed", 0.0),
        tasks_done_at=execute_times.get("tasks_done", 0.0),
        result_read_at=execute_times.get("result_read", 0.0),
        returned_at=execute_times.get("returned", 0.0),
        spark_total_seconds=spark_total_seconds if spark is not None else None,
        spark_plan_seconds=float(getattr(spark, "spark_seconds", 0.0)),
        translate_seconds=float(getattr(spark, "translate_seconds", 0.0)),
        edge_ends={
            str(e.name): (g.vertices[e.source].name, g.vertices[e.target].name) for e in g.edges
        },
    )


@dataclass(frozen=True)
class Phase:
    name: str
    seconds: float
    #: what the phase covers, for the rendering
    detail: str = ""


@dataclass(frozen=True)
class VertexProfile:
    name: str
    #: its pipelined region as ``explain`` labels it (``R0``...)
    region: str
    subtasks: int
    wall_seconds: float
    #: the executor processes' CPU over its subtasks (see the module docstring)
    cpu_seconds: float
    #: the tasks' threads and their streamed DuckDB queries' threads only
    thread_cpu_seconds: float
    rows_in: int
    rows_out: int
    spilled_bytes: int
    peak_memory_bytes: int
    #: ``operators.memory`` each subtask was given (0: no stateful operator)
    memory: int
    critical_seconds: float
    critical_share: float
    #: of ``critical_seconds``, the time from its latest input's end to its own first
    #: start: the hop (the scheduler starting it once its input was done)
    hop_seconds: float
    #: the edges it reads, in the plan's order
    inputs: tuple[str, ...] = ()


@dataclass(frozen=True)
class EdgeProfile:
    name: str
    source: str
    target: str
    mode: str
    partitioner: str
    rows: int
    bytes: int
    spilled_bytes: int
    partitions: int
    #: the producers' time waiting for credit (pipelined backpressure), summed
    blocked_seconds: float = 0.0
    #: most bytes one of its partitions held in memory at once
    peak_memory_bytes: int = 0


@dataclass(frozen=True)
class QueryProfile:
    """See the module docstring; ``str()`` is ``render()``."""

    job: str
    total_seconds: float
    phases: tuple[Phase, ...]
    #: producers first, the sink last
    vertices: tuple[VertexProfile, ...]
    edges: tuple[EdgeProfile, ...]
    #: the vertices on the critical path, first to last
    critical_path: tuple[str, ...] = ()

    def phase(self, name: str) -> float:
        """The seconds of phase ``name`` (0.0 when the run had no such phase)."""
        return next((p.seconds for p in self.phases if p.name == name), 0.0)

    def vertex(self, name: str) -> VertexProfile:
        return next(v for v in self.vertices if v.name == name)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-ready)."""
        return dataclasses.asdict(self)

    def render(self) -> str:
        """The text ``--analyze`` prints: the phases, then the plan as a tree from the sink
        down, each edge above the vertex that produces it."""
        from hybrid_shuffle._profile_text import render

        return render(self)

    def __str__(self) -> str:
        return self.render()


def build_profile(result: JobResult) -> QueryProfile:
    """The profile of a finished run (``JobResult.profile``)."""
    times = result.times
    if times is None:  # a result made by hand: what its reports say, no phases
        times = RunTimes("job", 0.0, result.wall_seconds, 0.0, result.sources_seconds)
    starts = [t.started_at for t in result.tasks if t.started_at]
    ends = [t.finished_at for t in result.tasks if t.finished_at]
    first, last = (min(starts), max(ends)) if starts and ends else (0.0, 0.0)
    tasks = max(last - first, 0.0)
    inputs: dict[str, list[str]] = {v: [] for v in result.vertices}
    for name, (_, target) in times.edge_ends.items():
        inputs.setdefault(target, []).append(name)
    path, critical, hops = _critical_path(result, times.edge_ends, inputs)
    vertices = tuple(
        VertexProfile(
            name=v.name,
            region=result.regions.get(v.name, ""),
            subtasks=v.subtasks,
            wall_seconds=v.wall_seconds,
            cpu_seconds=v.process_cpu_seconds or v.cpu_seconds,
            thread_cpu_seconds=v.cpu_seconds,
            rows_in=v.rows_in,
            rows_out=v.rows_out,
            spilled_bytes=v.spilled_bytes,
            peak_memory_bytes=v.peak_memory_bytes,
            memory=v.memory,
            critical_seconds=critical.get(v.name, 0.0),
            critical_share=critical.get(v.name, 0.0) / tasks if tasks else 0.0,
            hop_seconds=hops.get(v.name, 0.0),
            inputs=tuple(inputs.get(v.name, ())),
        )
        for v in result.vertices.values()
    )
    edges = tuple(
        EdgeProfile(
            name=e.name,
            source=times.edge_ends.get(e.name, ("", ""))[0],
            target=times.edge_ends.get(e.name, ("", ""))[1],
            mode=e.mode,
            partitioner=e.partitioner,
            rows=e.rows,
            bytes=e.bytes,
            spilled_bytes=e.spilled_bytes,
            partitions=e.partitions,
            blocked_seconds=e.blocked_seconds,
            peak_memory_bytes=e.peak_memory_bytes,
        )
        for e in result.edges.values()
    )
    run = result.wall_seconds
    spark = times.spark_total_seconds
    total = run + (spark or 0.0)
    return QueryProfile(
        times.job,
        total,
        _phases(times, total, first, last),
        vertices,
        edges,
        tuple(path),
    )


def _phases(times: RunTimes, total: float, first: float, last: float) -> tuple[Phase, ...]:
    phases: list[Phase] = []
    if times.spark_total_seconds is not None:
        front = times.spark_total_seconds
        spark = max(front - times.translate_seconds, 0.0)
        phases.append(
            Phase(
                "spark",
                spark,
                f"parse, analyse, plan (physical planning {times.spark_plan_seconds:.3f} s)",
            )
        )
        phases.append(Phase("translate", min(times.translate_seconds, front), "plan -> job"))
    phases.append(Phase("plan", times.planning_seconds, "the engine's job planning"))
    phases.append(Phase("sources", times.sources_seconds, "lazy sources fetched"))
    if times.executed_at and first:
        reading = max(times.result_read_at - times.tasks_done_at, 0.0)
        releasing = max(times.returned_at - times.result_read_at, 0.0)
        # the tasks' span (executors' clocks) within the driver's execute..finish, so the
        # three phases add up to that interval exactly
        end = max(times.finished_at, times.executed_at)
        first = min(max(first, times.executed_at), end)
        last = min(max(last, first), end)
        phases += [
            Phase("deploy", first - times.executed_at, "to the first task's start"),
            Phase("tasks", last - first, "first task's start to last task's end"),
            Phase(
                "hand-back",
                end - last,
                f"to the result in hand (read {reading:.3f} s, released {releasing:.3f} s)",
            ),
        ]
    excess = sum(p.seconds for p in phases) - total
    if excess > 0:  # the driver's two clocks (wall, perf_counter) part by microseconds
        big = max(range(len(phases)), key=lambda i: phases[i].seconds)
        phases[big] = dataclasses.replace(
            phases[big], seconds=max(phases[big].seconds - excess, 0.0)
        )
    counted = sum(p.seconds for p in phases)
    phases.append(Phase("other", max(total - counted, 0.0), "heal, cache checks, retries"))
    return tuple(phases)


def _critical_path(
    result: JobResult, edge_ends: dict[str, tuple[str, str]], inputs: dict[str, list[str]]
) -> tuple[list[str], dict[str, float], dict[str, float]]:
    """The vertices on the critical path (first to last), the seconds each adds, and the
    hop before each."""
    spans: dict[str, tuple[float, float]] = {}
    for t in result.tasks:
        if t.started_at and t.finished_at:
            s, f = spans.get(t.vertex, (t.started_at, t.finished_at))
            spans[t.vertex] = (min(s, t.started_at), max(f, t.finished_at))
    if not spans:
        return [], {}, {}
    vertex = max(spans, key=lambda v: spans[v][1])
    path: list[str] = []
    critical: dict[str, float] = {}
    hops: dict[str, float] = {}
    while vertex not in critical:
        start, end = spans[vertex]
        producers = [edge_ends[e][0] for e in inputs.get(vertex, ()) if edge_ends[e][0] in spans]
        previous = max(producers, key=lambda v: spans[v][1]) if producers else None
        since = spans[previous][1] if previous is not None else start
        critical[vertex] = max(end - since, 0.0)
        hops[vertex] = max(min(start, end) - since, 0.0)
        path.append(vertex)
        if previous is None:
            break
        vertex = previous
    return path[::-1], critical, hops
