"""The YAML job config, validated once at load into frozen dataclasses.

Every mistake becomes one ``ConfigError`` sentence that names the key path and
what to write instead (``shuffle.bufer_size: unknown key; allowed keys are: ...``).
Nothing downstream sees a dict: the planner, scheduler and executors get these
typed objects.

A setting that would only fail later, in every job, or silently do nothing is
refused here too: ``credits`` outside 1..1024 (a huge value lifts the bound on
pipelined edges), ``wait_timeout`` outside 1 ms..1 day, sizes that are or round
to 0 bytes, and a config file that is not UTF-8 text.  Every way in -- a YAML
file, a mapping, a hand-built ``Config`` given to ``load_config``, and
``Config.with_overrides`` -- goes through the same validators.  What needs the
file system or the job is checked later, by whoever has it: the spill
directory at ``Session()`` (``hybrid_shuffle.spill_dirs.check_spill_root``),
the ``edges:`` names at plan time (``Config.check_job``).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import types
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hybrid_shuffle.config_file import read_yaml_file
from hybrid_shuffle.errors import ConfigError
from hybrid_shuffle.quiet import LOG_LEVELS
from hybrid_shuffle.shuffle.partition_type import MODES
from hybrid_shuffle.sizes import format_size, parse_size
from hybrid_shuffle.spill_dirs import default_spill_dir

__all__ = [
    "AUTO",
    "BATCH_MODES",
    "EDGE_CONSUMERS",
    "EDGE_KINDS",
    "MAX_CREDITS",
    "MAX_WAIT_TIMEOUT",
    "MIN_WAIT_TIMEOUT",
    "OPERATORS_MIN_MEMORY",
    "SERVICES",
    "AdaptiveConfig",
    "Config",
    "ConfigWarning",
    "EdgeConfig",
    "EdgeMatch",
    "EdgeRule",
    "FailoverConfig",
    "OperatorsConfig",
    "RayConfig",
    "ShuffleConfig",
    "SparkConfig",
    "SpeculationConfig",
    "check_slots",
    "format_size",
    "load_config",
    "parse_size",
]

MiB = 1 << 20
#: pipelined buffers in flight per subpartition; beyond this the credit bound bounds nothing
#: (1024 buffers of the default 4 MiB are 4 GiB per subpartition)
MAX_CREDITS = 1024
#: seconds: a wait shorter than a millisecond fails before any answer can arrive
MIN_WAIT_TIMEOUT = 0.001
#: seconds: a day; longer only hides a hung job
MAX_WAIT_TIMEOUT = 86400.0


#: ``partitions: auto``: the consumer's parallelism is decided when its producers finish
AUTO = "auto"
#: the modes ``shuffle.batch_mode`` may name: the partition types a batch job reads after
#: (or, hybrid, while) they are written; never ``pipelined`` (FLIP-331's point 8)
BATCH_MODES = ("blocking", "hybrid-full", "hybrid-selective")
#: the built-in shuffle services (``hybrid_shuffle.shuffle.service.BUILTIN_SERVICES``)
SERVICES = ("executor-local", "external")
#: what ``edge_rules[i].match.kind`` may name: how an edge routes rows.  ``single`` is
#: Spark's ``SinglePartition`` exchange (a global aggregate), ``gather`` the engine's own
#: step into one task (a limit's or top-n's partial results, a nested loop join's
#: streamed side)
EDGE_KINDS = ("hash", "broadcast", "single", "range", "round_robin", "gather")
#: what ``edge_rules[i].match.into`` may name: the kind of operator consuming the edge
EDGE_CONSUMERS = ("join", "aggregate", "sort", "window", "limit", "union", "udf")


class ConfigWarning(UserWarning):
    """A setting that is valid but will not do what it seems to (e.g. ``edges:`` written
    for a job of another name)."""


@dataclass(frozen=True)
class EdgeConfig:
    """``edges.NAME``: one exchange, named by ``edge=`` in code (or the generated
    ``producer->consumer`` name ``explain()`` shows).  YAML wins over code.

    ``keep`` is only an acknowledgement: a mode set here always runs as set, and the
    output-on-EOF rule never changes it.  Where the rule would have given another mode,
    ``explain()`` warns, unless ``keep`` says the mode goes against the rule on purpose;
    then it notes it.  Under ``shuffle.default_mode: auto`` the advisor only picks modes
    for edges with none set, so ``keep`` means the same there.  ``keep`` without ``mode``
    is refused at load: there would be nothing to keep."""

    #: the edge's exchange mode: pipelined, blocking, hybrid-selective or hybrid-full
    #: (default: the mode set in code, else the output-on-EOF rule, else
    #: ``shuffle.default_mode``)
    mode: str | None = None
    #: the consumer's parallelism, or ``auto`` (decided from the bytes written; see
    #: ``adaptive:``)
    partitions: int | str | None = None
    #: the shuffle service that keeps this edge's partitions (default ``shuffle.service``)
    service: str | None = None
    #: true: ``mode`` goes against the output-on-EOF rule on purpose, so ``explain()``
    #: reports it as a note, not a warning (the mode runs as set either way); needs ``mode``
    keep: bool = False


@dataclass(frozen=True)
class EdgeMatch:
    """``edge_rules[i].match``: what an edge must be for the rule to apply.  Every key
    given must hold; at least one is given."""

    #: how the edge routes rows: hash, broadcast, single, range, round_robin or gather
    kind: str | None = None
    #: a hash or range edge on exactly these columns, in this order (a translated Spark
    #: plan's names, as ``df.explain()`` prints them; a hand-built job's key columns)
    keys: tuple[str, ...] | None = None
    #: the operator consuming the edge: join, aggregate, sort, window, limit, union or udf
    into: str | None = None

    def matches(self, kind: str | None, keys: tuple[str, ...], into: str | None) -> bool:
        """Whether an edge of this ``kind``, on these ``keys``, into an operator of this
        kind (``None``: none of the list) is matched."""
        return (
            (self.kind is None or self.kind == kind)
            and (self.keys is None or self.keys == keys)
            and (self.into is None or self.into == into)
        )

    def describe(self) -> str:
        """The match as YAML writes it: ``{kind: hash, keys: [a, b]}``."""
        parts = [f"kind: {self.kind}"] if self.kind else []
        if self.keys is not None:
            parts.append(f"keys: [{', '.join(self.keys)}]")
        if self.into:
            parts.append(f"into: {self.into}")
        return "{" + ", ".join(parts) + "}"


@dataclass(frozen=True)
class EdgeRule:
    """``edge_rules[i]``: the settings of every edge that matches ``match`` and that no
    ``edges:`` entry names.  Rules are tried in order and the first that matches an
    edge gives all of its settings; an edge no rule matches keeps what code and the
    defaults give it.  Matching edges by what they are, not by name, is what lets one
    config hold for every plan Spark makes of a job: Spark numbers its exchanges anew
    when the data grows and it picks another join.  A rule is YAML, so it wins over code
    as ``edges:`` does; a rule that matches no edge is a note in ``explain()``."""

    #: what the edge must be (``{kind: broadcast}``, ``{keys: [a, b]}``, ``{into: sort}``)
    match: EdgeMatch
    #: the matched edges' mode: pipelined, blocking, hybrid-selective or hybrid-full
    mode: str | None = None
    #: the matched edges' consumer parallelism, or ``auto``
    partitions: int | str | None = None
    #: the shuffle service that keeps the matched edges' partitions
    service: str | None = None
    #: true: ``mode`` goes against the output-on-EOF rule on purpose (as ``edges.NAME.keep``)
    keep: bool = False

    def settings(self) -> EdgeConfig:
        """The rule's settings, as an ``edges:`` entry would give them."""
        return EdgeConfig(self.mode, self.partitions, self.service, self.keep)


