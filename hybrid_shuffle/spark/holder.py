"""The hand-over without RayDP (``spark.backend: local`` and ``attach``): Spark's own
Python workers move the Arrow batches, and an actor the engine owns keeps them.

Spark to engine (``put_dataframe``).  ``mapInArrow`` runs a function in Spark's
Python workers over each partition's Arrow batches; the function joins the
session's Ray cluster (once per worker process) and sends the batches, in chunks
of ``collect_chunk`` rows, to the session's ``SparkHolder``, which ``ray.put``s
them and so owns them: a Spark worker may exit at any time, and an object's owner
must outlive its readers.  Nothing passes through the driver but a row count per
partition.  A task Spark retries or runs twice puts its partition again under a
new attempt number; only the attempt that finished (``commit``) is handed over,
in partition order, so the rows come exactly once.

Engine to Spark (``dataframe_of``).  The driver puts the result's chunks (it owns
them for the session) and registers them with the holder; a DataFrame of one row
per chunk (``spark.range``) maps each index to its chunk's batches in a Spark
worker.  The holder keeps the references as long as it lives (the session), since
Spark may evaluate the DataFrame again at any time; a DataFrame read after its
session closed finds no holder, so write or cache it before.

This is the path of every Spark the engine can reach by Ray: local mode always;
an attached Spark when its executors run where ``ray.init(address=...)`` reaches
the session's cluster.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import ray

from hybrid_shuffle.actor_process import NAMESPACE
from hybrid_shuffle.errors import JobFailedError
from hybrid_shuffle.spark.unscaled_decimals import rescaled

__all__ = [
    "SparkHolder",
    "arrived_table",
    "dataframe_of",
    "holder_name",
    "put_dataframe",
    "start_holder",
]

log = logging.getLogger(__name__)

#: bound on one call to the holder from the driver (it answers in milliseconds)
_CALL_TIMEOUT = 120.0


class SparkHolder:
    """Keeps the Arrow tables moving between Spark and the engine; see the module docstring.

    Threaded (several Spark workers put at once); the dictionaries are touched by one
    method call at a time per key, and the GIL makes each update atomic.
    """

    def __init__(self) -> None:
        #: key -> (partition, attempt) -> refs put so far
        self._attempts: dict[str, dict[tuple[int, int], list[Any]]] = {}
        #: key -> partition -> the attempt that finished
        self._committed: dict[str, dict[int, int]] = {}
        #: key -> refs of a table handed to Spark
        self._out: dict[str, list[Any]] = {}

    def ready(self) -> bool:
        return True

    def worker_id(self) -> str:
        """The Ray worker this holder runs in: the owner of every object it put (tests check
        a hand-over's objects against it, not against the driver)."""
        return str(ray.get_runtime_context().get_worker_id())

    def put(self, key: str, partition: int, attempt: int, table: pa.Table) -> int:
        self._attempts.setdefault(key, {}).setdefault((partition, attempt), []).append(
            ray.put(table)
        )
        return int(table.num_rows)

    def commit(self, key: str, partition: int, attempt: int) -> None:
        self._committed.setdefault(key, {}).setdefault(partition, attempt)

    def take(self, key: str) -> list[Any]:
        """The committed attempts' refs, in partition order; forgets the key (the caller's
        references keep the objects, which this actor owns, alive)."""
        attempts = self._attempts.pop(key, {})
        committed = self._committed.pop(key, {})
        return [ref for p in sorted(committed) for ref in attempts.get((p, committed[p]), [])]

    def add(self, key: str, refs: list[Any]) -> None:
        self._out[key] = refs

    def get(self, key: str, index: int) -> list[Any]:
        return [self._out[key][index]]  # in a list: the reader fetches it, not this actor


def holder_name(session_id: str) -> str:
    return f"hybrid-shuffle-{session_id}-spark-holder"


def start_holder(session_id: str) -> Any:
    """The session's holder: named (Spark's workers look it up), no CPU, any node;
    killed with the session."""
    actor: Any = (
        ray.remote(SparkHolder)
        .options(
            name=holder_name(session_id),
            namespace=NAMESPACE,
            num_cpus=0,
            max_concurrency=16,
            max_restarts=0,
        )
        .remote()
    )
    ray.get(actor.ready.remote(), timeout=_CALL_TIMEOUT)
    return actor


#: Ray's token-authentication settings: a Spark worker started before the session's Ray
#: (an attached Spark) did not inherit them, and is refused without them
_AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


def _ray_env() -> dict[str, str]:
    return {k: os.environ[k] for k in _AUTH_ENV if k in os.environ}


def _holder_in_worker(address: str, env: dict[str, str], name: str) -> Any:
    """The holder, from a Spark worker: join the session's Ray (once per worker process)
    with the driver's authentication settings.  Spark reuses its Python workers, so one
    may still be joined to the Ray of an earlier session: it leaves that one first."""
    if ray.is_initialized() and ray.get_runtime_context().gcs_address != address:
        ray.shutdown()
    if not ray.is_initialized():
        if any(os.environ.get(k) != v for k, v in env.items()):
            os.environ.update(env)
            # Ray read its settings when this worker imported it; read them again, as
            # ray.init does when it turns token authentication on for its own process
            from ray._raylet import Config  # type: ignore[attr-defined]

            Config.initialize("")
        ray.init(
            address=address,
            namespace=NAMESPACE,
            logging_level=logging.WARNING,
            log_to_driver=False,
            configure_logging=False,
        )
    return ray.get_actor(name, namespace=NAMESPACE)


def put_dataframe(
    df: Any, schema: pa.Schema, session_id: str, chunk_rows: int, timeout: float
) -> list[Any]:
    """The DataFrame's rows as refs owned by the session's holder, put by Spark's workers,
    each table cast to ``schema`` (the one the job was planned with: an attached Spark's
    session time zone may differ from UTC; ``df`` may carry short decimals as their
    unscaled longs, ``unscaled_decimals``)."""
    address, env = ray.get_runtime_context().gcs_address, _ray_env()
    name = holder_name(session_id)
    key = uuid.uuid4().hex

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        holder = _holder_in_worker(address, env, name)
        task = TaskContext.get()
        partition = task.partitionId() if task is not None else 0
        attempt = task.attemptNumber() if task is not None else 0
        pending: list[Any] = []
        chunk: list[pa.RecordBatch] = []
        rows = 0
        for batch in batches:
            chunk.append(batch)
            rows += batch.num_rows
            if rows >= chunk_rows:
                pending.append(
                    holder.put.remote(key, partition, attempt, arrived_table(chunk, schema))
                )
                chunk, rows = [], 0
        if chunk:
            pending.append(holder.put.remote(key, partition, attempt, arrived_table(chunk, schema)))
        written = sum(ray.get(pending, timeout=timeout))
        ray.get(holder.commit.remote(key, partition, attempt), timeout=timeout)
        yield pa.RecordBatch.from_pydict({"rows": pa.array([written], pa.int64())})

    try:
        df.mapInArrow(write, "rows long").collect()
    except Exception as e:  # a Py4J error carries the whole Java stack: keep its first line
        raise JobFailedError(
            f"from_spark: Spark's workers could not hand the DataFrame to the engine "
            f"({_first_line(e)}); a DataFrame up to spark.collect_limit comes through the "
            "driver instead, and an attached Spark's workers must reach the session's Ray"
        ) from None
    holder = ray.get_actor(name, namespace=NAMESPACE)
    refs: list[Any] = ray.get(holder.take.remote(key), timeout=_CALL_TIMEOUT)
    return refs


def dataframe_of(spark: Any, refs: list[Any], schema: Any, session_id: str, timeout: float) -> Any:
    """A Spark DataFrame reading the tables of ``refs`` (one Spark partition each)."""
    address, env = ray.get_runtime_context().gcs_address, _ray_env()
    name = holder_name(session_id)
    key = uuid.uuid4().hex
    holder = ray.get_actor(name, namespace=NAMESPACE)
    ray.get(holder.add.remote(key, refs), timeout=_CALL_TIMEOUT)

    def fetch(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        holder = _holder_in_worker(address, env, name)
        for batch in batches:
            for index in batch.column(0).to_pylist():  # one entry per chunk, not per row
                (ref,) = ray.get(holder.get.remote(key, index), timeout=timeout)
                yield from ray.get(ref, timeout=timeout).to_batches()

    return spark.range(0, len(refs), numPartitions=max(len(refs), 1)).mapInArrow(fetch, schema)


def _first_line(error: BaseException) -> str:
    """The innermost Python error line of a Spark task failure (or the error's first)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    found = [line for line in lines if "Error:" in line or "Exception:" in line]
    return (found[-1] if found else lines[0] if lines else type(error).__name__)[:300]


def arrived_table(batches: list[pa.RecordBatch], schema: pa.Schema) -> pa.Table:
    """Batches Spark exported (short decimals as their longs, ``unscaled_decimals``) as a
    table of ``schema``, the one the job was planned with: what both paths in hand over."""
    table = rescaled(pa.Table.from_batches(batches), schema)
    return table if table.schema.equals(schema) else table.cast(schema)
