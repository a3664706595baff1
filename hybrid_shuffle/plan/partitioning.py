"""Which streams are already hash-partitioned, so that an exchange can be left out.

Spark's ``EnsureRequirements`` skips a shuffle when the child's output
partitioning already satisfies the parent's; this is the same question, asked
where the answer is certain: a cache (``Stream.cache``) filled by a vertex fed
by a hash exchange on keys K with p subtasks holds, in its partition i, exactly
the rows whose K hashes to i of p.  A cache read keeps that (its subtask i reads
partition i), and so does every operator that keeps each row in its partition
and the key columns unchanged (``Operator.partition_keys``).  A
``key_by(K)`` into p consumers of such a stream then needs no exchange: its
rows are already where the exchange would send them.

Only partitionings that come out of a cache read are used to leave exchanges
out (``plan.planner``): a job that fills a cache keeps its exchanges as
written, so the plans of existing jobs do not change.  Plain Python.
"""

from __future__ import annotations

from collections.abc import Iterable

from hybrid_shuffle.operators.base import Operator
from hybrid_shuffle.plan.cache import HashPartitioning
from hybrid_shuffle.plan.graph import JobGraph, VertexId
from hybrid_shuffle.shuffle.routing import PartitionerKind

__all__ = ["through", "vertex_partitioning"]


def through(
    partitioning: HashPartitioning | None, operators: Iterable[Operator]
) -> HashPartitioning | None:
    """``partitioning`` after a chain of ``operators`` (None once one of them may move a
    row's keys: a user function, or one that drops a key column)."""
    for op in operators:
        if partitioning is None:
            return None
        keys = op.partition_keys(partitioning.keys)
        partitioning = None if keys is None else HashPartitioning(keys, partitioning.count)
    return partitioning


def vertex_partitioning(graph: JobGraph, vertex_id: VertexId) -> HashPartitioning | None:
    """How vertex ``vertex_id``'s output is partitioned, once it ran (its parallelism is
    the one it ran with).

    A cache read starts from the cache's partitioning.  Otherwise each input says
    where its rows are: a hash edge on K puts them by K into the vertex's subtasks
    (unless the vertex is adaptive: each of its subtasks reads a range of
    subpartitions), a forward edge keeps the producer's partitioning; anything
    else (round-robin, range, broadcast) is unknown.  All inputs must agree; then
    the chain's operators decide what survives.
    """
    vertex = graph.vertices[vertex_id]
    if vertex.cache_read is not None:
        partitioning = vertex.cache_read.layout.partitioning
    elif not vertex.inputs:
        return None
    else:
        found: set[HashPartitioning | None] = set()
        for edge in vertex.inputs:
            kind = edge.partitioner.kind
            if kind is PartitionerKind.HASH and vertex.adaptive is not None:
                return None  # its subtasks read ranges of subpartitions, not hash % count
            if kind is PartitionerKind.HASH:
                found.add(HashPartitioning(edge.partitioner.keys, vertex.parallelism))
            elif kind is PartitionerKind.FORWARD:
                found.add(vertex_partitioning(graph, edge.source))
            else:
                return None
        partitioning = found.pop() if len(found) == 1 else None
    return through(partitioning, vertex.operators)
