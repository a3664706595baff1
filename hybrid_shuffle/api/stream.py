"""``Stream`` and ``KeyedStream``: the operators and exchanges a job is built from.

Each call adds a logical node; nothing runs until ``to_arrow()``,
``to_pandas()`` or ``collect()``.  Every exchange (``key_by``, ``sort``,
``join``, ``co_group``, ``rebalance``, ``broadcast``) takes ``edge=`` (the name YAML refers
to), ``mode=`` (YAML wins over it) and ``partitions=`` (the consumer's
parallelism, or ``"auto"``: decided from the bytes its producers wrote, when
every input of the consumer is blocking; see ``AdaptiveConfig``).  Operators
with forward edges and equal parallelism are chained into one task by the
planner.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa

from hybrid_shuffle.api._validate import partition_count, positive_count
from hybrid_shuffle.empty_column import EMPTY_COLUMN
from hybrid_shuffle.errors import PlanError
from hybrid_shuffle.operators import (
    CoGroup,
    Filter,
    HashAggregate,
    HashJoin,
    Identity,
    MapBatches,
    PartialAggregate,
    Rename,
    Select,
    SortMergeJoin,
    SortPartition,
    TopN,
)
from hybrid_shuffle.operators.base import Operator
from hybrid_shuffle.operators.join_types import check_how
from hybrid_shuffle.operators.sql import SqlQuery
from hybrid_shuffle.plan.logical import ExchangeSpec, LogicalNode
from hybrid_shuffle.result import JobResult
from hybrid_shuffle.shuffle.routing import Partitioner, PartitionerKind

if TYPE_CHECKING:
    from hybrid_shuffle.api.cached_stream import CachedStream
    from hybrid_shuffle.api.job import Job
    from hybrid_shuffle.api.local_keyed_stream import LocalKeyedStream
    from hybrid_shuffle.runtime.progress import JobProgress

__all__ = ["BROADCAST_HOWS", "JOIN_STRATEGIES", "KeyedStream", "Stream"]

#: ``join(strategy=)``: a hash join, a sort-merge join, or a
#: broadcast hash join (``other`` sent whole to every subtask, this stream not moved)
JOIN_STRATEGIES = ("hash", "sort-merge", "broadcast")
#: the ``how``s a broadcast join can run: those where a subtask with every build row and
#: a part of the probe rows gives its part of the result (right and full would emit the
#: unmatched build rows once per subtask)
BROADCAST_HOWS = ("inner", "left", "semi", "anti")


def _keys(on: str | Sequence[str], what: str) -> tuple[str, ...]:
    keys = (on,) if isinstance(on, str) else tuple(on)
    if not keys:
        raise PlanError(f"{what}: name at least one key column in on=")
    return keys


class Stream:
    """A distributed stream of Arrow tables; each method adds an operator or exchange."""

    #: the schema of the Spark DataFrame this stream's rows are (``from_spark``,
    #: ``Session.from_dataframe`` and ``sql``): ``to_spark`` gives it back, nullability
    #: included, when the result still has its columns and types
    spark_schema: Any = None
    #: the result's column names as Spark gives them (``Session.sql`` and
    #: ``from_dataframe``), duplicates included (``SELECT * FROM a CROSS JOIN b``):
    #: inside the engine every column has a unique name, and these are applied where
    #: the rows leave it (``collect``, ``to_arrow``, ``to_pandas``, ``to_spark``)
    spark_names: list[str] | None = None

    def __init__(self, job: Job, node: LogicalNode) -> None:
        self.job = job
        self.node = node

    def _user_function(self, fn: Any, operator: str) -> Any:
        """``fn``, checked to pickle (a ``PlanError`` naming ``operator`` and the object
        that does not), with its module shipped by value when the executors could not
        import it: a pipeline's own module (a script folder on ``sys.path``, a file
        the CLI loaded) does not exist there, as Ray's docs note."""
        transport = self.job.cluster.transport
        module = sys.modules.get(getattr(fn, "__module__", "") or "")
        path = getattr(module, "__file__", None)
        if (
            module is not None
            and path is not None
            and module.__name__ != "__main__"
            and not any(part in path for part in ("site-packages", "dist-packages"))
            and module.__name__.split(".")[0] != "hybrid_shuffle"
        ):
            transport.ship_by_value(module)
        problem = transport.why_unpicklable(fn)
        if problem is not None:
            raise PlanError(
                f"{operator}: its function cannot be sent to the executors because {problem}; "
                "create that object inside the function instead of capturing it"
            )
        return fn

    def _chain(
        self, kind: str, name: str | None, operator_factory: Callable[[str], Operator]
    ) -> Stream:
        node_name = name or f"{kind}_{next(self.job._ids)}"
        node = self.job._node(kind, node_name, operator_factory(node_name), [(self.node, None)])
        return Stream(self.job, node)

    def _exchange(
        self,
        kind: str,
        name: str | None,
        operator_factory: Callable[[str], Operator],
        inputs: Sequence[tuple[Stream, ExchangeSpec | None]],
    ) -> Stream:
        node_name = name or f"{kind}_{next(self.job._ids)}"
        node = self.job._node(
            kind, node_name, operator_factory(node_name), [(s.node, spec) for s, spec in inputs]
        )
        return Stream(self.job, node)

    # -- chained (forward) operators ------------------------------------------------------

    def map_batches(
        self, fn: Callable[[pa.Table], pa.Table | pd.DataFrame], name: str | None = None
    ) -> Stream:
        """Apply ``fn`` to every batch (a ``pyarrow.Table``); it may return a pandas frame."""
        return self._chain(
            "map_batches",
            name,
            lambda n: MapBatches(self._user_function(fn, f"map_batches '{n}'"), n),
        )

    def filter(self, predicate: Any, name: str | None = None) -> Stream:
        """Keep rows where ``predicate`` (a ``pyarrow.compute`` expression or a function
        returning a boolean mask) is true."""
        return self._chain(
            "filter",
            name,
            lambda n: Filter(self._user_function(predicate, f"filter '{n}'"), n),
        )

    def select(self, *columns: str, name: str | None = None) -> Stream:
        """Keep only ``columns``, in this order."""
        return self._chain("select", name, lambda n: Select(list(columns), n))

    def rename(self, mapping: Mapping[str, str], name: str | None = None) -> Stream:
        """Rename columns, ``{"old": "new"}`` (Spark's ``withColumnRenamed``); the planner
        sees through it when it prunes columns, which it cannot through ``map_batches``."""
        return self._chain("rename", name, lambda n: Rename(mapping, n))

    def sql(self, query: str, name: str | None = None) -> Stream:
        """Run ``query`` (DuckDB's SQL) over each subtask's batches, which it names
        ``input``; chained into this stream's tasks, with no exchange::

            stream.sql("SELECT id, amount * 1.2 AS gross FROM input WHERE amount > 0")

        A projection or filter runs batch by batch; a query that needs all its input
        (GROUP BY, ORDER BY, a window, an aggregate, DISTINCT, LIMIT, a join) sees
        *this subtask's* rows only and emits at their end (``SELECT count(*) FROM
        input`` gives a row per subtask): use ``key_by(...).sql()`` to group over the
        whole stream.  The query is checked against the input's
        schema when the job is planned (a bad one is a ``PlanError`` naming it); a
        query that fails on the data fails the job, without retries.  See
        ``hybrid_shuffle.operators.sql``.
        """
        return self._chain("sql", name, lambda n: SqlQuery(query, n))

    # -- exchanges ------------------------------------------------------------------------

    def key_by(
        self,
        *keys: str,
        edge: str | None = None,
        mode: str | None = None,
        partitions: int | str | None = None,
    ) -> KeyedStream:
        """Hash-partition by ``keys``; aggregate with ``.aggregate()``."""
        if not keys:
            raise PlanError("key_by: name at least one key column")
        spec = ExchangeSpec(
            Partitioner(PartitionerKind.HASH, tuple(keys)),
            edge,
            mode,
            partition_count(partitions, "key_by: partitions"),
        )
        return KeyedStream(self, list(keys), spec)

    def local_key_by(self, *keys: str | Sequence[str]) -> LocalKeyedStream:
        """Key by ``keys`` within each subtask, with no exchange (FLIP-44's local keyed
        stream): ``local_key_by("k").aggregate(spec, flush_rows=N)`` or ``.top_n(n, by=)``
        reduce each subtask's rows per key, chained into this stream's tasks, and
        ``.key_by("k").aggregate()`` / ``.top_n(n)`` merge the partials.  Keys are given
        as ``key_by``'s (``"a", "b"``) or as one sequence (``["a", "b"]``).  See
        ``hybrid_shuffle.api.local_keyed_stream``."""
        from hybrid_shuffle.api.local_keyed_stream import LocalKeyedStream

        names: list[str] = []
        for key in keys:
            names.extend([key] if isinstance(key, str) else list(key))
        if not names or not all(isinstance(k, str) and k for k in names):
            raise PlanError(f"local_key_by: name at least one key column, got {keys!r}")
        return LocalKeyedStream(self, names)

    def rebalance(
        self,
        edge: str | None = None,
        mode: str | None = None,
        partitions: int | str | None = None,
    ) -> Stream:
        """Round-robin rows over ``partitions`` consumers (evens out skewed partitions)."""
        return self._redistribute(PartitionerKind.ROUND_ROBIN, "rebalance", edge, mode, partitions)

    def broadcast(
        self,
        edge: str | None = None,
        mode: str | None = None,
        partitions: int | str | None = None,
    ) -> Stream:
        """Send every row to every one of ``partitions`` consumers."""
        return self._redistribute(PartitionerKind.BROADCAST, "broadcast", edge, mode, partitions)

    def _redistribute(
        self,
        kind: PartitionerKind,
        what: str,
        edge: str | None,
        mode: str | None,
        partitions: int | str | None,
    ) -> Stream:
        """An exchange that moves rows unchanged (its consumer is an ``Identity``)."""
        count = partition_count(partitions, f"{what}: partitions")
        spec = ExchangeSpec(Partitioner(kind), edge, mode, count)
        return self._exchange(what, None, lambda n: Identity(n), [(self, spec)])

    def union(self, *others: Stream, name: str | None = None) -> Stream:
        """All rows of this stream and ``others`` (same schema), no order between them."""
        streams = [self, *others]
        if any(s.job is not self.job for s in streams):
            raise PlanError("union: all streams must belong to the same job")
        node_name = name or f"union_{next(self.job._ids)}"
        node = self.job._node(
            "union",
            node_name,
            Identity(node_name, num_inputs=len(streams)),
            [(s.node, None) for s in streams],
        )
        return Stream(self.job, node)

    def join(
        self,
        other: Stream,
        on: str | Sequence[str],
        how: str = "inner",
        edge: str | None = None,
        mode: str | None = None,
        partitions: int | str | None = None,
        name: str | None = None,
        strategy: str = "hash",
    ) -> Stream:
        """Join with ``other`` on ``on``; ``how`` is inner, left, right, full, semi or anti,
        as in Spark (key columns appear once; semi and anti keep only this side's
        columns; null keys never match).

        Both sides are hash-partitioned on the keys; the edges are named
        ``<edge>.left`` and ``<edge>.right`` (default ``<join name>.left/right``).
        ``strategy="hash"`` builds a hash table of ``other`` and probes it with this
        stream as it arrives; ``"sort-merge"`` sorts both sides and merges them,
        emitting only at end of input.  Either runs on DuckDB and spills beyond
        ``operators.memory``.

        ``strategy="broadcast"`` (Spark's BroadcastHashJoin, for a small ``other``)
        moves no row of this stream: the join is chained into this stream's producer
        (its tasks, its parallelism; a producer with other consumers feeds it over a
        forward edge instead), and ``other`` goes whole to every subtask over a broadcast edge named
        ``<edge>.right`` (``mode=`` is that edge's).  Only ``how`` inner, left, semi
        and anti (``BROADCAST_HOWS``): in a right or full join every subtask would
        emit the build rows it did not match, so each such row once per subtask.
        """
        node_name = name or f"join_{next(self.job._ids)}"
        check_how(how, node_name)
        if strategy not in JOIN_STRATEGIES:
            raise PlanError(
                f"join '{node_name}': strategy='{strategy}' is not a join strategy; use one "
                f"of: {', '.join(JOIN_STRATEGIES)}"
            )
        if other.job is not self.job:
            raise PlanError(f"join '{node_name}': both streams must belong to the same job")
        keys = _keys(on, f"join '{node_name}'")
        what = f"join '{node_name}'"
        if strategy == "broadcast":
            build = self._broadcast_build(other, node_name, how, edge, mode, partitions)
            return self._exchange("join", node_name, lambda n: HashJoin(list(keys), how, n), build)
        inputs = self._co_partitioned(other, keys, node_name, what, edge, mode, partitions)
        join: type[HashJoin | SortMergeJoin] = HashJoin if strategy == "hash" else SortMergeJoin
        return self._exchange("join", node_name, lambda n: join(list(keys), how, n), inputs)

    def _broadcast_build(
        self,
        other: Stream,
        node_name: str,
        how: str,
        edge: str | None,
        mode: str | None,
        partitions: int | str | None,
    ) -> list[tuple[Stream, ExchangeSpec | None]]:
        """The inputs of a broadcast join: this stream forward (``None``: no exchange, the
        planner gives the join its producer's parallelism), ``other`` broadcast."""
        if how not in BROADCAST_HOWS:
            raise PlanError(
                f"join '{node_name}': how='{how}' cannot run with strategy='broadcast', "
                "whose every subtask would emit the unmatched build rows again; use "
                f"strategy='hash' or 'sort-merge' for it (broadcast runs only "
                f"{', '.join(BROADCAST_HOWS)})"
            )
        if partitions is not None:
            raise PlanError(
                f"join '{node_name}': strategy='broadcast' runs in as many subtasks as its "
                "probe side's producer, so partitions= does not apply; drop it, or "
                "rebalance(partitions=) the probe side first"
            )
        spec = ExchangeSpec(
            Partitioner(PartitionerKind.BROADCAST), f"{edge or node_name}.right", mode
        )
        return [(self, None), (other, spec)]

    def co_group(
        self,
        other: Stream,
        on: str | Sequence[str],
        fn: Callable[[pa.Table, pa.Table], pa.Table | pd.DataFrame | None],
        name: str | None = None,
        *,
        edge: str | None = None,
        mode: str | None = None,
        partitions: int | str | None = None,
    ) -> Stream:
        """FLIP-331's coGroup: ``fn(left, right)`` over whole key groups of both streams.

        Both sides are hash-partitioned on ``on`` (edges ``<edge>.left`` and
        ``<edge>.right``, default ``<name>.left/right``), each side is sorted
        (by DuckDB, spilling beyond ``operators.memory``) and
        the two are merged.  ``fn``
        receives every row of the keys it covers, from both sides, in key order:
        one call covers many keys (it is vectorized, not called per key), each key
        is in exactly one call, and either side may have no row for a key (it is
        then a zero-row table with that side's columns).  Null keys form one group.
        ``fn`` returns a table (or pandas frame, or None for nothing); it runs only
        at end of input, so the output-on-EOF rule makes the inputs batch.
        """
        node_name = name or f"co_group_{next(self.job._ids)}"
        if other.job is not self.job:
            raise PlanError(f"co_group '{node_name}': both streams must belong to the same job")
        keys = _keys(on, f"co_group '{node_name}'")
        what = f"co_group '{node_name}'"
        inputs = self._co_partitioned(other, keys, node_name, what, edge, mode, partitions)
        return self._exchange(
            "co_group",
            node_name,
            lambda n: CoGroup(list(keys), self._user_function(fn, f"co_group '{n}'"), n),
            inputs,
        )

    def _co_partitioned(
        self,
        other: Stream,
        keys: tuple[str, ...],
        node_name: str,
        what: str,
        edge: str | None,
        mode: str | None,
        partitions: int | str | None,
    ) -> list[tuple[Stream, ExchangeSpec]]:
        """Both inputs of a two-input keyed operator (``what`` names it in errors),
        hash-partitioned alike on ``keys``."""
        base = edge or node_name
        part = Partitioner(PartitionerKind.HASH, keys)
        count = partition_count(partitions, f"{what}: partitions")
        left = ExchangeSpec(part, f"{base}.left", mode, count)
        right = ExchangeSpec(part, f"{base}.right", mode, count)
        return [(self, left), (other, right)]

    def sort(
        self,
        by: str | Sequence[str],
        descending: bool = False,
        edge: str | None = None,
        mode: str | None = None,
        partitions: int | str | None = None,
        name: str | None = None,
    ) -> Stream:
        """Global sort: range-partition on the first key, then sort each partition.

        Nulls sort last in both directions.  The result's partitions are in key
        order, so ``to_arrow()`` returns one sorted table.
        """
        keys = [by] if isinstance(by, str) else list(by)
        if not keys:
            raise PlanError("sort: name at least one column")
        part = Partitioner(PartitionerKind.RANGE, tuple(keys[:1]), descending)
        spec = ExchangeSpec(part, edge, mode, partition_count(partitions, "sort: partitions"))
        return self._exchange(
            "sort", name, lambda n: SortPartition(keys, descending, n), [(self, spec)]
        )

    # -- placement ------------------------------------------------------------------------

    def slot_sharing_group(self, name: str) -> Stream:
        """Run this operator in slot sharing group ``name`` (Flink's ``slotSharingGroup``):
        tasks of different groups never share an executor, and a pipelined region needs,
        per group, as many slots as that group's widest vertex.  The operators after it
        inherit the group unless they set their own (an operator whose inputs are in
        different groups is in ``default``).  An operator is never chained to one of
        another group.  Returns this stream."""
        if not isinstance(name, str) or not name.strip():
            raise PlanError(f"slot_sharing_group: name must be a non-empty string, got {name!r}")
        self.node.slot_sharing_group = name
        return self

    def co_locate_with(self, other: Stream) -> Stream:
        """Run subtask i of this operator on the executor of subtask i of ``other``'s
        (Flink's co-location constraint): both need the same parallelism and slot
        sharing group, or planning raises a ``PlanError``.  Returns this stream."""
        if other.job is not self.job:
            raise PlanError("co_locate_with: both streams must belong to the same job")
        mine, theirs = self.node.co_location, other.node.co_location
        if mine is not None and theirs is not None and mine != theirs:
            raise PlanError(
                f"co_locate_with: '{self.node.name}' and '{other.node.name}' are each "
                "co-located with other operators already; co-locate them all with one"
            )
        key = mine or theirs or f"with {other.node.name}"
        self.node.co_location = other.node.co_location = key
        return self

    # -- caching --------------------------------------------------------------------------

    def cache(self, name: str | None = None) -> CachedStream:
        """Keep this stream's result for later runs of the session (FLIP-205): see
        ``hybrid_shuffle.api.cached_stream``.  ``name`` (default: this stream's node
        name) is how ``Session.caches()`` and ``explain()`` call it; a name already
        taken in the session is an error."""
        from hybrid_shuffle.api.cached_stream import CachedStream

        self.job.cluster.check_open()
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise PlanError(f"cache: name must be a non-empty string, got {name!r}")
        catalog = self.job.cluster.cache_catalog
        cache_name = catalog.new_name(name, self.node.name)
        node_name = f"cache({cache_name})"
        node = self.job._node("cache", node_name, Identity(node_name), [(self.node, None)])
        node.cache = catalog.create(cache_name, node, self.job)
        cached = CachedStream(self.job, node, node.cache)
        cached.spark_schema, cached.spark_names = self.spark_schema, self.spark_names
        return cached

    # -- running --------------------------------------------------------------------------

    def collect(
        self, timeout: float | None = None, *, progress: bool | JobProgress = False
    ) -> JobResult:
        """Run the job; the result table plus per-edge metrics.

        ``timeout`` (seconds; default ``failover.job_timeout``, else unbounded) bounds
        the whole job: past it, its tasks are cancelled and ``JobTimeoutError`` names
        the job and the tasks that were still running.  ``progress=True`` shows one
        bar per vertex while it runs: subtasks done, rows, bytes, spilled
        (``hybrid_shuffle.progress``; a ``JobProgress`` object is told instead).

        The table's columns are named as Spark names them for a translated plan
        (``spark_names``: two columns may share a name, as in ``df.columns``)."""
        result = self.job.run(self, timeout, progress=progress)
        result.table = self._spark_typed(result.table)
        names = self._renaming(result.table)
        if names is not None:  # none at all: the placeholder column of a relation of none
            result.table = result.table.rename_columns(names) if names else result.table.select([])
        return result

    def _spark_typed(self, table: pa.Table) -> pa.Table:
        """``table`` with the Arrow types Spark gives the columns of ``spark_schema`` where
        DuckDB changed them (a day-time interval: ``spark.bridge.spark_typed``)."""
        if self.spark_schema is None:
            return table
        from hybrid_shuffle.spark.bridge import spark_typed

        return spark_typed(table, self.spark_schema)

    def _renaming(self, table: pa.Table) -> list[str] | None:
        """``spark_names`` when they are not ``table``'s own names (None: nothing to do)."""
        names = self.spark_names
        if names is None or names == table.column_names:
            return None
        if not names and table.column_names == [EMPTY_COLUMN]:
            return names
        return names if len(names) == table.num_columns else None

    def _unique_names(self, what: str, remedy: str) -> None:
        """A ``PlanError`` before anything runs when ``spark_names`` repeat a name (as
        Spark compares them, ignoring case), which ``what`` cannot hold."""
        seen: dict[str, str] = {}
        for name in self.spark_names or []:
            first = seen.get(name.lower())
            if first is not None:
                same = repr(name) if first == name else f"{first!r} and {name!r}"
                raise PlanError(
                    f"{what}: the result has two columns named {same}, {remedy}; give one "
                    "of them another name (AS) in the query"
                )
            seen[name.lower()] = name

    def to_arrow(
        self, timeout: float | None = None, *, progress: bool | JobProgress = False
    ) -> pa.Table:
        return self.collect(timeout, progress=progress).table

    def to_ray_data(self, timeout: float | None = None) -> Any:
        """Run the job; a ``ray.data.Dataset`` over the result's buffers, left in the
        object store (see ``hybrid_shuffle.ray_data`` for who owns them: consume it
        before the session closes).  Where the result cannot be handed over as refs,
        it is read as ``collect`` does and put back (one copy through the driver)."""
        from hybrid_shuffle import ray_data

        self._unique_names("to_ray_data", "which a Ray Dataset cannot hold")
        result = self.job.run(self, timeout, blocks=True)
        blocks = result.blocks
        if blocks is None:  # read instead (a spilled partition): put back, the driver owns it
            blocks = [self.job.cluster.transport.put(result.table)] if result.table.num_rows else []
        return ray_data.dataset_of(blocks, result.table.schema)

    def write_parquet(
        self, dir: str | os.PathLike[str], mode: str = "error", timeout: float | None = None
    ) -> JobResult:
        """Run the job, each subtask writing its own ``part-<subtask>-<n>.parquet`` files
        into ``dir`` (a sink: no row reaches the driver); see
        ``hybrid_shuffle.operators.parquet_sink`` for the commit that keeps a restarted
        task's rows from appearing twice.

        ``mode="error"`` (the default, as Spark's) refuses a ``dir`` that holds any
        file; ``"overwrite"`` removes the ``part-*.parquet`` files already there first
        (nothing else).  The result's ``table`` is the list of files written (columns
        ``subtask``, ``path``, ``rows``, ``bytes``), not the data; the sink vertex's
        ``VertexMetrics.rows_written`` and ``files_written`` sum it, and each task's
        ``TaskReport.operators`` holds its own."""
        from hybrid_shuffle.operators.parquet_sink import (
            STAGING,
            ParquetWrite,
            abort,
            commit,
            prepare,
        )

        self.job.cluster.check_open()
        # Spark refuses them too ([COLUMN_ALREADY_EXISTS]), as Parquet holds one of a name
        self._unique_names("write_parquet", "which one Parquet file cannot hold")
        directory = os.path.abspath(os.fspath(dir))
        prepare(directory, mode, f"write_parquet {directory!r}")
        staging = os.path.join(directory, STAGING, uuid.uuid4().hex[:12])
        stream = self._chain("write_parquet", None, lambda n: ParquetWrite(staging, n))
        try:
            result = self.job.run(stream, timeout)
        except BaseException:
            abort(directory, staging)
            raise
        result.table = commit(directory, staging, result.table)
        return result

    def to_pandas(
        self, timeout: float | None = None, *, progress: bool | JobProgress = False
    ) -> pd.DataFrame:
        return self.to_arrow(timeout, progress=progress).to_pandas()

    def to_spark(
        self, timeout: float | None = None, *, progress: bool | JobProgress = False
    ) -> Any:
        """Run the job; a Spark DataFrame of the result, with the result's column types (the
        source DataFrame's schema itself when the stream is a Spark DataFrame's rows) and
        Spark's column names (``spark_names``), so ``to_spark().columns == df.columns``."""
        table = self._spark_typed(self.job.run(self, timeout, progress=progress).table)
        names = self._renaming(table)
        if names == []:  # rows of no column
            return self.job.cluster.spark.range(table.num_rows).select()
        return self.job.cluster.bridge.to_dataframe(table, self.spark_schema, names)

    def explain(self) -> str:
        return self.job.explain(self)

    def explain_data(self) -> dict[str, Any]:
        """``explain()`` as plain data: vertices, edges, notes, warnings."""
        return self.job.explain_data(self)


