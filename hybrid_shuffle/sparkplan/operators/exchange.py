"""Spark's exchanges become the engine's edges, named ``exchange_<id>`` after the id
``df.explain(mode="formatted")`` prints.

- ``hashpartitioning(keys)`` -> a hash edge on the keys (a key that is an expression
  is computed into a column of the producer's stage first);
- ``rangepartitioning(orders)`` -> a range edge: the producer's stage computes one
  binary key whose byte order is Spark's sort order (``basic.sort_key``: directions,
  nulls first or last, NaN above every number, -0.0 equal to 0.0), its boundaries
  are sampled from every producer's rows, and consumer subtask ``i`` gets the ``i``-th
  key interval; the global ``Sort`` above it sorts each subtask's rows, and the
  result, collected in subtask order, is Spark's order;
- ``SinglePartition`` -> one consumer subtask; when its input is sorted across
  subtasks (a sort with a limit or a generator above it) the consumer takes its
  producers in subtask order, so the order is kept;
- ``RoundRobinPartitioning`` -> a round-robin edge;
- ``BroadcastExchange`` -> a broadcast edge (the build side of a join);
- ``ReusedExchange`` -> the same producer as the exchange it reuses, so its rows
  are computed once.

The number of consumer subtasks is the engine's (``parallelism``, YAML
``partitions`` or ``auto``), not Spark's ``spark.sql.shuffle.partitions``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from hybrid_shuffle.plan.logical import ExchangeSpec
from hybrid_shuffle.shuffle.routing import Partitioner, PartitionerKind
from hybrid_shuffle.sparkplan.expressions import Unsupported, compile_expression
from hybrid_shuffle.sparkplan.operators.basic import keeps_global_order, sort_key
from hybrid_shuffle.sparkplan.operators.registry import register_operator
from hybrid_shuffle.sparkplan.relation import Column, Rel
from hybrid_shuffle.sparkplan.stage import Stage
from hybrid_shuffle.sparkplan.tree import Node

if TYPE_CHECKING:
    from hybrid_shuffle.sparkplan.translate import Translator

__all__ = ["read_exchange"]


def _partitioning(
    tr: Translator, node: Node, stage: Stage
) -> tuple[Rel, Partitioner, int | None, list[Column]]:
    """The producer's relation (with computed key columns) and the edge's partitioner."""
    child = tr.rel(node.child, stage)
    partitioning = node.expr("outputPartitioning")
    kind = partitioning.cls if partitioning is not None else "SinglePartition"
    if kind == "HashPartitioning":
        assert partitioning is not None
        scope = child.scope(tr.subquery_of_stage)
        keys: list[str] = []
        extra: list[str] = []
        by_id = {c.id: c for c in child.columns}
        for i, key in enumerate(partitioning.children):
            column = by_id.get(key.expr_id)
            # an opaque column (a collated string) is hashed by Spark's rules: compiling it
            # raises ``Unsupported``
            if key.cls == "AttributeReference" and column is not None and not column.type.opaque:
                keys.append(column.ref)
                continue
            sql = compile_expression(key, scope)
            name = f"k{node.op_id}_{i}"
            extra.append(f"{sql.text} AS {name}")
            keys.append(name)
        if extra:
            child = Rel(f"SELECT *, {', '.join(extra)} FROM ({child.sql}) AS t", child.columns)
        return child, Partitioner(PartitionerKind.HASH, tuple(keys)), None, child.columns
    if kind == "RangePartitioning":
        assert partitioning is not None
        name = f"k{node.op_id}"
        text = sort_key(tr, partitioning.children, child)
        child = Rel(f"SELECT *, {text} AS {name} FROM ({child.sql}) AS t", child.columns)
        return child, Partitioner(PartitionerKind.RANGE, (name,)), None, child.columns
    if kind == "SinglePartition":
        ordered = keeps_global_order(node.child)
        partitioner = Partitioner(PartitionerKind.ROUND_ROBIN, in_producer_order=ordered)
        return child, partitioner, 1, child.columns
    if kind == "RoundRobinPartitioning":
        return child, Partitioner(PartitionerKind.ROUND_ROBIN), None, child.columns
    raise Unsupported(f"an exchange by {kind}")


@register_operator("ShuffleExchangeExec")
def _shuffle(tr: Translator, node: Node, stage: Stage) -> Rel:
    producer, columns = tr.exchange_producer(node, lambda s: _partitioning(tr, node, s))
    return stage.read(producer.stream, producer.spec, columns)


def _broadcast_build(
    tr: Translator, node: Node
) -> Callable[[Stage], tuple[Rel, Partitioner, int | None, list[Column]]]:
    def build(s: Stage) -> tuple[Rel, Partitioner, int | None, list[Column]]:
        child = tr.rel(node.child, s)
        return child, Partitioner(PartitionerKind.BROADCAST), None, child.columns

    return build


@register_operator("BroadcastExchangeExec")
def _broadcast(tr: Translator, node: Node, stage: Stage) -> Rel:
    return read_exchange(tr, node, stage)


@register_operator("ReusedExchangeExec")
def _reused(tr: Translator, node: Node, stage: Stage) -> Rel:
    """The exchange it reuses (translated once, wherever it is met first), read over an
    edge of its own and its columns renamed to this node's."""
    return read_exchange(tr, node, stage)


def read_exchange(
    tr: Translator, node: Node, stage: Stage, edge: str | None = None, broadcast: bool = False
) -> Rel:
    """Exchange ``node`` read by ``stage``: a broadcast exchange, or a ``ReusedExchange``
    of any exchange.  ``edge`` names the edge instead of the exchange's own name, for a
    second stage reading the same rows (``sparkplan.pushed_keys``): the producer is
    the same, and writes its rows once.  ``broadcast``: ``node`` is a shuffle exchange
    whose producer's rows ``stage`` reads all of, over broadcast edge ``edge`` (a semi
    join's left side whose keys are pushed down its right side)."""
    if broadcast:
        assert node.cls == "ShuffleExchangeExec" and edge is not None
        producer, columns = tr.exchange_producer(node, lambda s: _partitioning(tr, node, s))
        spec = ExchangeSpec(Partitioner(PartitionerKind.BROADCAST), edge)
        return stage.read(producer.stream, spec, columns)
    if node.cls == "BroadcastExchangeExec":
        producer, columns = tr.exchange_producer(node, _broadcast_build(tr, node))
        spec = producer.spec
        if edge is not None:
            spec = dataclasses.replace(spec, edge=edge)
        return stage.read(producer.stream, spec, columns)
    original_id = tr.plan.reuses.get(node.op_id or -1)
    original = tr.original(original_id) if original_id is not None else None
    if original is None or original_id is None:
        raise Unsupported("a reused exchange whose original the plan does not name")
    build = (
        (lambda s: _partitioning(tr, original, s))
        if original.cls == "ShuffleExchangeExec"
        else _broadcast_build(tr, original)
    )
    producer, columns = tr.exchange_producer(original, build)
    from hybrid_shuffle.sparkplan.operators.basic import _attribute

    outputs = [_attribute(o) for o in node.exprs("output")]
    spec = tr.reuse(producer, node, original_id).spec
    if edge is not None:
        spec = dataclasses.replace(spec, edge=edge)
    rel = stage.read(producer.stream, spec, columns)
    items = ", ".join(f"{a.ref} AS {b.ref}" for a, b in zip(rel.columns, outputs, strict=True))
    return Rel(f"SELECT {items} FROM ({rel.sql}) AS t", outputs)
