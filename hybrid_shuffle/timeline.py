"""A finished job's timeline: a PNG chart (matplotlib) or a Chrome trace (Perfetto).

Why: the ``TaskReport`` fields say where time went, but only a picture shows which
executor sat idle, which vertices overlapped (pipelined) or ran one after another
(blocking), and where a producer waited on its consumers.  ``JobResult.timeline``
calls ``write_timeline``; everything here is plain Python over the reports, so the
layout helpers are unit-tested without a cluster.

What is drawn, per task (one ``TaskSpan``), in the executor's lane:

- a bar from ``started_at`` to ``finished_at``, coloured by vertex; tasks that run
  at the same time on one executor (a pipelined region's slot sharing) get
  sub-lanes (``assign_lanes``), which are also the Chrome trace's ``tid``;
- time blocked on backpressure (``WriteMetrics.blocked_seconds`` of its writes) as a
  hatched segment at the *end* of the bar: the metrics keep the sum, not when the
  producer waited, and a producer waits most once its consumers fall behind;
- a marker on bars that spilled (bytes its writes or its operators sent to disk);
- in the Chrome trace's ``args``, the task's ``memory`` (the ``operators.memory`` in
  force, as ``explain()`` and ``VertexMetrics.memory`` show it) and its operators'
  ``peak_memory_bytes``;
- a dashed line where each region (``explain``'s ``R0``, ``R1``...) starts: its
  first task's start.

Times are relative to the first task's start.  They are the executors' wall clocks
(``time.time()``): on a multi-node cluster, clock skew between nodes shifts lanes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hybrid_shuffle._words import plural
from hybrid_shuffle.errors import ConfigError, HybridShuffleError
from hybrid_shuffle.operators.context import task_memory, task_peak_memory
from hybrid_shuffle.runtime.task import TaskReport

__all__ = [
    "TaskSpan",
    "assign_lanes",
    "check_timeline_path",
    "chrome_trace",
    "draw_png",
    "figure_inches",
    "region_starts",
    "task_spans",
    "write_timeline",
]

#: the suffixes ``write_timeline`` knows, and what each writes
SUFFIXES = {".png": "a chart", ".json": "a Chrome trace"}
#: the chart's resolution: 10 inches wide is 1,000 pixels
DPI = 100


@dataclass(frozen=True)
class TaskSpan:
    """One task attempt as drawn: seconds from the job's first task start."""

    name: str
    vertex: str
    subtask: int
    attempt: int
    executor: int
    #: the task's region as ``explain`` labels it (``R0``), "" if unknown
    region: str
    start: float
    end: float
    rows_in: int
    rows_out: int
    #: bytes its writes moved (0 for the sink)
    bytes: int
    #: bytes its writes and its operators spilled to disk
    spilled_bytes: int
    #: its writes' time waiting for credit, at most the task's duration
    blocked_seconds: float
    cpu_seconds: float
    #: ``operators.memory`` in force for its stateful operators (what its DuckDB's
    #: ``memory_limit`` was; 0 with none), and the most they held at once
    memory: int = 0
    peak_memory_bytes: int = 0

    @property
    def duration(self) -> float:
        return self.end - self.start


def check_timeline_path(path: str | Path) -> Path:
    """``path`` as a ``Path`` if its suffix is one ``write_timeline`` knows; else a
    ``ConfigError`` that says which to use (checked before a job runs, by the CLI)."""
    p = Path(path)
    if p.suffix.lower() not in SUFFIXES:
        raise ConfigError(
            f"timeline: '{p}' is neither a .png nor a .json path; give a .png path for a "
            "chart or a .json path for a Chrome trace (to open in Perfetto)"
        )
    return p


def task_spans(
    tasks: Sequence[TaskReport], regions: Mapping[str, str] | None = None
) -> list[TaskSpan]:
    """The reports of tasks that ran, as spans relative to the first start, sorted by
    start.  ``regions`` maps a vertex name to its region label."""
    ran = [t for t in tasks if t.started_at > 0]
    if not ran:
        return []
    origin = min(t.started_at for t in ran)
    spans = []
    for t in ran:
        start = t.started_at - origin
        end = max(t.finished_at - origin, start)
        blocked = sum(w.blocked_seconds for w in t.writes)
        spans.append(
            TaskSpan(
                name=t.name,
                vertex=t.vertex,
                subtask=t.subtask,
                attempt=t.attempt,
                executor=t.executor_index,
                region=(regions or {}).get(t.vertex, ""),
                start=start,
                end=end,
                rows_in=t.rows_in,
                rows_out=t.rows_out,
                bytes=sum(w.bytes for w in t.writes),
                spilled_bytes=sum(w.spilled_bytes for w in t.writes)
                + sum(op.spilled_bytes for op in t.operators),
                blocked_seconds=min(max(blocked, 0.0), end - start),
                cpu_seconds=t.cpu_seconds,
                memory=task_memory(t.operators),
                peak_memory_bytes=task_peak_memory(t.operators),
            )
        )
    return sorted(spans, key=lambda s: (s.start, s.executor, s.name))


