"""``QueryProfile.render``: the profile as text for a terminal (``--analyze``).

The phases as a table, then the plan as a tree from the sink down (as DuckDB's
``EXPLAIN ANALYZE`` draws it): each edge above the vertex that produces it, a
vertex read by two edges drawn once and named the second time.  Plain ASCII
apart from the tree's lines and arrows, which every UTF-8 terminal shows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hybrid_shuffle._words import plural
from hybrid_shuffle.sizes import format_size

if TYPE_CHECKING:
    from hybrid_shuffle.query_profile import EdgeProfile, QueryProfile, VertexProfile

__all__ = ["render"]


def render(profile: QueryProfile) -> str:
    total = profile.total_seconds
    lines = [f"Profile of job {profile.job}: {total:.3f} s", ""]
    lines.append(f"  {'phase':<10} {'seconds':>8} {'share':>6}")
    for p in profile.phases:
        share = f"{100 * p.seconds / total:5.1f}%" if total > 0 else "     -"
        lines.append(f"  {p.name:<10} {p.seconds:8.3f} {share:>6}  {p.detail}".rstrip())
    lines.append(f"  {'total':<10} {total:8.3f}")
    lines += [
        "",
        "Plan, sink first (CPU: the executors' processes, DuckDB's and readers' threads in)",
    ]
    vertices = {v.name: v for v in profile.vertices}
    edges = {e.name: e for e in profile.edges}
    shown: set[str] = set()
    consumed = {e.source for e in profile.edges}
    roots = [v for v in reversed(profile.vertices) if v.name not in consumed]
    for root in roots or list(reversed(profile.vertices))[:1]:
        _vertex(root, "", "", vertices, edges, shown, lines)
    for v in reversed(profile.vertices):  # in a cycle-free graph, none: for safety
        if v.name not in shown:
            _vertex(v, "", "", vertices, edges, shown, lines)
    if profile.critical_path:
        lines += ["", "Critical path: " + " -> ".join(profile.critical_path)]
    return "\n".join(lines)


def _vertex(
    v: VertexProfile,
    head: str,
    body: str,
    vertices: dict[str, VertexProfile],
    edges: dict[str, EdgeProfile],
    shown: set[str],
    lines: list[str],
) -> None:
    """``v`` on a line starting with ``head``, its inputs under it indented by ``body``."""
    if v.name in shown:
        lines.append(f"{head}{v.name} (shown above)")
        return
    shown.add(v.name)
    lines.append(head + _vertex_text(v))
    lines.append(body + "   " + _vertex_detail(v))
    known = [e for e in v.inputs if e in edges]
    for i, name in enumerate(known):
        last = i == len(known) - 1
        e = edges[name]
        lines.append(f"{body}{'└─' if last else '├─'} {_edge_text(e)}")
        indent = body + ("   " if last else "│  ")
        source = vertices.get(e.source)
        if source is None:
            lines.append(f"{indent}{e.source}")
        else:
            _vertex(source, indent, indent, vertices, edges, shown, lines)


def _vertex_text(v: VertexProfile) -> str:
    region = f" [{v.region}]" if v.region else ""
    hop = f"; hop {v.hop_seconds:.3f} s" if v.hop_seconds >= 0.0005 else ""
    critical = (
        f", critical {v.critical_seconds:.3f} s ({100 * v.critical_share:.0f}%{hop})"
        if v.critical_seconds
        else ""
    )
    return (
        f"{v.name}{region}: {v.subtasks} {plural(v.subtasks, 'subtask')}, "
        f"wall {v.wall_seconds:.3f} s, CPU {v.cpu_seconds:.3f} s{critical}"
    )


def _vertex_detail(v: VertexProfile) -> str:
    parts = [f"rows {v.rows_in:,} in -> {v.rows_out:,} out"]
    if v.memory:
        parts.append(f"peak {_size(v.peak_memory_bytes)} of {_size(v.memory)}")
    if v.spilled_bytes:
        parts.append(f"spilled {_size(v.spilled_bytes)}")
    return ", ".join(parts)


def _edge_text(e: EdgeProfile) -> str:
    extra = f", spilled {_size(e.spilled_bytes)}" if e.spilled_bytes else ""
    if e.blocked_seconds >= 0.0005:
        extra += f", blocked {e.blocked_seconds:.3f} s"
    return (
        f"{e.name} ({e.mode}, {e.partitioner}): {e.rows:,} {plural(e.rows, 'row')}, "
        f"{_size(e.bytes)}, {e.partitions} {plural(e.partitions, 'partition')}{extra}"
    )


def _size(n: int) -> str:
    return format_size(n) if n > 0 else "0 B"
