"""``LocalKeyedStream``: FLIP-44's local keyed streams, and how their partials merge.

``stream.local_key_by(keys)`` partitions by key *inside each subtask*, with no
exchange: its operators (``aggregate``, ``top_n``) are chained into the tasks
of their input and keep per-key state local to the subtask
(``operators.local_aggregate``).  Their output is partials, which merge after a
real exchange on the same keys::

    local = orders.local_key_by("customer").aggregate({"amount": "sum"}, flush_rows=100_000)
    totals = local.key_by("customer").aggregate({"amount": "sum"})   # or .aggregate()

gives exactly ``orders.key_by("customer").aggregate({"amount": "sum"})`` (up to
float rounding of sums and means).  The merging aggregate may repeat the local
spec, leave it out (it then uses the local one), or ask for any part of it
whose partials the local stage computed (a ``mean`` merges through its
partial float64 sum and count, never as a mean of means).  ``top_n`` merges
with ``key_by(keys).top_n(n)``: the same ``by`` and ``ascending`` (or left
out) and any ``n`` up to the local one.  A merge that cannot be exact (other
keys, a partial the local stage does not have, the other kind of reduction) is
a ``PlanError`` saying what to write instead.  After a local stage the
exchange carries its partials as they are: no map-side combiner is added.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from hybrid_shuffle._words import plural
from hybrid_shuffle.api._validate import positive_count
from hybrid_shuffle.errors import PlanError
from hybrid_shuffle.operators.aggregate import HashAggregate
from hybrid_shuffle.operators.aggregation import Aggregation
from hybrid_shuffle.operators.local_aggregate import LocalAggregate
from hybrid_shuffle.operators.top_n import TopN

if TYPE_CHECKING:
    from hybrid_shuffle.api.stream import Stream

__all__ = [
    "LocalKeyedStream",
    "by_columns",
    "local_stage",
    "merge_aggregate",
    "merge_top_n",
]


class LocalKeyedStream:
    """A stream keyed by ``keys`` within each subtask (FLIP-44); no exchange happens.

    Its operators run in the tasks of the stream they read (same parallelism,
    same slot sharing group: the planner refuses anything else) and emit
    partials on each flush: after ``flush_rows`` input rows (``None``: no row
    limit), when their partials fill half their share of ``operators.memory``,
    and at end of input.  See ``operators.local_aggregate`` for the partials'
    columns, which are what ``collect()`` of a local stage returns.
    """

    def __init__(self, stream: Stream, keys: list[str]) -> None:
        self._stream = stream
        self.keys = keys

    def aggregate(
        self,
        spec: Mapping[str, str | Sequence[str]],
        name: str | None = None,
        flush_rows: int | None = None,
    ) -> Stream:
        """Partials of ``spec`` (sum, count, min, max, mean, as ``KeyedStream.aggregate``)
        per key of each subtask; merge them with ``key_by(keys).aggregate()``."""
        node_name = name or f"local_aggregate_{next(self._stream.job._ids)}"
        flush = positive_count(flush_rows, f"local aggregate '{node_name}': flush_rows")
        op = LocalAggregate(Aggregation(self.keys, spec, node_name), flush)
        return self._local("local_aggregate", node_name, op)

    def top_n(
        self,
        n: int,
        by: str | Sequence[str],
        name: str | None = None,
        flush_rows: int | None = None,
        ascending: bool = False,
    ) -> Stream:
        """Each subtask's ``n`` rows with the largest ``by`` per key (``ascending=True``:
        the smallest), ties broken on the other columns (``operators.top_n``); merge
        them with ``key_by(keys).top_n(n)``."""
        node_name = name or f"local_top_n_{next(self._stream.job._ids)}"
        what = f"top_n '{node_name}'"
        count = positive_count(n, f"{what}: n")
        assert count is not None
        flush = positive_count(flush_rows, f"{what}: flush_rows")
        reduction = TopN(self.keys, count, by_columns(by, what), node_name, _bool(ascending, what))
        return self._local("local_top_n", node_name, LocalAggregate(reduction, flush))

    def _local(self, kind: str, name: str, op: LocalAggregate) -> Stream:
        stream = self._stream._chain(kind, name, lambda _: op)
        stream.node.local = True
        return stream


def local_stage(stream: Stream) -> LocalAggregate | None:
    """The local stage ``stream`` is the output of, if it is one."""
    op = stream.node.operator
    return op if isinstance(op, LocalAggregate) else None


def by_columns(by: object, what: str) -> list[str]:
    """``by=``: a column name or a non-empty sequence of them."""
    columns = [by] if isinstance(by, str) else list(by) if isinstance(by, (list, tuple)) else None
    if not columns or not all(isinstance(c, str) and c for c in columns):
        raise PlanError(f"{what}: by= must name the column(s) to rank by, got {by!r}")
    return columns


def _bool(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise PlanError(f"{what}: ascending= must be True or False, got {value!r}")
    return value


def _key_by(keys: Sequence[str]) -> str:
    return f"key_by({', '.join(repr(k) for k in keys)})"


def _same_keys(local: LocalAggregate, keys: Sequence[str], what: str) -> None:
    if set(keys) != set(local.keys) or len(keys) != len(local.keys):
        raise PlanError(
            f"{what} merges the partials of '{local.name}', which are per key "
            f"{', '.join(local.keys)}; write {_key_by(local.keys)} before it instead of "
            f"{_key_by(keys)}"
        )


def merge_aggregate(
    local: LocalAggregate,
    keys: Sequence[str],
    spec: Mapping[str, str | Sequence[str]] | None,
    name: str,
) -> HashAggregate:
    """The aggregate that merges ``local``'s partials after ``key_by(keys)``."""
    what = f"aggregate '{name}'"
    partials = local.reduction
    if not isinstance(partials, Aggregation):
        raise PlanError(
            f"{what}: its input is the local top_n '{local.name}', whose rows are "
            "candidates, not partials of an aggregate; merge it with key_by(...).top_n(n)"
        )
    _same_keys(local, keys, what)
    if spec is None:
        spec = {}
        for column, fn in partials.outputs:
            fns = spec.setdefault(column, [])
            assert isinstance(fns, list)
            fns.append(fn)
    final = Aggregation(keys, spec, name)
    missing = [f"{c}_{p}" for c, p in final.partials if (c, p) not in partials.partials]
    if missing:
        raise PlanError(
            f"{what} needs the partial '{missing[0]}', which the local aggregate "
            f"'{local.name}' it merges does not compute; give the local aggregate the same "
            "spec as this one, or leave the spec out here"
        )
    return HashAggregate.of(final, "merge")