@dataclass(frozen=True)
class VertexConfig:
    """``vertices.NAME``: where an operator's tasks run and how many there are (YAML wins
    over code, as for edges).  NAME is an operator's name (``name=`` in code)."""

    #: the operator's slot sharing group (``Stream.slot_sharing_group``)
    slot_sharing_group: str | None = None
    #: the operator's parallelism; not for sources (their splits are made in code)
    parallelism: int | None = None


@dataclass(frozen=True)
class AdaptiveConfig:
    """What is decided at run time, from the bytes tasks wrote (Spark's AQE).
    ``partitions: auto`` (AQE's partition coalescing, Flink's adaptive batch
    scheduler): a consumer whose inputs are all blocking gets
    ``ceil(bytes its producers wrote / target_bytes)`` subtasks, clamped to
    ``min_partitions..max_partitions`` and to the session's slots.  Producers write
    ``max_partitions`` subpartitions of a hash or round-robin edge, and each consumer
    reads a contiguous range of them.  ``broadcast_bytes`` (AQE's
    ``DynamicJoinSelection``): a shuffled join of a translated Spark plan whose build
    side wrote at most this many bytes runs as a broadcast join instead, in the tasks
    of its other side's producer, whose exchange is left out; that producer waits for
    the build side to finish first.  A build side over ``broadcast_bytes`` is still
    broadcast when it is at most ``broadcast_max_bytes`` and one copy of it per probe
    task stays within the estimate of the probe side (its rows as Arrow, from the
    files' footers, where it is one Parquet scan; Spark's figure otherwise: the guide
    to Spark plans says more), as Trino's cost-based join distribution chooses, capped
    as its ``join_max_broadcast_table_size`` caps it: a fixed
    threshold alone keeps a join shuffled once the data grows, however much larger
    its other side is.  ``explain()`` says which joins may switch and, after a run,
    which did (``JobResult.adaptive``).  ``semi_join_filters`` (Spark's runtime
    filters, ``InjectRuntimeFilter``): a shuffled semi join of a translated plan whose
    right side is what a filter keeps of an aggregate (``IN (.. GROUP BY .. HAVING
    ..)``) computes that side first, and its keys drop the other side's rows that
    cannot join before their exchange; a task that gets more than
    ``semi_join_filter_max_keys`` of them lets every row pass instead (a hash table of
    them all would cost it more than the rows it could drop: Spark caps its runtime
    filters' creation side the same way).  So does a shuffled semi or anti join
    (``IN``, ``EXISTS``, ``NOT EXISTS``; not ``NOT IN``, where one null key on the right
    side empties the answer) whose left side a filter cuts, and such an inner join whose
    right side is an aggregate's groups by the join's keys (TPC-H Q17's average per
    part): the left side's producer writes its rows to the stage making the right side's
    rows too (the aggregate's input), which drops those whose key none of them has
    before their exchange, under the same cap.  It goes first only
    where it is estimated at most ``broadcast_max_bytes`` (every task of the right side
    reads all of it) and the right side over ``broadcast_bytes`` (a smaller right side is
    for ``broadcast_bytes`` to broadcast, which needs the opposite order: such a join
    never switches once its left side goes first)."""

    #: one consumer subtask per this many bytes its producers wrote
    target_bytes: int = 64 * MiB
    #: the fewest subtasks an adaptive consumer gets
    min_partitions: int = 1
    #: the most subtasks an adaptive consumer gets; also the subpartitions its
    #: producers write
    max_partitions: int = 64
    #: a shuffled join whose build side wrote at most this many bytes becomes a
    #: broadcast join at run time (Spark's spark.sql.autoBroadcastJoinThreshold default;
    #: 0 turns it off)
    broadcast_bytes: int = 10 * MiB
    #: a build side over broadcast_bytes is still broadcast if it wrote at most this
    #: many bytes (and a quarter of operators.memory) and one copy of it per probe task
    #: stays within the estimate of the probe side (the copies then move fewer bytes
    #: than the shuffle they replace); 0 turns this off
    broadcast_max_bytes: int = 128 * MiB
    #: a shuffled semi join's right side kept by a filter of an aggregate (HAVING) is
    #: computed first, and its keys filter the other side before its exchange; so is
    #: a shuffled semi, anti (or, over an aggregate, inner) join's left side that a
    #: filter cuts, for its right side
    semi_join_filters: bool = True
    #: a task of the other side given more keys than this lets every row pass
    semi_join_filter_max_keys: int = 1_000_000


@dataclass(frozen=True)
class SpeculationConfig:
    """``failover.speculation``: speculative execution, after Flink's FLIP-168.  Once
    ``quantile`` of a vertex's subtasks have finished, a subtask running longer than
    ``multiplier`` times their median runtime (and at least ``min_runtime``) gets a
    second attempt on another executor's free slot; the first to finish wins and the
    other is cancelled.  Only tasks whose outputs are attempt-numbered and not yet read
    are eligible (blocking and hybrid-full outputs, sinks); ``explain()`` says which."""

    #: true: slow subtasks of eligible vertices get a second, speculative attempt
    enabled: bool = False
    #: a subtask is slow past this many times the median runtime of the finished ones
    #: (at least 1)
    multiplier: float = 1.5
    #: the share of a vertex's subtasks that must have finished before any of its
    #: subtasks is judged slow (above 0, at most 1)
    quantile: float = 0.75
    #: seconds a subtask runs at least before it is judged slow (a number, or a string
    #: such as ``1 s`` or ``500 ms``)
    min_runtime: float = 1.0


