"""``Job``: a named dataflow job in a session; sources, planning and running.

Nothing runs until a stream is collected: ``Job.run`` plans the graph (which
rejects a bad job before any lazy source is fetched), fetches lazy sources, and
hands the plan to the runtime.  Around that it keeps the session's caches
(``api.cached_stream``): checked and, where a read needs it, filled before the
run; recorded as filled or read after it.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from hybrid_shuffle._words import plural
from hybrid_shuffle.api._validate import positive_count
from hybrid_shuffle.api.spark_plan import SparkPlanInfo
from hybrid_shuffle.api.stream import Stream
from hybrid_shuffle.errors import CacheLostError, CacheSessionError, ConfigError, PlanError
from hybrid_shuffle.operators import Identity
from hybrid_shuffle.operators.base import Operator
from hybrid_shuffle.plan.cache import Cache, CacheLayout
from hybrid_shuffle.plan.logical import ExchangeSpec, LogicalNode
from hybrid_shuffle.plan.partitioning import vertex_partitioning
from hybrid_shuffle.plan.planner import Plan, plan_job, reachable
from hybrid_shuffle.query_profile import run_times
from hybrid_shuffle.result import JobResult, edge_metrics, vertex_metrics
from hybrid_shuffle.runtime.progress import JobProgress, NoProgress, guarded

if TYPE_CHECKING:
    from hybrid_shuffle.api.cached_stream import CachedStream
    from hybrid_shuffle.runtime.cluster import Cluster
    from hybrid_shuffle.runtime.execution import Executed

__all__ = ["Job"]


class Job:
    """A named dataflow job built in a session; see the module docstring."""

    def __init__(self, cluster: Cluster, name: str, session: Any = None) -> None:
        #: what the job is planned with and runs on: config, slots, executors, caches
        self.cluster = cluster
        #: the session the job was made in (``hs.Session``), for the user's own calls in a
        #: build function (``job.session.spark``); the job itself uses only ``cluster``
        self.session = session if session is not None else cluster
        self.name = name
        self._ids = itertools.count()
        self._last: LogicalNode | None = None
        #: set when the job is a translated Spark plan (``Session.sql``): its exchanges
        #: and fallbacks, for ``explain``
        self.spark_plan: SparkPlanInfo | None = None
        #: for ``JobResult.profile()``: the seconds ``Session.sql`` (or
        #: ``from_dataframe``) took to make this job, and the seconds spent in ``plan``
        self.spark_total_seconds: float | None = None
        self.planning_seconds = 0.0

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
        self.cluster.check_open()
        parallelism = positive_count(parallelism, f"from_arrow '{name}': parallelism")
        transport = self.cluster.transport
        if isinstance(data, pa.Table):
            p = parallelism or self.cluster.config.parallelism
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

    def from_schema(
        self, schema: pa.Schema, name: str = "source", parallelism: int | None = None
    ) -> Stream:
        """A source that has ``schema``'s columns and no rows: a stand-in for a real input.

        It lets a job be built, planned and explained without its data -- what
        ``hybrid-shuffle explain`` and ``validate --pipeline`` give a pipeline file's
        ``build`` for each input its ``SCHEMAS`` declares, and what a test of a build
        function can use instead of data.  It is a real source all the same: run, it
        yields zero rows (each of its ``parallelism`` subtasks one empty table of the
        schema), so a job on it runs and returns what it makes of empty input.
        ``parallelism`` defaults to config ``parallelism``, as ``from_arrow``'s does;
        give the real source the same, and ``explain`` shows the run's plan.
        """
        self.cluster.check_open()
        what = f"from_schema '{name}'"
        parallelism = positive_count(parallelism, f"{what}: parallelism")
        if not isinstance(schema, pa.Schema):
            raise PlanError(
                f"{what}: got a {type(schema).__name__}; pass a pyarrow.Schema, like "
                "pa.schema([('id', pa.int64())])"
            )
        if not schema.names:
            raise PlanError(f"{what}: the schema has no columns; give it the input's columns")
        p = parallelism or self.cluster.config.parallelism
        empty = self.cluster.transport.put(schema.empty_table())  # one object, read by all
        node = self._node(
            "source",
            name,
            None,
            [],
            parallelism=p,
            source_splits=[[empty] for _ in range(p)],
            source_schema=schema,
        )
        return Stream(self, node)

    def from_spark(self, df: Any, name: str = "spark", parallelism: int | None = None) -> Stream:
        """A source from a Spark DataFrame (see ``hybrid_shuffle.spark`` for the copies made).

        ``parallelism`` defaults to the DataFrame's partition count.  Only the columns
        the job reads are converted (column pruning: Spark selects them first).
        """
        parallelism = positive_count(parallelism, f"from_spark '{name}': parallelism")
        bridge = self.cluster.bridge
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
                df if columns is None else _selected(df, columns), name, parallelism
            ),
        )
        stream = Stream(self, node)
        stream.spark_schema = df.schema
        return stream

    def from_parquet(
        self,
        path: Any,
        name: str | None = None,
        parallelism: int | None = None,
        columns: Sequence[str] | None = None,
        filter: Any = None,
    ) -> Stream:
        """A source reading Parquet at ``path`` (a file, a directory, hive-style partition
        directories, or a list of files) through ``pyarrow.dataset``; see
        ``hybrid_shuffle.sources.parquet``.

        The data is read by the source subtasks in the executors, each its own split
        of whole row groups (contiguous, about equal rows); the driver reads only the
        footers.  ``parallelism`` is the number of splits (default: config
        ``parallelism``, capped by the number of row groups left after the filter).
        ``columns`` (names) limits what is read; left out, the job reads only the
        columns its operators need (column pruning).  ``filter``, a
        ``pyarrow.compute`` expression such as ``pc.field("x") > 0``, is pushed into
        the scan: row groups its statistics exclude are skipped, the rest filtered
        exactly.  A missing path, or a column or a filter column the files lack, is
        a ``PlanError`` naming it."""
        from hybrid_shuffle.sources.parquet import ParquetSource

        self.cluster.check_open()
        node_name = name or "parquet"
        parallelism = positive_count(parallelism, f"from_parquet '{node_name}': parallelism")
        source = ParquetSource(path, node_name, columns, filter)
        if parallelism is None:
            parallelism = max(min(self.cluster.config.parallelism, len(source.fragments)), 1)
        p = parallelism
        node = self._node(
            "source",
            node_name,
            None,
            [],
            parallelism=p,
            source_schema=source.schema,
            load=lambda keep: list(source.splits(p, keep)),
            reload=True,
        )
        return Stream(self, node)

    def from_ray_data(
        self, ds: Any, name: str = "ray_data", parallelism: int | None = None
    ) -> Stream:
        """A source from a Ray Dataset's blocks, handed over as ObjectRefs (see
        ``hybrid_shuffle.ray_data``: no copy through the driver).  The Dataset runs
        when the job does; its blocks are dealt round-robin to ``parallelism``
        subtasks (default: config ``parallelism``).  A Dataset whose columns are not
        Arrow types is a ``PlanError``."""
        from hybrid_shuffle import ray_data

        self.cluster.check_open()
        what = f"from_ray_data '{name}'"
        parallelism = positive_count(parallelism, f"{what}: parallelism")
        schema = ray_data.arrow_schema(ds, what)
        node = self._node(
            "source",
            name,
            None,
            [],
            parallelism=parallelism or self.cluster.config.parallelism,
            source_schema=schema,
            load=lambda _columns: ray_data.block_refs(ds),
        )
        return Stream(self, node)

    def from_cache(self, cached: CachedStream, name: str | None = None) -> Stream:
        """A source reading a cache of this session (``Stream.cache``), as many subtasks
        as the cache has partitions.  If the cache is empty (never filled, invalidated
        or lost), the run fills it first, from its lineage in its own job.  A cache
        that was hash-partitioned on keys stays so: a ``key_by`` on the same keys needs
        no exchange (``explain()`` notes it)."""
        from hybrid_shuffle.api.cached_stream import CachedStream

        self.cluster.check_open()
        if not isinstance(cached, CachedStream):
            raise PlanError(
                f"from_cache: got a {type(cached).__name__}; pass what stream.cache() returned"
            )
        cache = cached._cache
        if cache.session_id != self.cluster.session_id:
            raise CacheSessionError(
                f"from_cache: cache '{cache.name}' belongs to session {cache.session_id}, not "
                f"to this session ({self.cluster.session_id}); a cache lives and dies with its "
                "session, so build and cache the stream again in this one"
            )
        node_name = name or f"from_cache({cache.name})"
        node = self._node("source", node_name, Identity(node_name), [], cache=cache)
        return Stream(self, node)

    def plan(self, stream: Stream | None = None) -> Plan:
        node = stream.node if stream is not None else self._last
        if node is None:
            raise PlanError(f"job '{self.name}' has no streams yet; start with from_arrow()")
        for n in reachable(node):  # an empty cache read in explain(): planned from its lineage
            if n.reads_cache and n.cache is not None and n.cache.filled is None:
                n.cache.expected = n.cache.expected or _expected_layout(n.cache)
        started = time.perf_counter()
        try:
            return plan_job(self.name, node, self.cluster.config, self.cluster.slots)
        finally:
            self.planning_seconds += time.perf_counter() - started

    def explain(self, stream: Stream | None = None) -> str:
        """Every edge with its effective mode, partitioner, partitions and region."""
        text = self.plan(stream).explain()
        if self.spark_plan is None:
            return text
        # each edge's line names the Spark exchange it replaces, on the line below it
        lines = []
        for line in text.rstrip("\n").splitlines():
            lines.append(line)
            name = line.split()[0] if line.startswith("  ") and line.strip() else None
            spark = self.spark_plan.edges.get(name) if name else None
            if spark is not None:
                lines.append(f"      Spark: {spark}")
        subtrees = self.spark_plan.spark_subtrees
        lines.append("Ran in Spark:" if subtrees else "Ran in Spark: nothing")
        lines += [f"  {s['operator']}: {s['reason']}" for s in subtrees]
        return "\n".join(lines) + "\n"

    def explain_data(self, stream: Stream | None = None) -> dict[str, Any]:
        """``explain()`` as plain data (``Plan.explain_data``): for scripts and
        ``hybrid-shuffle explain --format json``."""
        data = self.plan(stream).explain_data()
        if self.spark_plan is not None:
            data["spark_subtrees"] = list(self.spark_plan.spark_subtrees)
            data["spark_exchanges"] = dict(self.spark_plan.edges)
            for edge in data.get("edges", []):
                spark = self.spark_plan.edges.get(str(edge.get("name")))
                if spark is not None:
                    edge["spark_exchange"] = spark
        return data

    def run(
        self,
        stream: Stream,
        timeout: float | None = None,
        *,
        collect: bool = True,
        blocks: bool = False,
        progress: bool | JobProgress = False,
    ) -> JobResult:
        """Plan, fetch lazy sources, execute; the result table with per-edge metrics.
        ``timeout`` bounds the execution (default ``failover.job_timeout``).
        ``collect=False`` runs only for the caches the job fills (an empty table).
        ``blocks=True`` leaves the result in the object store: ``JobResult.blocks``
        holds its refs and the table is empty (``Stream.to_ray_data``).
        ``progress=True`` shows one bar per vertex while the job runs
        (``hybrid_shuffle.progress``); a ``JobProgress`` object is told instead.

        Caches first (``runtime.cache_catalog``): a read of a cache that lost a
        partition, or of an empty one from another job, fills it beforehand (a run
        of its own, with its own bars); a run that loses a cache's partition while it
        reads it runs again, filling it (the bars start over)."""
        cluster = self.cluster
        cluster.check_open()
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0
        ):
            raise ConfigError(
                f"collect: timeout must be a positive number of seconds, got {timeout!r}"
            )
        observer = _observer(progress)
        try:
            result = self._run(stream, timeout, collect, blocks, progress, observer)
        except BaseException as e:
            observer.failed(e)
            raise
        observer.finished()
        return result

    def _run(
        self,
        stream: Stream,
        timeout: float | None,
        collect: bool,
        blocks: bool,
        progress: bool | JobProgress,
        observer: JobProgress,
    ) -> JobResult:
        # imported here: the runtime imports Ray, which building and planning a job
        # never need (``hybrid-shuffle explain`` plans without it)
        from hybrid_shuffle.runtime.execution import execute

        cluster = self.cluster
        started = time.perf_counter()
        began, planned_before = time.time(), self.planning_seconds
        statuses: dict[str, str] = {}
        sources_seconds = 0.0
        attempts = max(cluster.config.failover.max_attempts, 1)
        for attempt in range(attempts):
            cluster.heal()  # executors that died since the last job are replaced first
            self._check_caches(stream.node)
            # a bad job fails here, before any cache is filled or lazy source fetched
            plan = self.plan(stream)
            if self._fill_caches_read(stream.node, statuses, timeout, progress):
                plan = self.plan(stream)
            lazy = [
                n
                for n in reachable(stream.node)
                if n.load is not None and (n.source_splits is None or n.reload)
            ]
            if lazy:  # the vertices must carry the fetched splits
                fetching = time.perf_counter()
                _resolve_all(lazy, plan)
                sources_seconds += time.perf_counter() - fetching
                plan = self.plan(stream)
            plan.collect = collect
            plan.keep_blocks = blocks
            try:
                executed = execute(
                    plan,
                    tracker=cluster.tracker,
                    master=cluster.master,
                    pool=cluster.pool,
                    transport=cluster.transport,
                    reader=cluster.reader,
                    timeout=plan.config.failover.job_timeout if timeout is None else timeout,
                    progress=observer,
                )
            except CacheLostError as e:
                if attempt + 1 == attempts:
                    raise CacheLostError(
                        f"{e} in {'each of ' if attempts != 1 else ''}{attempts} "
                        f"{plural(attempts, 'run')} (failover.max_attempts); the "
                        "executors holding it keep dying: check their nodes' memory, or keep "
                        "caches in the partition stores with shuffle.service: external"
                    ) from e
                continue  # the cache is checked, found lost and filled again
            break
        self._record_caches(plan, executed, statuses)
        table, reports = executed.table, executed.reports
        if table is None:  # no table came back: the plan, or the sink's tasks, know the columns
            sink = plan.graph.vertices[plan.graph.sink].name
            schema = plan.output_schema or next(
                (r.schema for r in reports if r.vertex == sink and r.schema), None
            )
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
            statuses,
            {plan.graph.vertices[v].name: r for v, r in plan.vertex_region.items()},
            executed.blocks,
            executed.speculative_attempts,
            adaptive=[s.change for s in plan.graph.join_switches if s.change is not None],
            times=run_times(
                plan,
                began,
                self.planning_seconds - planned_before,
                sources_seconds,
                executed.times,
                self.spark_plan,
                self.spark_total_seconds,
            ),
        )

    # -- caches --------------------------------------------------------------------------

    def _check_caches(self, sink: LogicalNode) -> None:
        """Before a run: every cache it reaches is checked, and a lost one emptied, so
        that its lineage becomes part of the run."""
        catalog = self.cluster.cache_catalog
        checked: set[str] = set()
        while True:  # an emptied cache uncovers its lineage, which may hold more caches
            fresh = [n for n in reachable(sink) if n.cache and n.cache.name not in checked]
            if not fresh:
                return
            for node in fresh:
                assert node.cache is not None
                checked.add(node.cache.name)
                catalog.check(node.cache)

    def _fill_caches_read(
        self,
        sink: LogicalNode,
        statuses: dict[str, str],
        timeout: float | None,
        progress: bool | JobProgress,
    ) -> bool:
        """Fill every empty cache the run reads from another job's lineage, by a run of
        that job; whether any was."""
        filled_any = False
        for node in reachable(sink):
            cache = node.cache
            if cache is not None and node.reads_cache and not cache.readable:
                filled = cache.job.run(_stream(cache), timeout, collect=False, progress=progress)
                statuses.update(filled.caches)
                filled_any = True
        return filled_any

    def _record_caches(self, plan: Plan, executed: Executed, statuses: dict[str, str]) -> None:
        """After a run: the caches it filled are filled, the ones it read had a hit."""
        catalog = self.cluster.cache_catalog
        for vertex in plan.cache_fills():
            cache = vertex.cache_fill
            assert cache is not None
            schema = next(
                (r.schema for r in executed.reports if r.vertex == vertex.name and r.schema), None
            )
            layout = CacheLayout(
                vertex.parallelism,
                schema or plan.cache_schemas.get(cache.name),
                vertex_partitioning(plan.graph, vertex.id),
            )
            statuses[cache.name] = "recomputed" if cache.fills else "filled"
            catalog.filled(cache, executed.cache_partitions[vertex.id], layout, executed.reports)
        for vertex in plan.cache_reads():
            cache = vertex.cache_read
            assert cache is not None
            if cache.name not in statuses:  # not filled for this run: a hit
                statuses[cache.name] = "read"
                catalog.hit(cache)


def _observer(progress: bool | JobProgress) -> JobProgress:
    """What ``progress=`` asks for, made safe to call (``runtime.progress.guarded``)."""
    if progress is True:
        from hybrid_shuffle.progress import ProgressBars

        return guarded(ProgressBars())
    if progress is False or progress is None:
        return NoProgress()
    if not isinstance(progress, JobProgress):
        raise ConfigError(
            f"collect: progress must be True, False or a JobProgress observer, got "
            f"{type(progress).__name__}"
        )
    return guarded(progress)


def _stream(cache: Cache) -> Stream:
    """The cached stream in its own job (what a fill runs)."""
    return Stream(cache.job, cache.node)


def _expected_layout(cache: Cache) -> CacheLayout:
    """What a cache not filled yet will look like: planned from its lineage."""
    plan = cache.job.plan(_stream(cache))
    sink = plan.graph.sink
    return CacheLayout(
        plan.graph.vertices[sink].parallelism,
        plan.output_schema,
        vertex_partitioning(plan.graph, sink),
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


def _selected(df: Any, columns: Sequence[str]) -> Any:
    """``df.select(*columns)``, keeping the size hint the bridge reads (``spark.SIZE_HINT``)."""
    from hybrid_shuffle.spark import SIZE_HINT

    selected = df.select(*columns)
    hint = getattr(df, SIZE_HINT, None)
    if hint is not None:
        setattr(selected, SIZE_HINT, hint)
    return selected
