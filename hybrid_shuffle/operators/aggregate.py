"""Hash aggregation, memory-bounded by partial aggregation per batch, in two phases.

Each batch is reduced to one row per key right away; the partials are
re-reduced whenever they pile up, and ``finish`` combines them.  The reductions
themselves (the functions, ``mean`` and decimal sums, and why the results equal
one ``group_by().aggregate()`` over the whole input) are ``aggregation``'s.

The same reduction runs on both sides of the hash exchange, as Spark's partial
and final aggregates and Flink's local/global aggregation do:
``PartialAggregate`` is the producer's map-side combiner (it sends partials,
one row per key and producer, instead of every row), ``HashAggregate(phase=
"final")`` merges partials on the consumer.  A combiner that does not shrink
its input (nearly unique keys) stops combining and passes its per-batch
partials straight on, so it never costs more than one ``group_by`` per batch.

Memory (``OperatorContext``): ``HashAggregate`` keeps its partials within
``context.memory``.  They are re-reduced once they take half of it; when the
re-reduced partials still take more than a quarter (many keys), they are
hash-partitioned by key into buckets on disk (``hash_buckets``, as many as make
one bucket about half the memory by the input seen so far, at least 8) and the
aggregate goes on with empty memory, adding to the same buckets whenever its
partials fill up again.  ``finish`` then puts what is left into the buckets and
reduces them one by one, emitting one result table per bucket: every key is
whole in one bucket, so the tables together are one ``group_by`` over the whole
input.  A bucket larger than three quarters of the memory (reducing it holds
its partials and their reduction) is split again at the next level
(``hash_buckets.MAX_LEVELS``); past that it is reduced in memory whatever its
size (only thousands of times the memory in partials get there: every split
spreads distinct keys at least 8 ways).
``PartialAggregate`` never spills: it emits its partials when they fill its
memory (``min(max_bytes, context.memory)``), FLIP-44's flush on a full buffer.

Both run any ``Reduction`` (``reduction``): ``Aggregation`` for ``aggregate``,
``TopN`` for ``top_n`` (built with ``of``).  A third phase, ``merge``, is the
consumer after a FLIP-44 local stage (``local_aggregate``): its *logical* input
is partials, not rows, so the planner checks it against their columns.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

import pyarrow as pa

from hybrid_shuffle.errors import PlanError
from hybrid_shuffle.operators.aggregation import Aggregation
from hybrid_shuffle.operators.base import Columns, Operator
from hybrid_shuffle.operators.context import OperatorContext
from hybrid_shuffle.operators.hash_buckets import MAX_LEVELS, HashBuckets, bucket_count
from hybrid_shuffle.operators.reduction import Reduction
from hybrid_shuffle.operators.spill_run import SpillRun

__all__ = ["HashAggregate", "PartialAggregate"]

#: ``complete``: rows in; ``final``: partials of this exchange's combiner in (the planner
#: sees the rows before it); ``merge``: partials of a local stage in (the planner sees them)
PHASES = ("complete", "final", "merge")
_COMPACT_EVERY = 16  # partial tables kept before they are re-reduced
#: a combiner whose partials keep more than this share of its input rows stops combining
_USEFUL_REDUCTION = 0.5
#: a combiner emits its partials once they take this many bytes (bounds its memory)
_COMBINER_MAX_BYTES = 32 << 20
#: the bucket set stages up to 1/this of the memory before it writes (the partials it
#: takes leave memory as they go in, so it may stage more than a join's two sets do)
_STAGING_SHARE = 4


class HashAggregate(Operator):
    """Group by ``keys``; ``phase="final"`` reads a ``PartialAggregate``'s partials,
    ``phase="merge"`` a ``LocalAggregate``'s.

    The planner checks it against its *logical* input: the rows before any
    combiner (``complete``, ``final``), the local stage's partials (``merge``).
    It returns the same columns in every phase.
    """

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

    def on_kernel(self, kernel: str) -> Operator:
        if kernel != "duckdb":
            return self
        from hybrid_shuffle.operators.duck.aggregate import DuckAggregate

        return DuckAggregate(self)

    def open(self, context: OperatorContext | None = None) -> None:
        self._context = context if context is not None else OperatorContext.unbounded()
        self._memory = self._context.memory
        self._parts: list[pa.Table] = []
        self._parts_bytes = 0
        self._schema: pa.Schema | None = None
        #: the spilled partials, once they did not fit (see the module docstring)
        self._buckets: HashBuckets | None = None
        #: input bytes seen (what the bucket count is chosen from)
        self._seen = 0
        #: bytes of the partials the last re-reduction left
        self._compacted_bytes = 0

    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        if self._schema is None:
            if self.phase == "complete":
                self._agg.check(table.schema)
            elif self.phase == "merge":
                self._agg.check_partials(table.schema)
            self._schema = table.schema
        if table.num_rows:
            self._seen += table.nbytes
            part = self._agg.partial(table) if self.phase == "complete" else table
            self._parts.append(part)
            self._parts_bytes += part.nbytes
            self._context.hold(self._held() + table.nbytes)
            many = len(self._parts) >= _COMPACT_EVERY
            # the partials grew to twice what the last re-reduction left (on nearly unique
            # keys re-reducing them every 16 batches would cost quadratic time)
            grown = self._parts_bytes >= 2 * self._compacted_bytes
            if (many and grown) or self._parts_bytes > self._memory // 2:
                self._compact()
        return ()

    def _held(self) -> int:
        return self._parts_bytes + (0 if self._buckets is None else self._buckets.held)

    @property
    def _split_bytes(self) -> int:
        """A bucket of more partial bytes than this is split again rather than reduced:
        read (mapped) and reduced, it holds up to twice its bytes."""
        return self._memory * 3 // 4

    def _compact(self) -> None:
        """Re-reduce the partials; spill them if they still take a quarter of the memory."""
        combined = self._agg.combine(pa.concat_tables(self._parts))
        self._context.hold(self._held() + combined.nbytes)
        self._parts, self._parts_bytes = [combined], combined.nbytes
        self._compacted_bytes = combined.nbytes
        if self._context.can_spill and combined.nbytes > self._memory // 4:
            self._spill()

    def _spill(self) -> None:
        """Move the partials into the buckets (made on the first spill)."""
        self._compacted_bytes = 0
        if self._buckets is None:
            n = bucket_count(self._seen, self._memory)
            staging = max(self._memory // _STAGING_SHARE, 1)
            self._buckets = HashBuckets(
                self._context, self.keys, n, 0, "partials", staging, self._held
            )
        while self._parts:
            part = self._parts.pop()
            self._parts_bytes -= part.nbytes
            self._buckets.add(part)

    def finish(self) -> Iterable[pa.Table]:
        if self._schema is None:
            return ()
        if self._buckets is not None:
            self._spill()
            runs, self._buckets = self._buckets.close(), None
            return self._finish_buckets(runs, 0)
        if self._parts:
            combined = self._agg.combine(pa.concat_tables(self._parts))
        elif self.phase == "complete":
            combined = self._agg.combine(self._agg.partial(self._schema.empty_table()))
        else:
            combined = self._agg.combine(self._schema.empty_table())
        self._parts, self._parts_bytes = [], 0
        return (self._agg.results(combined),)

    def _finish_buckets(self, runs: Sequence[SpillRun | None], level: int) -> Iterator[pa.Table]:
        """One result table per bucket; a bucket larger than ``_split_bytes`` is split
        again first (see the module docstring).  Runs are deleted once read."""
        try:
            for run in runs:
                if run is None:
                    continue
                if run.bytes > self._split_bytes and level < MAX_LEVELS:
                    yield from self._finish_buckets(self._split(run, level), level + 1)
                    continue
                combined = self._agg.combine(run.read_all())
                self._context.hold(run.bytes + combined.nbytes)
                run.delete()
                yield self._agg.results(combined)
        finally:
            for run in runs:
                if run is not None:
                    run.delete()

    def _split(self, run: SpillRun, level: int) -> list[SpillRun | None]:
        n = bucket_count(run.bytes, self._memory)
        staging = max(self._memory // _STAGING_SHARE, 1)
        buckets = HashBuckets(
            self._context, self.keys, n, level + 1, "partials", staging, lambda: buckets.held
        )
        try:
            for batch in run.batches():
                buckets.add(batch)
            run.delete()
            return buckets.close()
        except BaseException:
            buckets.delete()
            raise

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
