"""The builder a user writes jobs with: ``Job`` and ``Stream``.

Each call adds a logical node; nothing runs until ``to_arrow()``,
``to_pandas()`` or ``collect()``.  Every exchange (``key_by``, ``sort``,
``join``, ``rebalance``, ``broadcast``) takes ``edge=`` (the name YAML refers
to), ``mode=`` (YAML wins over it) and ``partitions=`` (the consumer's
parallelism).  Operators with forward edges and equal parallelism are chained
into one task by the planner.
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa
import ray

from hybrid_shuffle.errors import PlanError
from hybrid_shuffle.graph import Partitioner, PartitionerKind
from hybrid_shuffle.operators import (
    Filter,
    HashAggregate,
    HashJoin,
    Identity,
    MapBatches,
    PartialAggregate,
    Select,
    SortPartition,
)
from hybrid_shuffle.operators.base import Operator
from hybrid_shuffle.planner import ExchangeSpec, LogicalNode, Plan, plan_job, reachable
from hybrid_shuffle.result import JobResult, edge_metrics
from hybrid_shuffle.scheduler import Scheduler

if TYPE_CHECKING:
    from hybrid_shuffle.session import Session

__all__ = ["Job", "KeyedStream", "Stream"]


class Job:
    """A named dataflow job built in a session; see the module docstring."""

    def __init__(self, session: Session, name: str) -> None:
        self.session = session
        self.name = name
        self._ids = itertools.count()
        self._last: LogicalNode | None = None

    def _node(
        self,
        kind: str,
        name: str | None,
        operator: Operator | None,
        inputs: list[tuple[LogicalNode, ExchangeSpec | None]],
        **kwargs: Any,
    ) -> LogicalNode:
        node_id = next(self._ids)
        node = LogicalNode(node_id, name or f"{kind}_{node_id}", operator, inputs, **kwargs)
        self._last = node
        return node

    def from_arrow(
        self,
        data: pa.Table | Sequence[pa.Table | ray.ObjectRef],
        name: str = "source",
        parallelism: int | None = None,
    ) -> Stream:
        """A source of ``parallelism`` subtasks.

        A single table is sliced into ``parallelism`` (default: config
        ``parallelism``) contiguous splits; a list of tables or ObjectRefs is
        dealt round-robin to ``parallelism`` (default: one per element) subtasks.
        Tables are ``ray.put`` by the driver, which owns them for the job's life.
        """
        if isinstance(data, pa.Table):
            p = parallelism or self.session.config.parallelism
            rows = -(-data.num_rows // p) if data.num_rows else 0
            pieces: list[Any] = [data.slice(i * rows, rows) for i in range(p)]
            schema: pa.Schema | None = data.schema
        else:
            pieces = list(data)
            if not pieces:
                raise PlanError(f"from_arrow '{name}': the list of tables is empty; pass a table")
            p = parallelism or len(pieces)
            tables = [x for x in pieces if isinstance(x, pa.Table)]
            schema = tables[0].schema if tables else None
            for x in pieces:
                if not isinstance(x, (pa.Table, ray.ObjectRef)):
                    raise PlanError(
                        f"from_arrow '{name}': got a {type(x).__name__}; pass pyarrow Tables "
                        "or ObjectRefs of them"
                    )
        if p < 1:
            raise PlanError(f"from_arrow '{name}': parallelism must be positive, got {p}")
        refs = [ray.put(x) if isinstance(x, pa.Table) else x for x in pieces]
        splits: list[list[Any]] = [refs[i::p] for i in range(p)]
        node = self._node(
            "source", name, None, [], parallelism=p, source_splits=splits, source_schema=schema
        )
        return Stream(self, node)

    def from_spark(self, df: Any, name: str = "spark", parallelism: int | None = None) -> Stream:
        """A source from a Spark DataFrame (see ``hybrid_shuffle.spark`` for the copies made).

        ``parallelism`` defaults to the DataFrame's partition count.
        """
        bridge = self.session.bridge
        schema = bridge.arrow_schema(df, name)
        if parallelism is None:
            parallelism = max(int(df._jdf.rdd().getNumPartitions()), 1)
        node = self._node(
            "source",
            name,
            None,
            [],
            parallelism=parallelism,
            source_schema=schema,
            load=lambda: bridge.to_arrow_refs(df, name, parallelism),
        )
        return Stream(self, node)

    def plan(self, stream: Stream | None = None) -> Plan:
        node = stream.node if stream is not None else self._last
        if node is None:
            raise PlanError(f"job '{self.name}' has no streams yet; start with from_arrow()")
        return plan_job(self.name, node, self.session.config, self.session.slots)

    def explain(self, stream: Stream | None = None) -> str:
        """Every edge with its effective mode, partitioner, partitions and region."""
        return self.plan(stream).explain()

    def run(self, stream: Stream) -> JobResult:
        started = time.perf_counter()
        plan = self.plan(stream)  # fails on a bad job before any lazy source is fetched
        lazy = [n for n in reachable(stream.node) if n.load is not None and n.source_splits is None]
        for node in lazy:
            node.resolve()
        sources_seconds = time.perf_counter() - started
        if lazy:  # the vertices must carry the fetched splits
            plan = self.plan(stream)
        scheduler = Scheduler(plan, self.session.master, self.session.executors)
        try:
            reports = scheduler.run()
            table = scheduler.read_result()
        finally:
            scheduler.release()
        if table is None:
            sink = plan.graph.vertices[plan.graph.sink].name
            seen = [r.schema for r in reports if r.schema is not None and r.vertex == sink]
            schema = seen[0] if seen else plan.output_schema
            table = schema.empty_table() if schema is not None else pa.table({})
        return JobResult(
            table,
            edge_metrics(reports, scheduler.edge_modes()),
            reports,
            time.perf_counter() - started,
            plan.explain(),
            sources_seconds,
        )


def _ship_by_value(fn: Any) -> Any:
    """Make executors receive ``fn``'s module by value when they could not import it.

    Ray pickles functions by reference to their module; a pipeline's own module
    (a script folder on ``sys.path``, a file the CLI loaded) does not exist in the
    executors, so it travels with the function instead, as Ray's docs advise.
    """
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    path = getattr(module, "__file__", None)
    if module is None or path is None or module.__name__ == "__main__":
        return fn
    if any(part in path for part in ("site-packages", "dist-packages")) or (
        module.__name__.split(".")[0] == "hybrid_shuffle"
    ):
        return fn
    ray.cloudpickle.register_pickle_by_value(module)
    return fn


class Stream:
    """A distributed stream of Arrow tables; each method adds an operator or exchange."""

    def __init__(self, job: Job, node: LogicalNode) -> None:
        self.job = job
        self.node = node

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
        inputs: list[tuple[Stream, ExchangeSpec]],
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
        return self._chain("map_batches", name, lambda n: MapBatches(_ship_by_value(fn), n))

    def filter(self, predicate: Any, name: str | None = None) -> Stream:
        """Keep rows where ``predicate`` (a ``pyarrow.compute`` expression or a function
        returning a boolean mask) is true."""
        return self._chain("filter", name, lambda n: Filter(_ship_by_value(predicate), n))

    def select(self, *columns: str, name: str | None = None) -> Stream:
        return self._chain("select", name, lambda n: Select(list(columns), n))

    # -- exchanges ------------------------------------------------------------------------

    def key_by(
        self,
        *keys: str,
        edge: str | None = None,
        mode: str | None = None,
        partitions: int | None = None,
    ) -> KeyedStream:
        """Hash-partition by ``keys``; aggregate with ``.aggregate()``."""
        if not keys:
            raise PlanError("key_by: name at least one key column")
        spec = ExchangeSpec(Partitioner(PartitionerKind.HASH, tuple(keys)), edge, mode, partitions)
        return KeyedStream(self, list(keys), spec)

    def rebalance(
        self, edge: str | None = None, mode: str | None = None, partitions: int | None = None
    ) -> Stream:
        """Round-robin rows over ``partitions`` consumers (evens out skewed partitions)."""
        spec = ExchangeSpec(Partitioner(PartitionerKind.ROUND_ROBIN), edge, mode, partitions)
        return self._exchange("rebalance", None, lambda n: Identity(n), [(self, spec)])

    def broadcast(
        self, edge: str | None = None, mode: str | None = None, partitions: int | None = None
    ) -> Stream:
        """Send every row to every one of ``partitions`` consumers."""
        spec = ExchangeSpec(Partitioner(PartitionerKind.BROADCAST), edge, mode, partitions)
        return self._exchange("broadcast", None, lambda n: Identity(n), [(self, spec)])

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
        partitions: int | None = None,
        name: str | None = None,
    ) -> Stream:
        """Hash join with ``other`` on ``on`` (``how``: inner or left).

        Both sides are hash-partitioned on the keys; the edges are named
        ``<edge>.left`` and ``<edge>.right`` (default ``<join name>.left/right``).
        """
        if how not in ("inner", "left"):
            raise PlanError(f"join: how='{how}' is not supported; use 'inner' or 'left'")
        if other.job is not self.job:
            raise PlanError("join: both streams must belong to the same job")
        keys = (on,) if isinstance(on, str) else tuple(on)
        node_name = name or f"join_{next(self.job._ids)}"
        base = edge or node_name
        part = Partitioner(PartitionerKind.HASH, keys)
        left = ExchangeSpec(part, f"{base}.left", mode, partitions)
        right = ExchangeSpec(part, f"{base}.right", mode, partitions)
        return self._exchange(
            "join",
            node_name,
            lambda n: HashJoin(list(keys), how, n),
            [(self, left), (other, right)],
        )

    def sort(
        self,
        by: str | Sequence[str],
        descending: bool = False,
        edge: str | None = None,
        mode: str | None = None,
        partitions: int | None = None,
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
        spec = ExchangeSpec(part, edge, mode, partitions)
        return self._exchange(
            "sort", name, lambda n: SortPartition(keys, descending, n), [(self, spec)]
        )

    # -- running --------------------------------------------------------------------------

    def collect(self) -> JobResult:
        """Run the job; the result table plus per-edge metrics."""
        return self.job.run(self)

    def to_arrow(self) -> pa.Table:
        return self.collect().table

    def to_pandas(self) -> pd.DataFrame:
        return self.to_arrow().to_pandas()

    def to_spark(self) -> Any:
        """Run the job; a Spark DataFrame of the result, with the result's column types."""
        return self.job.session.bridge.to_dataframe(self.to_arrow())

    def explain(self) -> str:
        return self.job.explain(self)