class KeyedStream:
    """A stream hash-partitioned by keys; the exchange happens at the next operator."""

    def __init__(self, stream: Stream, keys: list[str], spec: ExchangeSpec) -> None:
        self._stream = stream
        self.keys = keys
        self._spec = spec

    def aggregate(
        self,
        spec: Mapping[str, str | Sequence[str]] | None = None,
        name: str | None = None,
        combine: bool = True,
    ) -> Stream:
        """Group by the keys: ``{"amount": ["sum", "count"]}`` gives ``amount_sum``,
        ``amount_count`` (sum, count, min, max, mean).

        ``combine`` (default) pre-aggregates in every producer before the exchange,
        as Spark's map-side combine does, so the edge carries partials (one row per
        key and producer) instead of every row; ``combine=False`` ships the rows.
        After a local aggregate (``local_key_by``) it merges that stage's partials
        instead: ``spec`` may then be left out (the local one), and ``combine`` has no
        effect (the partials are shipped as they are).
        """
        from hybrid_shuffle.api.local_keyed_stream import local_stage, merge_aggregate

        node_name = name or f"aggregate_{next(self._stream.job._ids)}"
        local = local_stage(self._stream)
        if local is not None:
            merged = merge_aggregate(local, self.keys, spec, node_name)
            return self._stream._exchange(
                "aggregate", node_name, lambda n: merged, [(self._stream, self._spec)]
            )
        if spec is None:
            raise PlanError(
                f"aggregate '{node_name}': give the columns and functions, e.g. "
                "aggregate({'amount': ['sum', 'count']})"
            )
        final = HashAggregate(self.keys, spec, node_name, "final" if combine else "complete")
        exchange = self._spec
        if combine:
            exchange = dataclasses.replace(
                exchange, combiner=PartialAggregate(self.keys, spec, node_name)
            )
        return self._stream._exchange(
            "aggregate", node_name, lambda n: final, [(self._stream, exchange)]
        )

    def top_n(
        self,
        n: int,
        by: str | Sequence[str] | None = None,
        name: str | None = None,
        ascending: bool | None = None,
        combine: bool = True,
    ) -> Stream:
        """The ``n`` rows with the largest ``by`` per key (``ascending=True``: the
        smallest), every column kept; nulls never win, and ties on ``by`` are broken on
        the other columns in order, so the result depends on the rows alone (see
        ``hybrid_shuffle.operators.top_n``).

        ``combine`` (default) keeps each producer's top ``n`` per key before the
        exchange.  After a local top_n (``local_key_by``) it merges that stage's
        rows: ``by`` and ``ascending`` may be left out (the local ones), ``n`` may be
        at most the local one, and ``combine`` has no effect.
        """
        from hybrid_shuffle.api.local_keyed_stream import by_columns, local_stage, merge_top_n

        node_name = name or f"top_n_{next(self._stream.job._ids)}"
        what = f"top_n '{node_name}'"
        count = positive_count(n, f"{what}: n")
        assert count is not None
        columns = None if by is None else by_columns(by, what)
        if ascending is not None and not isinstance(ascending, bool):
            raise PlanError(f"{what}: ascending= must be True or False, got {ascending!r}")
        local = local_stage(self._stream)
        exchange = self._spec
        if local is not None:
            final = merge_top_n(local, self.keys, count, columns, ascending, node_name)
        else:
            if columns is None:
                raise PlanError(f"{what}: name the column(s) to rank rows by, e.g. by='amount'")
            up = bool(ascending)
            final = HashAggregate.of(
                TopN(self.keys, count, columns, node_name, up),
                "final" if combine else "complete",
            )
            if combine:
                combiner = PartialAggregate.of(TopN(self.keys, count, columns, node_name, up))
                exchange = dataclasses.replace(exchange, combiner=combiner)
        return self._stream._exchange(
            "top_n", node_name, lambda _: final, [(self._stream, exchange)]
        )

    def map_batches(
        self, fn: Callable[[pa.Table], pa.Table | pd.DataFrame], name: str | None = None
    ) -> Stream:
        """Apply ``fn`` to the batches of each hash partition (a key's rows all reach the
        same subtask, possibly over several batches)."""
        return self._stream._exchange(
            "map_batches",
            name,
            lambda n: MapBatches(self._stream._user_function(fn, f"map_batches '{n}'"), n),
            [(self._stream, self._spec)],
        )

    def sql(self, query: str, name: str | None = None) -> Stream:
        """Run ``query`` (DuckDB's SQL, over ``input``) in each subtask after the hash
        exchange: every row of a key is in the same subtask, so grouping or
        partitioning a window by (at least) the keys gives the answer over the whole
        stream::

            orders.key_by("customer").sql(
                "SELECT customer, sum(cents) AS cents FROM input GROUP BY customer"
            )

        Otherwise as ``Stream.sql``.
        """
        return self._stream._exchange(
            "sql", name, lambda n: SqlQuery(query, n), [(self._stream, self._spec)]
        )
