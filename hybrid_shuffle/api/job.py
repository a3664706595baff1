"""``Job``: a named dataflow job in a session; sources, planning and running.

Nothing runs until a stream is collected: ``Job.run`` plans the graph (which
rejects a bad job before any lazy source is fetched), fetches lazy sources, and
hands the plan to the runtime.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from hybrid_shuffle.api._validate import positive_count
from hybrid_shuffle.api.stream import Stream
from hybrid_shuffle.errors import ConfigError, PlanError
from hybrid_shuffle.operators.base import Operator
from hybrid_shuffle.plan.logical import ExchangeSpec, LogicalNode
from hybrid_shuffle.plan.planner import Plan, plan_job, reachable
from hybrid_shuffle.result import JobResult, edge_metrics, vertex_metrics
from hybrid_shuffle.runtime.execution import execute

if TYPE_CHECKING:
    from hybrid_shuffle.session import Session

__all__ = ["Job"]


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
        data: pa.Table | Sequence[Any],
        name: str = "source",
        parallelism: int | None = None,
    ) -> Stream:
        """A source of ``parallelism`` subtasks.

        A single table is sliced into ``parallelism`` (default: config
        ``parallelism``) contiguous splits; a list of tables or Ray ObjectRefs of
        tables is dealt round-robin to ``parallelism`` (default: one per element)
        subtasks.  Tables are put into the object store by the driver, which owns
        them for the job's life.
        """
        self.session.check_open()
        parallelism = positive_count(parallelism, f"from_arrow '{name}': parallelism")
        transport = self.session.transport
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
                if not (isinstance(x, pa.Table) or transport.is_object_ref(x)):
                    raise PlanError(
                        f"from_arrow '{name}': got a {type(x).__name__}; pass pyarrow Tables "
                        "or ObjectRefs of them"
                    )
        refs = [transport.put(x) if isinstance(x, pa.Table) else x for x in pieces]
        splits: list[list[Any]] = [refs[i::p] for i in range(p)]
        node = self._node(
            "source", name, None, [], parallelism=p, source_splits=splits, source_schema=schema
        )
        return Stream(self, node)

    def from_spark(self, df: Any, name: str = "spark", parallelism: int | None = None) -> Stream:
        """A source from a Spark DataFrame (see ``hybrid_shuffle.spark`` for the copies made).

        ``parallelism`` defaults to the DataFrame's partition count.  Only the columns
        the job reads are converted (column pruning: Spark selects them first).
        """
        parallelism = positive_count(parallelism, f"from_spark '{name}': parallelism")
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
            load=lambda columns: bridge.to_arrow_refs(
                df if columns is None else df.select(*columns), name, parallelism
            ),
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

    def run(self, stream: Stream, timeout: float | None = None) -> JobResult:
        """Plan, fetch lazy sources, execute; the result table with per-edge metrics.
        ``timeout`` bounds the execution (default ``failover.job_timeout``)."""
        self.session.check_open()
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0
        ):
            raise ConfigError(
                f"collect: timeout must be a positive number of seconds, got {timeout!r}"
            )
        started = time.perf_counter()
        plan = self.plan(stream)  # fails on a bad job before any lazy source is fetched
        lazy = [n for n in reachable(stream.node) if n.load is not None and n.source_splits is None]
        _resolve_all(lazy, plan)
        sources_seconds = time.perf_counter() - started
        if lazy:  # the vertices must carry the fetched splits
            plan = self.plan(stream)
        session = self.session
        session.heal()  # executors that died since the last job are replaced first
        executed = execute(
            plan,
            tracker=session.tracker,
            master=session.master,
            pool=session.pool,
            transport=session.transport,
            reader=session.reader,
            timeout=plan.config.failover.job_timeout if timeout is None else timeout,
        )
        table, reports = executed.table, executed.reports
        if table is None:  # the sink saw no table at all: only the plan knows the columns
            schema = plan.output_schema
            table = schema.empty_table() if schema is not None else pa.table({})
        return JobResult(
            table,
            edge_metrics(reports, plan.edge_modes()),
            reports,
            time.perf_counter() - started,
            plan.explain(),
            sources_seconds,
            executed.restarts,
            vertex_metrics(reports, plan.vertex_names()),
        )


def _resolve_all(nodes: Sequence[LogicalNode], plan: Plan) -> None:
    """Fetch the lazy sources, at the same time: Spark runs their conversions as
    concurrent jobs on its executor cores while the driver receives both streams."""
    if len(nodes) <= 1:
        for node in nodes:
            node.resolve(plan.source_columns.get(node.id))
        return
    with ThreadPoolExecutor(len(nodes), thread_name_prefix="hs-source") as pool:
        futures = [pool.submit(n.resolve, plan.source_columns.get(n.id)) for n in nodes]
        for future in futures:
            future.result()  # the first failure, in node order