class KeyedStream:
    """A stream hash-partitioned by keys; the exchange happens at the next operator."""

    def __init__(self, stream: Stream, keys: list[str], spec: ExchangeSpec) -> None:
        self._stream = stream
        self.keys = keys
        self._spec = spec

    def aggregate(
        self,
        spec: Mapping[str, str | Sequence[str]],
        name: str | None = None,
        combine: bool = True,
    ) -> Stream:
        """Group by the keys: ``{"amount": ["sum", "count"]}`` gives ``amount_sum``,
        ``amount_count`` (sum, count, min, max, mean).

        ``combine`` (default) pre-aggregates in every producer before the exchange,
        as Spark's map-side combine does, so the edge carries partials (one row per
        key and producer) instead of every row; ``combine=False`` ships the rows.
        """
        node_name = name or f"aggregate_{next(self._stream.job._ids)}"
        final = HashAggregate(self.keys, spec, node_name, "final" if combine else "complete")
        exchange = self._spec
        if combine:
            exchange = dataclasses.replace(
                exchange, combiner=PartialAggregate(self.keys, spec, node_name)
            )
        return self._stream._exchange(
            "aggregate", node_name, lambda n: final, [(self._stream, exchange)]
        )

    def map_batches(
        self, fn: Callable[[pa.Table], pa.Table | pd.DataFrame], name: str | None = None
    ) -> Stream:
        """Apply ``fn`` to the batches of each hash partition (a key's rows all reach the
        same subtask, possibly over several batches)."""
        return self._stream._exchange(
            "map_batches",
            name,
            lambda n: MapBatches(_ship_by_value(fn), n),
            [(self._stream, self._spec)],
        )