@dataclass(frozen=True)
class FailoverConfig:
    """Region failover (Flink's ``RestartPipelinedRegionFailoverStrategy`` with an
    exponential-delay restart strategy).  A failed task -- a user exception, a lost
    executor, a lost partition -- restarts its pipelined region; a task that failed
    ``max_attempts`` times fails the job.  The n-th restart of a task waits
    ``backoff * 2**(n-1)`` seconds.  ``job_timeout`` bounds a whole job
    (``collect(timeout=)`` overrides it; None: only each single wait is bounded)."""

    #: a task that failed this many times fails the job (``JobFailedError``)
    max_attempts: int = 3
    #: seconds before the first restart of a task, doubled at each further one (a
    #: number, or a string such as ``0.5 s`` or ``200 ms``)
    backoff: float = 0.5
    #: seconds a whole job may run before a ``JobTimeoutError`` (null: no bound but
    #: ``shuffle.wait_timeout`` on each single wait)
    job_timeout: float | None = None
    #: speculative execution of slow subtasks (see ``failover.speculation`` below)
    speculation: SpeculationConfig = field(default_factory=SpeculationConfig)


#: The smallest ``operators.memory`` the engine can honour, and why (measured with DuckDB
#: 1.5, one thread, a streamed ``GROUP BY`` of 5M rows over 2.5M keys; the figures are in
#: ``operators/duck/database.py``): ``memory`` is the task's DuckDB ``memory_limit``,
#: which bounds DuckDB's buffer pool, not the process.  Past the pool a task holds a fixed
#: 20-25 MiB (DuckDB's allocations outside it, the Arrow batches queued into and out of a
#: query), so below about 48 MiB no limit keeps a task within 1.5x its budget, and below
#: about 24 MiB DuckDB's hash aggregate cannot run at all.  At 64 MiB a task's peak is
#: about 1.3x.  A smaller figure is refused when the config is loaded rather than raised
#: in silence: the figure a user reads in ``explain()`` is the one in force.
OPERATORS_MIN_MEMORY = 64 * MiB


@dataclass(frozen=True)
class OperatorsConfig:
    """How a task runs its operators: its DuckDB's threads, and the memory each sort,
    join, aggregate or co_group task may use for its state (Flink's managed memory
    per slot).  Every such operator runs on the task's DuckDB, which keeps that
    state within the memory and spills the rest to a private directory under
    ``shuffle.spill_dir`` (a sort whose partition fits in half the memory is sorted
    on Arrow instead, and an aggregate of a dense integer key whose input fits in
    half is reduced by ``np.bincount``).  A task with several such operators (an aggregate and
    the combiner in front of its exchange) splits the memory evenly between them."""

    #: bytes of operator state per task, at least 64 MiB (a smaller figure is refused:
    #: ``OPERATORS_MIN_MEMORY``); its DuckDB gets three quarters as memory_limit, the
    #: rest is headroom; beyond it sorts, joins and aggregates spill
    memory: int = 512 * MiB
    #: threads each task's DuckDB may use (one slot is one core, so 1)
    threads: int = 1