def assign_lanes(spans: Sequence[TaskSpan]) -> tuple[list[int], dict[int, int]]:
    """Per span (in ``spans``' order), its sub-lane in its executor; and per executor,
    how many sub-lanes it needs (the most tasks it ran at once).  Greedy interval
    partitioning: a task takes the lowest lane free at its start, which needs the
    fewest lanes there are."""
    lanes = [0] * len(spans)
    ends: dict[int, list[float]] = defaultdict(list)  # executor -> lane -> busy until
    for i in sorted(range(len(spans)), key=lambda i: (spans[i].start, spans[i].end)):
        s = spans[i]
        busy = ends[s.executor]
        free = next((lane for lane, until in enumerate(busy) if until <= s.start), None)
        if free is None:
            free = len(busy)
            busy.append(s.end)
        else:
            busy[free] = s.end
        lanes[i] = free
    return lanes, {e: len(busy) for e, busy in ends.items()}


def region_starts(spans: Sequence[TaskSpan]) -> dict[str, float]:
    """Region label -> when its first task started, in order of start."""
    starts: dict[str, float] = {}
    for s in spans:
        if s.region and (s.region not in starts or s.start < starts[s.region]):
            starts[s.region] = s.start
    return dict(sorted(starts.items(), key=lambda kv: kv[1]))


def _us(seconds: float) -> int:
    return round(seconds * 1e6)


def chrome_trace(spans: Sequence[TaskSpan]) -> dict[str, Any]:
    """The Trace Event Format: one complete (``"X"``) event per task, ``pid`` its
    executor and ``tid`` its sub-lane, ``ts``/``dur`` in microseconds, the metrics in
    ``args``; executors and lanes named by metadata events, region starts as global
    instant events."""
    lanes, counts = assign_lanes(spans)
    events: list[dict[str, Any]] = []
    for executor, n in sorted(counts.items()):
        events.append(
            {
                "name": "process_name",
                "ph": "M",
                "pid": executor,
                "tid": 0,
                "args": {"name": f"executor {executor}"},
            }
        )
        for lane in range(n):
            events.append(
                {
                    "name": "thread_name",
                    "ph": "M",
                    "pid": executor,
                    "tid": lane,
                    "args": {"name": f"lane {lane}"},
                }
            )
    for s, lane in zip(spans, lanes, strict=True):
        events.append(
            {
                "name": s.name,
                "cat": s.vertex,
                "ph": "X",
                "ts": _us(s.start),
                "dur": max(_us(s.duration), 1),
                "pid": s.executor,
                "tid": lane,
                "args": {
                    "vertex": s.vertex,
                    "subtask": s.subtask,
                    "attempt": s.attempt,
                    "region": s.region,
                    "rows_in": s.rows_in,
                    "rows_out": s.rows_out,
                    "bytes": s.bytes,
                    "spilled_bytes": s.spilled_bytes,
                    "blocked_seconds": round(s.blocked_seconds, 6),
                    "cpu_seconds": round(s.cpu_seconds, 6),
                    "memory": s.memory,
                    "peak_memory_bytes": s.peak_memory_bytes,
                },
            }
        )
    for region, start in region_starts(spans).items():
        events.append(
            {
                "name": f"region {region} starts",
                "ph": "i",
                "s": "g",
                "ts": _us(start),
                "pid": 0,
                "tid": 0,
            }
        )
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_timeline(
    tasks: Sequence[TaskReport],
    path: str | Path,
    regions: Mapping[str, str] | None = None,
    vertex_order: Sequence[str] = (),
) -> Path:
    """Write the timeline of ``tasks`` to ``path``: a PNG chart for ``.png``, a Chrome
    trace for ``.json`` (any other suffix: ``ConfigError``).  ``regions`` maps vertex
    names to region labels, ``vertex_order`` fixes the colours' order (the plan's).
    Returns the path written."""
    p = check_timeline_path(path)
    spans = task_spans(tasks, regions)
    if p.suffix.lower() == ".json":
        import json

        p.write_text(json.dumps(chrome_trace(spans)))
    else:
        draw_png(spans, p, vertex_order)
    return p


