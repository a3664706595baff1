"""Hash join of two co-partitioned inputs: input 1 builds, input 0 probes.

Inputs arrive interleaved, in whatever order their producers deliver: probe
batches that come before the build side has ended are kept, then joined once
it has; probe batches that come after it ended are joined at once.  Reading
both sides as they arrive (rather than the build side first) is what keeps a
diamond-shaped job from deadlocking on pipelined credits.  The ended build side
is a ``join_build.BuildTable``: how it joins a probe batch (by a key index or
pyarrow's ``Table.join``), the join types (``join_types.JOIN_TYPES``) and the
columns out (pyarrow's join schema for ``how``) are described there.  A right
or full join's build rows that no probe row matched come out once both inputs
ended.  The output row order is not defined.

``Table.join`` builds its hash table from the right table on every call, so a
call costs the build side's rows plus the probe rows.  Unless the build side is
indexed by key, probe batches are therefore joined in groups of at least
``PROBE_PER_BUILD`` times the build side's rows (or ``MAX_PROBE_BYTES``,
whichever comes first): rebuilding then costs at most a fraction of the
probing, where joining each 4 MiB batch on its own rebuilt a 375,000-row table
some 40 times per subtask in the main job.

Memory (``OperatorContext``): the operator holds the build side and the probe
batches waiting for it.  When these would pass ``context.memory`` it switches
to a grace hash join: what it holds and everything that comes after goes to
hash buckets on disk (``hash_buckets``: build and probe rows apart, the same
bucket for the same key), as many buckets as make one bucket's build side about
half the memory by the bytes seen so far (a power of two, at least 8).  When
the build side ends and all of it turns out to fit in half the memory, it is
read back whole and the join goes on as in memory (probe batches joined as they
come, the spilled ones read back at the end); otherwise, once both inputs
ended, the buckets are joined one by one: a bucket's build side read into
memory, its probe rows streamed through it, a right or full join's unmatched
build rows emitted per bucket.  A bucket whose build side is still larger than
the memory is split again at the next level (``MAX_LEVELS`` at most); past
that it is joined in memory whatever its size: it is then (nearly) all rows of
one key, which no hash can split.  The held figure is the Arrow data the
operator references (build side, its index, waiting probe rows, staging), not
pyarrow's own hash table inside a ``Table.join`` call nor the output handed on.

A left join needs the right side's columns even where no right row came: a
join subtask whose right input sent no batch at all (an empty right side, or
no right key hashed to this subtask) still gives every left row the right
columns, all null.  The right schema comes from the first right batch, else
from the one the planner passed to ``output_schema`` (remembered for this: the
operator is pickled into its tasks after planning), else from a zero-row right
batch if the shuffle delivers one.  When none of these knows it (the right
side's schema cannot be known before running and no right batch arrived), a
left join with left rows raises ``SchemaMismatchError`` rather than emit them
without the right columns: that result would differ from pyarrow's in its
columns, or make the subtasks' outputs differ from each other.  A full join
does the same; a right or full join whose left schema is unknown the same way
raises it for the build rows it would have to give left columns.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa

from hybrid_shuffle.operators.base import Columns, Operator
from hybrid_shuffle.operators.co_group import check_key_types
from hybrid_shuffle.operators.context import OperatorContext
from hybrid_shuffle.operators.dense_join import DenseBuild
from hybrid_shuffle.operators.hash_buckets import MAX_LEVELS, HashBuckets, bucket_count
from hybrid_shuffle.operators.join_build import TRACKED, BuildTable, JoinSpec
from hybrid_shuffle.operators.join_types import check_how
from hybrid_shuffle.operators.spill_run import SpillRun

__all__ = ["HashJoin"]

_LEFT, _RIGHT = 0, 1
#: probe rows joined per call, as a multiple of the build side's rows (see the docstring)
PROBE_PER_BUILD = 4
#: ... but never more probe bytes held than this before a call
MAX_PROBE_BYTES = 64 << 20
#: ... nor fewer rows than this (a tiny build side is no reason for tiny calls)
MIN_PROBE_ROWS = 1 << 16
#: each bucket set (build, probe) stages up to 1/this of the memory before it writes
_STAGING_SHARE = 8


class BuildSide(enum.Enum):
    """Where the build (right) input is; its schema is a separate question."""

    OPEN = "open"  # may still send batches: probe batches wait
    ENDED = "ended"  # sent everything: probe batches are joined as they come


class HashJoin(Operator):
    """Join on ``on``; ``how`` is one of ``join_types.JOIN_TYPES``.  See the module
    docstring for arrival order, the fast paths and the memory bound."""

    num_inputs = 2
    uses_memory = True

    def __init__(
        self, on: Sequence[str], how: str, name: str, right_suffix: str = "_right"
    ) -> None:
        check_how(how, name)
        self.on = list(on)
        self.how = how
        self.name = name
        self.right_suffix = right_suffix
        #: the input schemas the planner knew (``output_schema``); travels with the operator
        self.planned_schemas: tuple[pa.Schema | None, pa.Schema | None] = (None, None)

    def open(self, context: OperatorContext | None = None) -> None:
        self._context = context if context is not None else OperatorContext.unbounded()
        self._memory = self._context.memory
        self._build_side = BuildSide.OPEN
        self._build: list[pa.Table] = []
        self._build_bytes = 0
        #: probe batches not joined yet (all of them while the build side is open)
        self._waiting: list[pa.Table] = []
        self._waiting_rows = 0
        self._waiting_bytes = 0
        self._probe_ended = False
        #: the build side in memory once it ended (its table None if its schema is unknown)
        self._built: BuildTable | None = None
        #: grace mode: the probe and build bucket sets (indexed by input)
        self._grace: tuple[HashBuckets, HashBuckets] | None = None
        #: the output due once both inputs ended was handed out
        self._tail_given = False
        #: per input, the schema of its first batch
        self._schemas: list[pa.Schema | None] = [None, None]
        #: the join as its build tables see it, and the output layout per pair of schemas
        self._spec = self._join_spec()

    @property
    def _dense(self) -> DenseBuild | None:
        """The build side's key index, if the in-memory build side has one."""
        return None if self._built is None else self._built.dense

    def _join_spec(self) -> JoinSpec:
        """What the build side needs of this join (made in ``open``: layouts are cached)."""
        return JoinSpec(self.on, self.how, self.name, self.right_suffix)

    # -- arrival --------------------------------------------------------------------------

    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        if self._schemas[input_index] is None:
            self._schemas[input_index] = table.schema
            check_key_types(self._schemas, self.on, f"join '{self.name}'")
        if (
            self._grace is None
            and self._build_side is BuildSide.OPEN
            and self._context.can_spill
            and self._build_bytes + self._waiting_bytes + table.nbytes > self._memory
        ):
            self._start_grace()
        if input_index == _RIGHT:
            if self._grace is not None:
                self._grace[_RIGHT].add(table)
            elif table.num_rows:
                self._build.append(table)
                self._build_bytes += table.nbytes
            self._context.hold(self._held())
            return ()
        if self._grace is not None and self._built is None:
            self._grace[_LEFT].add(table)
            self._context.hold(self._held())
            return ()
        self._waiting.append(table)
        self._waiting_rows += table.num_rows
        self._waiting_bytes += table.nbytes
        self._context.hold(self._held())
        return self._probe_waiting(force=False)

    def _held(self) -> int:
        """The bytes of Arrow data the operator references now (see the module docstring)."""
        held = self._build_bytes + self._waiting_bytes
        if self._built is not None:
            held += self._built.nbytes
        if self._grace is not None:
            held += self._grace[_LEFT].held + self._grace[_RIGHT].held
        return held

    def _start_grace(self) -> None:
        """Move what is held into hash buckets on disk; everything after goes there too."""
        n = bucket_count(self._build_bytes, self._memory)
        staging = max(self._memory // _STAGING_SHARE, 1)
        probe = HashBuckets(self._context, self.on, n, 0, "probe", staging, self._held)
        build = HashBuckets(self._context, self.on, n, 0, "build", staging, self._held)
        self._grace = (probe, build)
        while self._build:
            table = self._build.pop()
            self._build_bytes -= table.nbytes
            build.add(table)
        while self._waiting:
            table = self._waiting.pop()
            self._waiting_bytes -= table.nbytes
            probe.add(table)
        self._waiting_rows = 0

    def _probe_waiting(self, force: bool) -> list[pa.Table]:
        """Join the waiting probe batches in one call once the build side ended and they
        are enough (see the module docstring), or when ``force``d at the end."""
        built = self._built
        if self._build_side is BuildSide.OPEN or not self._waiting or built is None:
            return []
        if not force:
            enough = max(PROBE_PER_BUILD * built.rows, MIN_PROBE_ROWS)
            if built.indexed(self._waiting[0].schema):
                enough = 0  # indexed once: no rebuilds to spread over many rows
            if self._waiting_rows < enough and self._waiting_bytes < self._probe_room(built):
                return []
        self._context.hold(self._held())
        waiting = self._waiting
        self._waiting, self._waiting_rows, self._waiting_bytes = [], 0, 0
        table = waiting[0] if len(waiting) == 1 else pa.concat_tables(waiting)
        return built.probe(table)

    def _probe_room(self, built: BuildTable) -> int:
        """The most probe bytes to gather for one call next to ``built``."""
        spare = max(self._memory - built.nbytes, self._memory // _STAGING_SHARE)
        return min(MAX_PROBE_BYTES, spare)

    # -- end of input ---------------------------------------------------------------------

    def end_input(self, input_index: int) -> Iterable[pa.Table]:
        if input_index == _LEFT:
            if self._probe_ended:
                return ()
            self._probe_ended = True
            out = self._probe_waiting(force=True)
        else:
            if self._build_side is BuildSide.ENDED:
                return ()
            self._build_side = BuildSide.ENDED
            self._end_build()
            out = self._probe_waiting(force=self._probe_ended)
        if self._probe_ended and self._build_side is BuildSide.ENDED and not self._tail_given:
            self._tail_given = True
            return itertools.chain(out, self._tail())
        return out

    def _end_build(self) -> None:
        """The build side ended: make it the in-memory build table, unless it was spilled
        and is more than half the memory (then it stays in its buckets)."""
        if self._grace is None:
            table = pa.concat_tables(self._build) if self._build else self._empty_right()
            self._build, self._build_bytes = [], 0
            self._built = self._new_build(table, self._waiting_bytes)
            return
        buckets = self._grace[_RIGHT]
        if buckets.nbytes <= self._memory // 2:
            # all of it fits after all: probe as in memory from now on (hybrid)
            table = self._read_build(buckets.close())
            self._built = self._new_build(table, self._grace[_LEFT].held)

    def _empty_right(self) -> pa.Table | None:
        schema = self._schemas[_RIGHT] or self.planned_schemas[_RIGHT]
        return None if schema is None else schema.empty_table()

    def _left_schema(self) -> pa.Schema | None:
        return self._schemas[_LEFT] or self.planned_schemas[_LEFT]

    def _read_build(self, runs: Sequence[SpillRun | None]) -> pa.Table | None:
        """The build rows of ``runs`` as one table (runs deleted: the table maps them)."""
        tables = [run.read_all() for run in runs if run is not None]
        for run in runs:
            if run is not None:
                run.delete()
        return pa.concat_tables(tables) if tables else self._empty_right()

    def _new_build(self, table: pa.Table | None, held_besides: int) -> BuildTable:
        # one chunk per column makes every probe's take faster, if the copy fits
        if (
            table is not None
            and table.num_columns
            and table.column(0).num_chunks > 1
            and self._context.fits(2 * table.nbytes + held_besides)
        ):
            table = table.combine_chunks()
        return BuildTable(self._spec, table, self._memory)

    def _tail(self) -> Iterator[pa.Table]:
        """What is due once both inputs ended (lazy: grace buckets are read one by one)."""
        if self._grace is None:
            assert self._built is not None
            yield from self._built.unmatched(self._left_schema())
            return
        emitted = 0
        for table in self._grace_tail():
            if table.num_rows:
                emitted += 1
                yield table
        if not emitted:
            schema = self._output_schema_now()
            if schema is not None:
                yield schema.empty_table()

    def _grace_tail(self) -> Iterator[pa.Table]:
        assert self._grace is not None
        probe_buckets, build_buckets = self._grace
        probes = probe_buckets.close()
        if self._built is not None:  # the build side fitted: stream the spilled probe rows
            for run in probes:
                if run is not None:
                    yield from self._probe_run(self._built, run)
                    run.delete()
            yield from self._built.unmatched(self._left_schema())
            return
        builds = build_buckets.close()
        try:
            for build_run, probe_run in zip(builds, probes, strict=True):
                yield from self._join_bucket(build_run, probe_run, 0)
        finally:
            for run in (*builds, *probes):
                if run is not None:
                    run.delete()

    def _join_bucket(
        self, build_run: SpillRun | None, probe_run: SpillRun | None, level: int
    ) -> Iterator[pa.Table]:
        """Join one bucket (its runs deleted once read), or split it again if its build
        side is larger than the memory (see the module docstring)."""
        try:
            if probe_run is None and self.how not in TRACKED:
                return  # no probe row: only unmatched build rows could come out
            if build_run is None and self.how in ("inner", "semi", "right"):
                return  # no build row: nothing can match
            if (
                build_run is not None
                and build_run.bytes > self._memory
                and level < MAX_LEVELS
                and self._context.can_spill
            ):
                yield from self._split_bucket(build_run, probe_run, level)
                return
            built = self._new_build(self._read_build([build_run]), 0)
            if probe_run is not None:
                yield from self._probe_run(built, probe_run)
            yield from built.unmatched(self._left_schema())
        finally:
            for run in (build_run, probe_run):
                if run is not None:
                    run.delete()

    def _split_bucket(
        self, build_run: SpillRun, probe_run: SpillRun | None, level: int
    ) -> Iterator[pa.Table]:
        n = bucket_count(build_run.bytes, self._memory)
        staging = max(self._memory // _STAGING_SHARE, 1)

        def held() -> int:
            return build.held + probe.held

        build = HashBuckets(self._context, self.on, n, level + 1, "build", staging, held)
        probe = HashBuckets(self._context, self.on, n, level + 1, "probe", staging, held)
        try:
            for buckets, run in ((build, build_run), (probe, probe_run)):
                if run is not None:
                    for batch in run.batches():
                        buckets.add(batch)
                    run.delete()
            for b, p in zip(build.close(), probe.close(), strict=True):
                yield from self._join_bucket(b, p, level + 1)
        finally:
            build.delete()
            probe.delete()

    def _probe_run(self, built: BuildTable, run: SpillRun) -> Iterator[pa.Table]:
        """Probe ``built`` with a spilled run's rows, in groups as ``_probe_waiting``."""
        enough = max(PROBE_PER_BUILD * built.rows, MIN_PROBE_ROWS)
        if built.indexed(run.schema):
            enough = MIN_PROBE_ROWS  # runs hold small batches: no call per batch
        room = self._probe_room(built)
        group: list[pa.RecordBatch] = []
        rows = nbytes = 0
        for batch in itertools.chain(run.batches(), [None]):
            if batch is not None:
                group.append(batch)
                rows += batch.num_rows
                nbytes += batch.nbytes
                if rows < enough and nbytes < room:
                    continue
            if group:
                self._context.hold(built.nbytes + nbytes + self._held_staging())
                yield from built.probe(pa.Table.from_batches(group, schema=run.schema))
            group, rows, nbytes = [], 0, 0

    def _held_staging(self) -> int:
        if self._grace is None:
            return 0
        return self._grace[_LEFT].held + self._grace[_RIGHT].held

    def finish(self) -> Iterable[pa.Table]:
        # every input ended, so both did here too (end_input is idempotent)
        return itertools.chain(self.end_input(_RIGHT), self.end_input(_LEFT))

    # -- schemas --------------------------------------------------------------------------

    def _output_schema_now(self) -> pa.Schema | None:
        left, right = self._left_schema(), self._schemas[_RIGHT] or self.planned_schemas[_RIGHT]
        if left is None or right is None:
            return None
        return self._spec.layout(left, right).output

    def on_kernel(self, kernel: str) -> Operator:
        if kernel != "duckdb":
            return self
        from hybrid_shuffle.operators.duck.join import DuckJoin

        return DuckJoin(self)

    def partition_keys(self, keys: tuple[str, ...]) -> tuple[str, ...] | None:
        # a joined row has its key values (once, whichever side it came from)
        return keys if set(keys) <= set(self.on) else None

    def input_columns(self, wanted: Columns) -> list[Columns]:
        """Both sides keep the keys and every wanted name, and the name a wanted
        ``<name><right_suffix>`` came from: a column both sides have is then kept or
        dropped on both, so the suffix pyarrow gives a collision is never lost.  A semi
        or anti join reads only the keys of its right side."""
        keys = frozenset(self.on)
        if wanted is None:
            return [None, keys if self.how in ("semi", "anti") else None]
        suffix = self.right_suffix
        stripped = {c[: -len(suffix)] for c in wanted if suffix and c.endswith(suffix)}
        need = keys | wanted | stripped
        return [need, keys if self.how in ("semi", "anti") else need]

    def output_schema(self, input_schemas: Sequence[pa.Schema | None]) -> pa.Schema | None:
        check_key_types(input_schemas, self.on, f"join '{self.name}'")
        left, right = input_schemas
        self.planned_schemas = (left, right)
        if left is None or right is None:
            return None
        return self._join_spec().join(left.empty_table(), right.empty_table()).schema