@dataclass(frozen=True)
class ShuffleConfig:
    """How exchanges move data: the service that keeps partitions, the modes edges get
    when nothing else sets one, buffers, memory, spilling and waits."""

    #: the shuffle service that keeps result partitions: executor-local (in the
    #: producing executor), external (one partition store actor per node, survives
    #: executor loss) or a dotted path ``package.module:Factory``
    service: str = "executor-local"
    #: the mode of edges with none set in code or YAML: pipelined, blocking,
    #: hybrid-selective, hybrid-full, or auto (the planner picks per edge and says why)
    default_mode: str = "hybrid-selective"
    #: the mode of edges the output-on-EOF rule makes batch (FLIP-331; Flink's
    #: ``execution.batch-shuffle-mode``): upstream of an aggregate, sort or co_group
    batch_mode: str = "blocking"
    #: bytes per object-store buffer
    buffer_size: int = 4 * MiB
    #: in-memory partition bytes for the whole session, split evenly over its slots
    memory_budget: int = 512 * MiB
    #: the root of the sessions' private spill directories (per user by default)
    spill_dir: str = field(default_factory=default_spill_dir)
    #: a checksum (xxh3-64) per spilled buffer, checked when it is read back; a mismatch,
    #: a truncated or a deleted spill file raises ``PartitionCorruptedError`` and failover
    #: recomputes the partition (truncated and deleted files are caught either way)
    checksums: bool = True
    #: pipelined edges: buffers a producer may run ahead of a consumer, per subpartition
    credits: int = 4
    #: seconds any single wait may last before it fails naming what it waited for
    wait_timeout: float = 300.0

    def executor_budget(self, slots: int) -> int:
        """What one executor (one slot) may keep of ``memory_budget``: an even share,
        at least one buffer."""
        return max(self.memory_budget // max(slots, 1), self.buffer_size)


@dataclass(frozen=True)
class RayConfig:
    """How the session starts or joins Ray (``num_cpus`` and ``object_store_memory``
    only when it starts an embedded Ray)."""

    #: CPUs the embedded Ray offers (default: the machine's)
    num_cpus: int | None = None
    #: the embedded Ray's object store size, at least 80 MiB (default: Ray's choice)
    object_store_memory: int | None = None
    #: Ray's ``runtime_env`` for every Ray worker of the session's job: what the executors
    #: must import to run a plan's Python functions (``py_modules``, ``working_dir``,
    #: ``pip``, ``env_vars``); given to ``ray.init``, or to the executors when Ray was
    #: started before the session
    runtime_env: Mapping[str, Any] | None = None


#: ``spark.backend``'s values (``hybrid_shuffle.spark.backends``)
SPARK_BACKENDS = ("raydp", "local", "attach")


@dataclass(frozen=True)
class SparkConfig:
    """The session's Spark, started on first use of ``session.spark`` (``hybrid_shuffle.spark``)."""

    #: where Spark runs: ``raydp`` (Spark on Ray; the default with pyspark 3.5 and RayDP
    #: installed), ``local`` (Spark's local mode in the driver, ``executors *
    #: executor_cores`` threads; the default otherwise, pyspark 4 included) or ``attach``
    #: (the SparkSession passed as ``hs.Session(config, spark=...)``, never stopped by the
    #: engine); null picks the default for the installed pyspark
    backend: str | None = None
    #: Spark executors RayDP starts (``local``: multiplies the threads)
    executors: int = 1
    #: cores of each Spark executor
    executor_cores: int = 1
    #: the JVM heap of each Spark executor (``local``: of the driver, which runs them)
    executor_memory: int = 1 << 30
    #: DataFrames up to this estimated size come in through the driver (one Arrow copy,
    #: the fastest path); larger ones go from Spark's executors straight into the object
    #: store, through the session's holder actor
    collect_limit: int = 256 << 20
    #: rows per object-store object when the driver puts a table
    collect_chunk: int = 1_000_000
    #: warm a started Spark up before its first use: an Arrow export of a few hundred
    #: thousand rows and a small table handed back on every core, so the first job does
    #: not pay the JVM's compilation and the Python workers' start (seconds); it costs
    #: more than that (about 9 s on 2 cores), so it is for benchmarks, whose first timed
    #: job should be a warm one
    prewarm: bool = False
    #: keep class-data archives of Spark's JVMs (Java's CDS) in
    #: ``$XDG_CACHE_HOME/hybrid-shuffle/jvm``: the first driver (and on RayDP the first
    #: executor) of an installation writes one, later ones map it and start and plan
    #: seconds sooner (``hybrid_shuffle.spark.class_archive``)
    jvm_archive: bool = True
    #: how long the first use of ``session.spark`` waits for a Spark started in the
    #: background (with the session) before it raises ``WaitTimeoutError``; a JVM that
    #: hangs, or a cluster with no CPUs free for Spark's executors, otherwise waits forever
    start_timeout: float = 600.0
    #: extra Spark settings, passed through as strings
    configs: Mapping[str, str] = field(default_factory=lambda: types.MappingProxyType({}))


@dataclass(frozen=True)
class Config:
    """A whole job config: what a YAML file holds (``hybrid_shuffle.config_reference``
    renders every key of it, from these classes and their ``#:`` comments)."""

    #: the job the ``edges:`` and ``vertices:`` sections apply to (null: every job)
    job: str | None = None
    #: the parallelism of sources and exchange consumers with none set in code or YAML
    parallelism: int = 2
    #: executor slots, a logical count (default: the cluster's CPUs)
    slots: int | None = None
    #: the embedded Ray the session starts when it joins no cluster
    ray: RayConfig = field(default_factory=RayConfig)
    #: exchanges: service, default modes, buffers, memory, spilling, waits
    shuffle: ShuffleConfig = field(default_factory=ShuffleConfig)
    #: Spark on Ray through RayDP, for ``from_spark`` and ``to_spark``
    spark: SparkConfig = field(default_factory=SparkConfig)
    #: decided at run time: ``partitions: auto`` parallelism from the bytes written, and
    #: shuffled joins of a small side made broadcast joins (``broadcast_bytes``,
    #: ``broadcast_max_bytes``)
    adaptive: AdaptiveConfig = field(default_factory=AdaptiveConfig)
    #: region failover: attempts, backoff, a bound on the whole job
    failover: FailoverConfig = field(default_factory=FailoverConfig)
    #: the memory of sorts, joins, aggregates and co_groups
    operators: OperatorsConfig = field(default_factory=OperatorsConfig)
    #: per edge, by name: mode (and whether it is kept on purpose), partitions, service
    #: (over code)
    edges: Mapping[str, EdgeConfig] = field(default_factory=lambda: types.MappingProxyType({}))
    #: edges by what they are (kind, keys, consuming operator), in order: the first rule
    #: that matches an edge no ``edges:`` entry names gives its settings
    edge_rules: tuple[EdgeRule, ...] = ()
    #: per operator, by name: slot sharing group, parallelism (over code)
    vertices: Mapping[str, VertexConfig] = field(default_factory=lambda: types.MappingProxyType({}))
    #: the engine's own log level (error, warning, info, debug); ``debug`` also lets Ray,
    #: RayDP and Spark print their start-up notices, which are silenced otherwise
    #: (``hybrid_shuffle.quiet``); unset leaves the engine's loggers as the application set them
    log_level: str | None = None
    #: job names already warned about (``check_job``): one warning per name and config
    _warned: set[str] = field(
        default_factory=set, init=False, repr=False, compare=False, hash=False
    )

    def edge(self, name: str) -> EdgeConfig:
        return self.edges.get(name, EdgeConfig())

    def applies_to(self, job_name: str) -> bool:
        """The edges section belongs to the job named by ``job`` (or to every job)."""
        return self.job is None or self.job == job_name

    def rules_for(self, job_name: str) -> tuple[EdgeRule, ...]:
        """The ``edge_rules:`` that apply to ``job_name`` (as ``edges_for``)."""
        return self.edge_rules if self.applies_to(job_name) else ()

    def edges_for(self, job_name: str) -> Mapping[str, EdgeConfig]:
        """The ``edges:`` overrides that apply to ``job_name``: all, or none if ``job:``
        names another job.  Pure (no warning); ``check_job`` judges the names."""
        return self.edges if self.applies_to(job_name) else types.MappingProxyType({})

    def vertices_for(self, job_name: str) -> Mapping[str, VertexConfig]:
        """The ``vertices:`` overrides that apply to ``job_name`` (as ``edges_for``)."""
        return self.vertices if self.applies_to(job_name) else types.MappingProxyType({})

    def check_vertices(self, job_name: str, operator_names: Iterable[str]) -> None:
        """Raise a ``ConfigError`` naming every ``vertices:`` entry that is not an operator
        of ``job_name``, listing the job's operators."""
        if not self.applies_to(job_name):
            return
        names = list(operator_names)
        unknown = [name for name in self.vertices if name not in names]
        if unknown:
            keys = ", ".join(f"vertices.{name}" for name in unknown)
            raise ConfigError(
                f"{keys}: no such operator in job '{job_name}'; operators are: "
                f"{', '.join(names) or '(none)'}"
            )

    def check_edges(self, job_name: str, edge_names: Iterable[str]) -> None:
        """Raise a ``ConfigError`` naming every ``edges:`` entry that is not an edge of
        ``job_name``, and listing the job's edges (a typo would otherwise do nothing)."""
        names = sorted(set(edge_names))
        unknown = [name for name in self.edges if name not in names]
        if unknown:
            keys = ", ".join(f"edges.{name}" for name in unknown)
            what = "no such edge" if len(unknown) == 1 else "no such edges"
            raise ConfigError(
                f"{keys}: {what} in job '{job_name}'; edges are: {', '.join(names) or '(none)'}. "
                "The plan may have changed with the data (Spark numbers its exchanges anew "
                "when it picks another join): match edges by what they are with edge_rules "
                "(match: {kind, keys, into}) instead of by name"
            )

    def check_job(self, job_name: str, edge_names: Iterable[str]) -> None:
        """The plan-time check of the ``edges:`` section against the job being planned.

        If the section applies to ``job_name`` (``job:`` is unset or names it),
        every entry must be one of ``edge_names`` (``check_edges``).  If ``job:``
        names another job while ``edges:`` is set, the section is ignored for
        this job and one ``ConfigWarning`` naming both names says so (once per
        job name and config, however often the job is planned).
        """
        if self.applies_to(job_name):
            self.check_edges(job_name, edge_names)
            return
        if not (self.edges or self.edge_rules) or job_name in self._warned:
            return
        self._warned.add(job_name)
        warnings.warn(
            f"edges: the config's edges are for job '{self.job}', so none of them applies to "
            f"job '{job_name}'; name the job '{self.job}' or set job: {job_name}",
            ConfigWarning,
            stacklevel=2,
        )

    def with_overrides(self, **changes: Any) -> Config:
        """A copy with ``changes``, validated as a loaded file is (a ``ConfigError`` names
        the key).  A section (``shuffle``, ``ray``, ``spark``) may be given whole, as its
        dataclass, or in part, as a mapping of its keys (``adaptive`` too); ``edges``
        replaces all edges."""
        unknown = sorted(set(changes) - set(_TOP))
        if unknown:
            raise ConfigError(
                f"{unknown[0]}: unknown key; allowed keys are: {', '.join(sorted(_TOP))}"
            )
        raw = _as_raw(self)
        for key, value in changes.items():
            if key in _SECTIONS and isinstance(value, Mapping):
                raw[key] = {**raw[key], **value}
            elif key in ("edges", "vertices") and isinstance(value, Mapping):
                raw[key] = {name: _edge_raw(entry) for name, entry in value.items()}
            elif key == "edge_rules" and isinstance(value, (list, tuple)):
                raw[key] = [_rule_raw(rule) for rule in value]
            elif dataclasses.is_dataclass(value) and not isinstance(value, type):
                raw[key] = _section_raw(value)
            elif value is None and key in ("job", "slots", "log_level"):
                raw.pop(key, None)
            else:
                raw[key] = value
        return _from_mapping(raw)


# -- validation ----------------------------------------------------------------------------

_TOP = (
    "adaptive",
    "edge_rules",
    "edges",
    "failover",
    "job",
    "log_level",
    "operators",
    "parallelism",
    "ray",
    "shuffle",
    "slots",
    "spark",
    "vertices",
)
_SECTIONS = ("adaptive", "failover", "operators", "ray", "shuffle", "spark")
_OPERATORS = tuple(f.name for f in dataclasses.fields(OperatorsConfig))
_FAILOVER = tuple(f.name for f in dataclasses.fields(FailoverConfig))
_SPECULATION = tuple(f.name for f in dataclasses.fields(SpeculationConfig))
_ADAPTIVE = tuple(f.name for f in dataclasses.fields(AdaptiveConfig))
_SHUFFLE = tuple(f.name for f in dataclasses.fields(ShuffleConfig))
_RAY = tuple(f.name for f in dataclasses.fields(RayConfig))
_SPARK = tuple(f.name for f in dataclasses.fields(SparkConfig))
_EDGE = tuple(f.name for f in dataclasses.fields(EdgeConfig))
_RULE = tuple(f.name for f in dataclasses.fields(EdgeRule))
_MATCH = tuple(f.name for f in dataclasses.fields(EdgeMatch))
_VERTEX = tuple(f.name for f in dataclasses.fields(VertexConfig))
_MIN_OBJECT_STORE = 80 * MiB


def _check_keys(section: Mapping[str, Any], allowed: tuple[str, ...], prefix: str) -> None:
    for key in section:
        if key not in allowed:
            path = f"{prefix}{key}"
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(
                f"{path}: unknown key{hint}; allowed keys are: {', '.join(sorted(allowed))}"
            )


def _mapping(value: Any, path: str, example: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{path}: must be a mapping like {example}")
    return value


def _positive_int(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{path}: must be a positive integer, got {value!r}")
    return value


def _mode(value: Any, path: str, *also: str) -> str:
    if value not in MODES:
        names = ", ".join((*MODES, *also))
        raise ConfigError(f"{path}: '{value}' is not a mode; use one of: {names}")
    return str(value)


def _string(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{path}: must be a non-empty string, got {value!r}")
    return value


def _service(value: Any, path: str) -> str:
    """A built-in service name, or a dotted path to a factory (imported at session start)."""
    name = _string(value, path)
    if name not in SERVICES and "." not in name and ":" not in name:
        close = difflib.get_close_matches(name, SERVICES, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise ConfigError(
            f"{path}: '{name}' is not a shuffle service{hint}; use one of: "
            f"{', '.join(SERVICES)}, or a dotted path 'package.module:Factory'"
        )
    return name


def _shuffle(raw: Mapping[str, Any]) -> ShuffleConfig:
    _check_keys(raw, _SHUFFLE, "shuffle.")
    defaults = ShuffleConfig()
    s: dict[str, Any] = {}
    if "service" in raw:
        s["service"] = _service(raw["service"], "shuffle.service")
    if "default_mode" in raw:
        if raw["default_mode"] == AUTO:  # the planner picks per edge (plan.mode_advisor)
            s["default_mode"] = AUTO
        else:
            s["default_mode"] = _mode(raw["default_mode"], "shuffle.default_mode", AUTO)
    if "batch_mode" in raw:
        batch = raw["batch_mode"]
        if batch not in BATCH_MODES:
            raise ConfigError(
                f"shuffle.batch_mode: '{batch}' is not a batch mode; use one of: "
                f"{', '.join(BATCH_MODES)}"
            )
        s["batch_mode"] = str(batch)
    for key in ("buffer_size", "memory_budget"):
        if key in raw:
            s[key] = parse_size(raw[key], f"shuffle.{key}")
    if "spill_dir" in raw:
        s["spill_dir"] = _string(raw["spill_dir"], "shuffle.spill_dir")
    if "checksums" in raw:
        s["checksums"] = _boolean(raw["checksums"], "shuffle.checksums")
    if "credits" in raw:
        credits = raw["credits"]
        if (
            isinstance(credits, bool)
            or not isinstance(credits, int)
            or not 1 <= credits <= MAX_CREDITS
        ):
            raise ConfigError(
                f"shuffle.credits: must be an integer from 1 to {MAX_CREDITS}, got {credits!r}"
            )
        s["credits"] = credits
    if "wait_timeout" in raw:
        timeout = raw["wait_timeout"]
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not math.isfinite(timeout)
            or not MIN_WAIT_TIMEOUT <= timeout <= MAX_WAIT_TIMEOUT
        ):
            raise ConfigError(
                "shuffle.wait_timeout: must be a number of seconds from 0.001 (1 ms) to "
                f"86400 (1 day), got {timeout!r}"
            )
        s["wait_timeout"] = float(timeout)
    config = dataclasses.replace(defaults, **s)
    if config.buffer_size > config.memory_budget:
        raise ConfigError(
            f"shuffle.buffer_size: {format_size(config.buffer_size)} is larger than "
            f"shuffle.memory_budget {format_size(config.memory_budget)}; lower buffer_size "
            "or raise memory_budget"
        )
    return config


def _ray(raw: Mapping[str, Any]) -> RayConfig:
    _check_keys(raw, _RAY, "ray.")
    num_cpus = _positive_int(raw["num_cpus"], "ray.num_cpus") if "num_cpus" in raw else None
    store = None
    if "object_store_memory" in raw:
        store = parse_size(raw["object_store_memory"], "ray.object_store_memory")
        if store < _MIN_OBJECT_STORE:
            raise ConfigError(
                f"ray.object_store_memory: {format_size(store)} is below the 80 MiB Ray "
                "accepts; raise it"
            )
    runtime_env = None
    if raw.get("runtime_env") is not None:
        runtime_env = _runtime_env(raw["runtime_env"])
    return RayConfig(num_cpus, store, runtime_env)


#: ``ray.runtime_env.RuntimeEnv.known_fields`` of Ray 2.56, its private ones left out (the
#: config loads without importing Ray)
_RUNTIME_ENV_FIELDS = frozenset(
    {
        "conda", "config", "container", "env_vars", "excludes", "image_uri", "java_jars",
        "pip", "py_executable", "py_modules", "uv", "worker_process_setup_hook", "working_dir",
    }
)  # fmt: skip


def _runtime_env(value: Any) -> Mapping[str, Any]:
    """``ray.runtime_env``: a mapping of Ray's own ``runtime_env`` fields (their values are
    Ray's to check, at ``ray.init``)."""
    env = _mapping(value, "ray.runtime_env", "{py_modules: [./my_udfs], pip: [pandas]}")
    known = sorted(_RUNTIME_ENV_FIELDS)
    for key in env:
        if key not in known:
            raise ConfigError(
                f"ray.runtime_env.{key}: Ray's runtime_env has no such field; use "
                f"{', '.join(known)}"
            )
    return types.MappingProxyType(dict(env))


def _spark(raw: Mapping[str, Any]) -> SparkConfig:
    _check_keys(raw, _SPARK, "spark.")
    s: dict[str, Any] = {}
    if raw.get("backend") is not None:
        if raw["backend"] not in SPARK_BACKENDS:
            raise ConfigError(
                f"spark.backend: {raw['backend']!r} is not a backend; use one of "
                f"{', '.join(SPARK_BACKENDS)} (or leave it out for the installed pyspark's default)"
            )
        s["backend"] = raw["backend"]
    for key in ("executors", "executor_cores"):
        if key in raw:
            s[key] = _positive_int(raw[key], f"spark.{key}")
    for key in ("executor_memory", "collect_limit"):
        if key in raw:
            s[key] = parse_size(raw[key], f"spark.{key}")
    if "collect_chunk" in raw:
        s["collect_chunk"] = _positive_int(raw["collect_chunk"], "spark.collect_chunk")
    for key in ("prewarm", "jvm_archive"):
        if key in raw:
            s[key] = _boolean(raw[key], f"spark.{key}")
    if "start_timeout" in raw:
        s["start_timeout"] = _seconds(
            raw["start_timeout"], "spark.start_timeout", MIN_WAIT_TIMEOUT, "from 0.001 to 86400"
        )
    if "configs" in raw:
        configs = _mapping(raw["configs"], "spark.configs", "{spark.sql.shuffle.partitions: 8}")
        s["configs"] = types.MappingProxyType({str(k): _spark_value(v) for k, v in configs.items()})
    return SparkConfig(**s)


def _adaptive(raw: Mapping[str, Any]) -> AdaptiveConfig:
    _check_keys(raw, _ADAPTIVE, "adaptive.")
    s: dict[str, Any] = {}
    if "target_bytes" in raw:
        s["target_bytes"] = parse_size(raw["target_bytes"], "adaptive.target_bytes")
    for key in ("broadcast_bytes", "broadcast_max_bytes"):  # 0: off
        if key in raw:
            value = raw[key]
            zero = isinstance(value, int) and not isinstance(value, bool) and value == 0
            s[key] = 0 if zero else parse_size(value, f"adaptive.{key}")
    for key in ("min_partitions", "max_partitions", "semi_join_filter_max_keys"):
        if key in raw:
            s[key] = _positive_int(raw[key], f"adaptive.{key}")
    if "semi_join_filters" in raw:
        s["semi_join_filters"] = _boolean(raw["semi_join_filters"], "adaptive.semi_join_filters")
    config = AdaptiveConfig(**s)
    if config.min_partitions > config.max_partitions:
        raise ConfigError(
            f"adaptive.min_partitions: {config.min_partitions} is above "
            f"adaptive.max_partitions {config.max_partitions}; lower it or raise max_partitions"
        )
    return config


_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "sec": 1.0, "min": 60.0, "h": 3600.0}


def _seconds(value: Any, path: str, low: float, what: str) -> float:
    """A duration: a number of seconds, or a string with a unit (``0.5 s``, ``200 ms``)."""
    if isinstance(value, str):
        number, _, unit = value.strip().partition(" ")
        unit = unit.strip() or "s"
        try:
            value = float(number) * _DURATION_UNITS[unit]
        except (ValueError, KeyError):
            raise ConfigError(
                f"{path}: '{value}' is not a duration; write seconds like 0.5 or '500 ms'"
            ) from None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not low <= value <= MAX_WAIT_TIMEOUT
    ):
        raise ConfigError(f"{path}: must be a number of seconds {what}, got {value!r}")
    return float(value)


def _failover(raw: Mapping[str, Any]) -> FailoverConfig:
    _check_keys(raw, _FAILOVER, "failover.")
    s: dict[str, Any] = {}
    if "max_attempts" in raw:
        s["max_attempts"] = _positive_int(raw["max_attempts"], "failover.max_attempts")
    if "backoff" in raw:
        s["backoff"] = _seconds(raw["backoff"], "failover.backoff", 0.0, "from 0 to 86400")
    if raw.get("job_timeout") is not None:
        s["job_timeout"] = _seconds(
            raw["job_timeout"], "failover.job_timeout", MIN_WAIT_TIMEOUT, "from 0.001 to 86400"
        )
    if "speculation" in raw:
        example = "{enabled: true, multiplier: 1.5, quantile: 0.75, min_runtime: 1 s}"
        s["speculation"] = _speculation(
            _mapping(raw["speculation"], "failover.speculation", example)
        )
    return FailoverConfig(**s)


def _speculation(raw: Mapping[str, Any]) -> SpeculationConfig:
    _check_keys(raw, _SPECULATION, "failover.speculation.")
    path = "failover.speculation"
    s: dict[str, Any] = {}
    if "enabled" in raw:
        s["enabled"] = _boolean(raw["enabled"], f"{path}.enabled")
    if "multiplier" in raw:
        value = raw["multiplier"]
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value < 1
        ):
            raise ConfigError(f"{path}.multiplier: must be a number of at least 1, got {value!r}")
        s["multiplier"] = float(value)
    if "quantile" in raw:
        value = raw["quantile"]
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or not 0 < value <= 1
        ):
            raise ConfigError(
                f"{path}.quantile: must be a number above 0 and at most 1, got {value!r}"
            )
        s["quantile"] = float(value)
    if "min_runtime" in raw:
        s["min_runtime"] = _seconds(
            raw["min_runtime"], f"{path}.min_runtime", 0.0, "from 0 to 86400"
        )
    return SpeculationConfig(**s)


