"""Hash aggregation in two phases: the aggregate as the planner sees it, and the
map-side combiner.

The reductions themselves (the functions, ``mean`` and decimal sums, and why the
results equal one ``group_by().aggregate()`` over the whole input) are
``aggregation``'s.  The same reduction runs on both sides of the hash exchange,
as Spark's partial and final aggregates and Flink's local/global aggregation do:
``PartialAggregate`` is the producer's map-side combiner (it sends partials, one
row per key and producer, instead of every row), ``HashAggregate(phase=
"final")`` merges partials on the consumer.  A combiner that does not shrink its
input (nearly unique keys) stops combining and passes its per-batch partials
straight on, so it never costs more than one ``group_by`` per batch.

``HashAggregate`` plans; a task runs it on DuckDB (``duck/aggregate.py``, swapped
in by ``duck.operators.on_duckdb``), one streamed ``GROUP BY`` within the task's
``memory_limit``, spilling.  ``PartialAggregate`` runs per batch on Arrow (faster
there: ``docs/architecture.md`` §11) and emits its partials when they fill its
memory (``min(max_bytes, context.memory)``), FLIP-44's flush on a full buffer.

Both run any ``Reduction`` (``reduction``): ``Aggregation`` for ``aggregate``,
``TopN`` for ``top_n`` (built with ``of``).  A third phase, ``merge``, is the
consumer after a FLIP-44 local stage (``local_aggregate``): its *logical* input
is partials, not rows, so the planner checks it against their columns.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import pyarrow as pa

from hybrid_shuffle.errors import PlanError
from hybrid_shuffle.operators.aggregation import Aggregation
from hybrid_shuffle.operators.base import Columns, Operator, PlannedOperator
from hybrid_shuffle.operators.context import OperatorContext
from hybrid_shuffle.operators.reduction import Reduction

__all__ = ["HashAggregate", "PartialAggregate"]

#: ``complete``: rows in; ``final``: partials of this exchange's combiner in (the planner
#: sees the rows before it); ``merge``: partials of a local stage in (the planner sees them)
PHASES = ("complete", "final", "merge")
_COMPACT_EVERY = 16  # partial tables a combiner keeps before it re-reduces them
#: a combiner whose partials keep more than this share of its input rows stops combining
_USEFUL_REDUCTION = 0.5
#: a combiner emits its partials once they take this many bytes (bounds its memory)
_COMBINER_MAX_BYTES = 32 << 20


class HashAggregate(PlannedOperator):
    """Group by ``keys``; ``phase="final"`` reads a ``PartialAggregate``'s partials,
    ``phase="merge"`` a ``LocalAggregate``'s.

    The planner checks it against its *logical* input: the rows before any
    combiner (``complete``, ``final``), the local stage's partials (``merge``).
    It returns the same columns in every phase.
    """

    operator_kind = "aggregate"
    output_on_eof = True
    uses_memory = True

    def __init__(
        self,
        keys: Sequence[str],
        spec: Mapping[str, str | Sequence[str]],
        name: str,
        phase: str = "complete",
    ) -> None:
        self._setup(Aggregation(keys, spec, name), phase)

    @classmethod
    def of(cls, reduction: Reduction, phase: str = "complete") -> HashAggregate:
        """The same operator over any ``Reduction`` (``TopN``); named as the reduction."""
        op = cls.__new__(cls)
        op._setup(reduction, phase)
        return op

    def _setup(self, reduction: Reduction, phase: str) -> None:
        if phase not in PHASES:
            raise PlanError(
                f"aggregate '{reduction.name}': phase must be one of {PHASES}, not {phase!r}"
            )
        self._agg: Reduction = reduction
        self.keys = reduction.keys
        self.name = reduction.name
        self.phase = phase

    @property
    def reduction(self) -> Reduction:
        return self._agg

    def output_schema(self, input_schemas: Sequence[pa.Schema | None]) -> pa.Schema | None:
        schema = input_schemas[0]
        if schema is None:
            return None
        if self.phase == "merge":
            self._agg.check_partials(schema)
            return self._agg.results(self._agg.combine(schema.empty_table())).schema
        self._agg.check(schema)
        empty = self._agg.partial(schema.empty_table())
        return self._agg.results(self._agg.combine(empty)).schema

    def input_columns(self, wanted: Columns) -> list[Columns]:
        # the logical input (what a combiner in front of a final phase reads, too)
        if self.phase == "merge":
            return [self._agg.partial_columns]
        return [self._agg.columns]

    def partition_keys(self, keys: tuple[str, ...]) -> tuple[str, ...] | None:
        # each group's row carries the group's key values
        return keys if set(keys) <= set(self.keys) else None


class PartialAggregate(Operator):
    """The map-side combiner of a ``HashAggregate(phase="final")``: emits partials.

    It keeps its partials until they take ``max_bytes`` (at most its memory, when a
    task gives it one) or its input ends, so
    with few keys a producer sends one row per key (the whole point); with many
    keys it emits as it goes and its memory stays bounded.  When the first
    batches show the partials keep more than half the rows, it stops re-reducing
    them and sends each batch's partial on at once (Spark's "skip partial
    aggregation"): combining cannot pay for itself on nearly unique keys.
    """

    operator_kind = "aggregate"
    uses_memory = True

    def __init__(
        self,
        keys: Sequence[str],
        spec: Mapping[str, str | Sequence[str]],
        name: str,
        max_bytes: int = _COMBINER_MAX_BYTES,
    ) -> None:
        self._setup(Aggregation(keys, spec, name), max_bytes)  # errors name the aggregate

    @classmethod
    def of(cls, reduction: Reduction, max_bytes: int = _COMBINER_MAX_BYTES) -> PartialAggregate:
        """The combiner of any ``Reduction`` (``TopN``)."""
        op = cls.__new__(cls)
        op._setup(reduction, max_bytes)
        return op

    def _setup(self, reduction: Reduction, max_bytes: int) -> None:
        self._agg: Reduction = reduction
        self.keys = reduction.keys
        self.name = f"{reduction.name}.combine"
        self.max_bytes = max_bytes

    def open(self, context: OperatorContext | None = None) -> None:
        self._context = context if context is not None else OperatorContext.unbounded()
        #: the flush threshold: a full buffer is emitted, never spilled (FLIP-44)
        self._max_bytes = min(self.max_bytes, self._context.memory)
        self._parts: list[pa.Table] = []
        self._bytes = 0
        self._checked = False
        self._rows_in = 0
        self._rows_out = 0
        self._passing = False

    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        if not self._checked:
            self._agg.check(table.schema)
            self._checked = True
        if not table.num_rows:
            return ()
        partial = self._agg.partial(table)
        if self._passing:
            return (partial,)
        self._rows_in += table.num_rows
        self._rows_out += partial.num_rows
        if self._rows_out > _USEFUL_REDUCTION * self._rows_in:
            self._passing = True
            return (*self._drain(), partial)
        self._parts.append(partial)
        self._bytes += partial.nbytes
        self._context.hold(self._bytes + table.nbytes)
        if len(self._parts) >= _COMPACT_EVERY:
            self._parts = [self._agg.combine(pa.concat_tables(self._parts))]
            self._context.hold(self._bytes + self._parts[0].nbytes)
            self._bytes = self._parts[0].nbytes
        if self._bytes >= self._max_bytes:
            return self._drain()
        return ()

    def _drain(self) -> tuple[pa.Table, ...]:
        parts, self._parts, self._bytes = self._parts, [], 0
        if not parts:
            return ()
        if len(parts) == 1:
            return (parts[0],)
        combined = self._agg.combine(pa.concat_tables(parts))
        self._context.hold(sum(p.nbytes for p in parts) + combined.nbytes)
        return (combined,)

    def end_input(self, input_index: int) -> Iterable[pa.Table]:
        return self._drain()

    def output_schema(self, input_schemas: Sequence[pa.Schema | None]) -> pa.Schema | None:
        schema = input_schemas[0]
        if schema is None:
            return None
        self._agg.check(schema)
        return self._agg.partial(schema.empty_table()).schema

    def input_columns(self, wanted: Columns) -> list[Columns]:
        return [self._agg.columns]

    def partition_keys(self, keys: tuple[str, ...]) -> tuple[str, ...] | None:
        return keys if set(keys) <= set(self._agg.keys) else None
