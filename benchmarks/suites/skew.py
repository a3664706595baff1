"""Issue 14 (FLIP-44): the sum and count of Zipf 1.2 keys with ``combine=False``, the
default combiner and ``local_key_by``; the wall time and the most rows any one receiver
got, against ``combine=False``; see ``benchmarks/skew.py``."""

from __future__ import annotations

import hybrid_shuffle as hs
from benchmarks import skew, systems
from benchmarks.suite import Context, Outcome, Suite, mark_checked, object_store


def run(ctx: Context) -> Outcome:
    rows = int(ctx.scale * 1e6)
    flush = min(skew.DEFAULT_FLUSH_ROWS, max(rows // 10, 1000))
    with hs.Session(
        systems.session_config(object_store=object_store(ctx.scale)), slots=systems.SLOTS
    ) as session:
        measured, summary = skew.run(session, rows, 8, ctx.runs, flush)
    mark_checked(measured, lambda m: True)
    return Outcome(measured, summary)


SUITE = Suite(
    name="skew",
    description="local aggregation of Zipf keys: combine=False, combiner, local_key_by",
    issue="issue 14",
    scale_unit="million rows",
    default_scale=10,
    tiny_scale=0.2,
    systems=("engine",),
    oracle="pyarrow (sum and count per key)",
    run=run,
)