def merge_top_n(
    local: LocalAggregate,
    keys: Sequence[str],
    n: int,
    by: list[str] | None,
    ascending: bool | None,
    name: str,
) -> HashAggregate:
    """The top_n that merges ``local``'s candidates after ``key_by(keys)``."""
    what = f"top_n '{name}'"
    candidates = local.reduction
    if not isinstance(candidates, TopN):
        raise PlanError(
            f"{what}: its input is the local aggregate '{local.name}', whose rows are "
            "partials of an aggregate, not rows to rank; merge it with key_by(...).aggregate()"
        )
    _same_keys(local, keys, what)
    by = candidates.by if by is None else by
    ascending = candidates.ascending if ascending is None else ascending
    if by != candidates.by or ascending != candidates.ascending:
        order = "ascending" if candidates.ascending else "descending"
        raise PlanError(
            f"{what} merges the local top_n '{local.name}', which ranks by "
            f"{', '.join(candidates.by)} {order}; pass the same by= and ascending= (or leave "
            "them out)"
        )
    if n > candidates.n:
        raise PlanError(
            f"{what} asks for {n} {plural(n, 'row')} per key, but the local top_n "
            f"'{local.name}' it merges "
            f"keeps {candidates.n}; ask for at most {candidates.n} or raise the local n"
        )
    return HashAggregate.of(TopN(keys, n, by, name, ascending), "merge")