def draw_png(spans: Sequence[TaskSpan], path: Path, vertex_order: Sequence[str] = ()) -> None:
    """The chart: a lane per executor (sub-lanes for tasks at the same time), a bar per
    task coloured by vertex, blocked time hatched at the bar's end, a marker where a
    task spilled, a dashed line where a region starts.  Draws on its own ``Figure``
    (no pyplot): no global state, no GUI backend, the same in a script, a test or
    Jupyter."""
    try:
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
        from matplotlib.transforms import blended_transform_factory
    except ImportError as e:
        raise HybridShuffleError(
            "timeline: a .png chart needs matplotlib, which is not installed; pip install "
            "'hybrid-shuffle[timeline]', or give a .json path for a Chrome trace"
        ) from e
    lanes, counts = assign_lanes(spans)
    executors = sorted(counts)
    vertices = [v for v in vertex_order if any(s.vertex == v for s in spans)]
    vertices += sorted({s.vertex for s in spans} - set(vertices))
    palette = _palette(len(vertices))
    colour = dict(zip(vertices, palette, strict=True))
    # executor e's band is [e_base, e_base + 1): sub-lane k of n is a 1/n slice of it
    base = {e: float(n) for n, e in enumerate(reversed(executors))}

    fig = Figure(
        figsize=figure_inches(len(executors), len(vertices)), dpi=DPI, layout="constrained"
    )
    ax = fig.add_subplot()
    for s, lane in zip(spans, lanes, strict=True):
        n = counts[s.executor]
        height = 0.9 / n
        y = base[s.executor] + 0.05 + (n - 1 - lane) * height + height / 2
        ax.barh(
            y,
            max(s.duration, 1e-4),
            left=s.start,
            height=height * 0.9,
            color=colour[s.vertex],
            edgecolor="white",
            linewidth=0.4,
        )
        if s.blocked_seconds > 0:
            ax.barh(
                y,
                s.blocked_seconds,
                left=s.end - s.blocked_seconds,
                height=height * 0.9,
                fill=False,
                hatch="////",
                edgecolor="black",
                linewidth=0,
            )
        if s.spilled_bytes > 0:
            ax.plot(
                [s.start + s.duration / 2],
                [y],
                marker="v",
                color="crimson",
                markeredgecolor="white",
                markersize=7,
                linestyle="none",
            )
    for n, _ in enumerate(executors[1:], start=1):
        ax.axhline(n, color="lightgrey", linewidth=0.6)
    top = blended_transform_factory(ax.transData, ax.transAxes)
    for region, start in region_starts(spans).items():
        ax.axvline(start, color="dimgrey", linestyle="--", linewidth=0.8)
        ax.text(start, 1.005, region, transform=top, fontsize=8, ha="center", va="bottom")
    ax.set_yticks([base[e] + 0.5 for e in executors], [f"executor {e}" for e in executors])
    ax.set_ylim(0, max(len(executors), 1))
    ax.set_xlim(0, max((s.end for s in spans), default=1.0) * 1.02 or 1.0)
    ax.set_xlabel("seconds since the job's first task started")
    tasks = f"{len(spans)} {plural(len(spans), 'task')}"
    on = f"{len(executors)} {plural(len(executors), 'executor')}"
    ax.set_title(f"{tasks} on {on}", fontsize=10, pad=14)
    handles: list[Any] = [Patch(color=colour[v], label=v) for v in vertices]
    handles += [
        Patch(
            fill=False,
            hatch="////",
            edgecolor="black",
            linewidth=0,
            label="blocked on backpressure\n(its total, at the bar's end)",
        ),
        Line2D([], [], marker="v", color="crimson", linestyle="none", label="spilled"),
        Line2D([], [], color="dimgrey", linestyle="--", linewidth=0.8, label="region starts"),
    ]
    ax.legend(
        handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False
    )
    fig.savefig(path, format="png")


def figure_inches(executors: int, vertices: int) -> tuple[float, float]:
    """The chart's size: 10 inches wide, a little over half an inch per executor lane,
    and room for a legend entry per vertex."""
    return 10.0, round(1.6 + 0.55 * max(executors, 1) + 0.1 * vertices, 2)


def _palette(n: int) -> list[Any]:
    """``n`` distinct colours: tab10, then tab20 for more vertices, cycling beyond."""
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    size = 10 if n <= 10 else 20
    return [cmap(i % size) for i in range(n)]