def _operators(raw: Mapping[str, Any]) -> OperatorsConfig:
    if "kernel" in raw:
        raise ConfigError(
            "operators.kernel: the key was removed: every operator runs on DuckDB now; "
            "delete it from the config"
        )
    _check_keys(raw, _OPERATORS, "operators.")
    s: dict[str, Any] = {}
    if "memory" in raw:
        memory = parse_size(raw["memory"], "operators.memory")
        if memory < OPERATORS_MIN_MEMORY:
            raise ConfigError(
                f"operators.memory: {format_size(memory)} is below "
                f"{format_size(OPERATORS_MIN_MEMORY)}, the smallest budget the engine can "
                "honour (DuckDB needs about 24 MiB to aggregate at all, and holds 20-25 MiB "
                "outside its limit, so a smaller figure would be exceeded by more than half); "
                f"give at least {format_size(OPERATORS_MIN_MEMORY)}"
            )
        s["memory"] = memory
    if "threads" in raw:
        s["threads"] = _positive_int(raw["threads"], "operators.threads")
    return OperatorsConfig(**s)


def _partitions(value: Any, path: str) -> int | str:
    if value == AUTO:
        return AUTO
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{path}: must be a positive integer or auto, got {value!r}")
    return value


def _spark_value(value: Any) -> str:
    """Spark reads booleans as ``true``/``false``; YAML's ``true`` would become ``True``."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _edges(raw: Any) -> Mapping[str, EdgeConfig]:
    edges = _mapping(raw, "edges", "{by_customer: {mode: blocking}}")
    out: dict[str, EdgeConfig] = {}
    for name, entry in edges.items():
        path = f"edges.{name}"
        entry = _mapping(entry, path, "{mode: blocking}") if entry is not None else {}
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{path}: must be a mapping like {{mode: blocking}}")
        _check_keys(entry, _EDGE, f"{path}.")
        mode = _mode(entry["mode"], f"{path}.mode") if "mode" in entry else None
        partitions = (
            _partitions(entry["partitions"], f"{path}.partitions")
            if "partitions" in entry
            else None
        )
        service = _service(entry["service"], f"{path}.service") if "service" in entry else None
        keep = _keep(entry["keep"], f"{path}.keep", mode) if "keep" in entry else False
        out[str(name)] = EdgeConfig(mode, partitions, service, keep)
    return types.MappingProxyType(out)


def _edge_rules(raw: Any) -> tuple[EdgeRule, ...]:
    example = "[{match: {kind: broadcast}, mode: hybrid-full}]"
    if raw is None:
        return ()
    if not isinstance(raw, (list, tuple)):
        raise ConfigError(f"edge_rules: must be a list of rules like {example}")
    return tuple(_edge_rule(entry, f"edge_rules[{i}]") for i, entry in enumerate(raw))


def _edge_rule(entry: Any, path: str) -> EdgeRule:
    if isinstance(entry, EdgeRule):
        entry = _rule_raw(entry)
    entry = _mapping(entry, path, "{match: {into: aggregate}, mode: blocking}")
    _check_keys(entry, _RULE, f"{path}.")
    if "match" not in entry:
        raise ConfigError(
            f"{path}: a rule needs match: saying which edges it sets, like "
            "match: {kind: broadcast}"
        )
    match = _edge_match(entry["match"], f"{path}.match")
    mode = _mode(entry["mode"], f"{path}.mode") if "mode" in entry else None
    partitions = (
        _partitions(entry["partitions"], f"{path}.partitions") if "partitions" in entry else None
    )
    service = _service(entry["service"], f"{path}.service") if "service" in entry else None
    keep = _keep(entry["keep"], f"{path}.keep", mode) if "keep" in entry else False
    if mode is None and partitions is None and service is None:
        raise ConfigError(
            f"{path}: the rule sets nothing; give it a mode, partitions or service beside match"
        )
    return EdgeRule(match, mode, partitions, service, keep)


def _edge_match(value: Any, path: str) -> EdgeMatch:
    entry = _mapping(value, path, "{kind: hash, keys: [a, b], into: aggregate}")
    _check_keys(entry, _MATCH, f"{path}.")
    if not entry:
        raise ConfigError(
            f"{path}: name at least one of kind, keys, into (an empty match would set every "
            "edge; use shuffle.default_mode for that)"
        )
    kind = _one_of(entry["kind"], f"{path}.kind", EDGE_KINDS) if "kind" in entry else None
    into = _one_of(entry["into"], f"{path}.into", EDGE_CONSUMERS) if "into" in entry else None
    keys = None
    if "keys" in entry:
        raw = entry["keys"]
        if isinstance(raw, str):
            raw = [raw]
        if (
            not isinstance(raw, (list, tuple))
            or not raw
            or not all(isinstance(k, str) and k.strip() for k in raw)
        ):
            raise ConfigError(
                f"{path}.keys: must be a non-empty list of column names like [c_nationkey], "
                f"got {entry['keys']!r}"
            )
        keys = tuple(raw)
    return EdgeMatch(kind, keys, into)


def _one_of(value: Any, path: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        close = difflib.get_close_matches(str(value), allowed, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise ConfigError(f"{path}: '{value}' is not one of: {', '.join(allowed)}{hint}")
    return str(value)


def _boolean(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{path}: must be true or false, got {value!r}")
    return value


def _keep(value: Any, path: str, mode: str | None) -> bool:
    """``edges.NAME.keep``: a boolean, and only beside the ``mode`` it keeps."""
    keep = _boolean(value, path)
    if mode is None:
        raise ConfigError(
            f"{path}: the edge sets no mode to keep; add a mode beside it (one of: "
            f"{', '.join(MODES)}) or remove keep"
        )
    return keep


def _vertices(raw: Any) -> Mapping[str, VertexConfig]:
    vertices = _mapping(raw, "vertices", "{totals: {slot_sharing_group: aggregate}}")
    out: dict[str, VertexConfig] = {}
    for name, entry in vertices.items():
        path = f"vertices.{name}"
        example = "{slot_sharing_group: aggregate, parallelism: 4}"
        entry = _mapping(entry, path, example) if entry is not None else {}
        _check_keys(entry, _VERTEX, f"{path}.")
        group = entry.get("slot_sharing_group")
        if group is not None and (not isinstance(group, str) or not group.strip()):
            raise ConfigError(f"{path}.slot_sharing_group: must be a non-empty name, got {group!r}")
        parallelism = (
            _positive_int(entry["parallelism"], f"{path}.parallelism")
            if "parallelism" in entry
            else None
        )
        out[str(name)] = VertexConfig(group, parallelism)
    return types.MappingProxyType(out)


def _from_mapping(raw: Mapping[str, Any]) -> Config:
    _check_keys(raw, _TOP, "")
    job = raw.get("job")
    if job is not None and not isinstance(job, str):
        raise ConfigError(f"job: must be the job's name as a string, got {job!r}")
    return Config(
        job=job,
        parallelism=_positive_int(raw["parallelism"], "parallelism") if "parallelism" in raw else 2,
        slots=_positive_int(raw["slots"], "slots") if "slots" in raw else None,
        ray=_ray(_mapping(raw.get("ray"), "ray", "{num_cpus: 2}")),
        shuffle=_shuffle(_mapping(raw.get("shuffle"), "shuffle", "{buffer_size: 4 MiB}")),
        spark=_spark(_mapping(raw.get("spark"), "spark", "{executors: 1}")),
        adaptive=_adaptive(
            _mapping(raw.get("adaptive"), "adaptive", "{target_bytes: 64 MiB, max_partitions: 64}")
        ),
        failover=_failover(
            _mapping(raw.get("failover"), "failover", "{max_attempts: 3, backoff: 0.5}")
        ),
        operators=_operators(_mapping(raw.get("operators"), "operators", "{memory: 256 MiB}")),
        edges=_edges(raw.get("edges")),
        edge_rules=_edge_rules(raw.get("edge_rules")),
        vertices=_vertices(raw.get("vertices")),
        log_level=_log_level(raw["log_level"]) if raw.get("log_level") is not None else None,
    )


def _log_level(value: Any) -> str:
    level = str(value).lower() if isinstance(value, str) else None
    if level not in LOG_LEVELS:
        raise ConfigError(
            f"log_level: {value!r} is not a log level; use one of: {', '.join(LOG_LEVELS)}"
        )
    return level


def _edge_raw(entry: Any) -> Any:
    """An ``EdgeConfig`` or ``VertexConfig`` as the YAML mapping it would come from
    (anything else as is).  An edge's ``keep: false`` is the default and left out, as an
    unset key (the loader refuses ``keep`` beside no ``mode``)."""
    if not isinstance(entry, (EdgeConfig, VertexConfig)):
        return entry
    raw = _section_raw(entry)
    if isinstance(entry, EdgeConfig) and not entry.keep:
        del raw["keep"]
    return raw


def _rule_raw(rule: Any) -> Any:
    """An ``EdgeRule`` as the YAML mapping it would come from (anything else as is)."""
    if not isinstance(rule, EdgeRule):
        return rule
    raw = _section_raw(rule)
    raw["match"] = {
        k: list(v) if isinstance(v, tuple) else v for k, v in _section_raw(rule.match).items()
    }
    if not rule.keep:
        del raw["keep"]
    return raw


def _section_raw(section: Any) -> dict[str, Any]:
    """A config dataclass as the YAML mapping it would come from: unset (None) keys left out."""
    out = {
        f.name: getattr(section, f.name)
        for f in dataclasses.fields(section)
        if f.init and getattr(section, f.name) is not None
    }
    for key, value in out.items():
        if isinstance(value, SpeculationConfig):  # a nested section
            out[key] = _section_raw(value)
    if isinstance(section, SparkConfig):
        out["configs"] = dict(section.configs)
    if isinstance(section, RayConfig) and section.runtime_env is not None:
        out["runtime_env"] = dict(section.runtime_env)
    return out


def _as_raw(config: Config) -> dict[str, Any]:
    """``config`` as the YAML mapping it would come from, for re-validation."""
    raw: dict[str, Any] = {
        "parallelism": config.parallelism,
        "ray": _section_raw(config.ray),
        "shuffle": _section_raw(config.shuffle),
        "spark": _section_raw(config.spark),
        "adaptive": _section_raw(config.adaptive),
        "failover": _section_raw(config.failover),
        "operators": _section_raw(config.operators),
        "edges": {name: _edge_raw(entry) for name, entry in config.edges.items()},
        "edge_rules": [_rule_raw(rule) for rule in config.edge_rules],
        "vertices": {name: _edge_raw(entry) for name, entry in config.vertices.items()},
    }
    if config.job is not None:
        raw["job"] = config.job
    if config.slots is not None:
        raw["slots"] = config.slots
    if config.log_level is not None:
        raw["log_level"] = config.log_level
    return raw


def check_slots(slots: object) -> None:
    """``slots=`` of a session (``hs.Session``, ``PlanningSession``): None or a positive
    integer, else one sentence."""
    if slots is not None:
        _positive_int(slots, "slots")


def load_config(source: str | os.PathLike[str] | Mapping[str, Any] | Config | None) -> Config:
    """A validated ``Config`` from a YAML path, a mapping, a ``Config`` or ``None`` (defaults).

    A ``Config`` is validated again (it may have been built by hand, bypassing
    the YAML checks), so an equal copy comes back.  Every problem is a
    ``ConfigError``; for a file, one that names the file where the file itself is
    the problem (missing, unreadable, not UTF-8 text, not YAML).
    """
    if source is None:
        return Config()
    if isinstance(source, Config):
        return _from_mapping(_as_raw(source))
    if isinstance(source, Mapping):
        return _from_mapping(source)
    raw = read_yaml_file(os.fspath(source))
    if raw is None:
        return Config()
    return _from_mapping(raw)
