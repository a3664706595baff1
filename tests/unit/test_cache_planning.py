"""How the planner fills and reads caches, and when a cache read saves an exchange."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from hybrid_shuffle.config import load_config
from hybrid_shuffle.operators import (
    HashAggregate,
    HashJoin,
    Identity,
    PartialAggregate,
    Rename,
    Select,
)
from hybrid_shuffle.plan.cache import Cache, CacheLayout, HashPartitioning
from hybrid_shuffle.plan.graph import JobGraph, JobVertex, VertexId
from hybrid_shuffle.plan.partitioning import vertex_partitioning
from hybrid_shuffle.plan.planner import ExchangeSpec, LogicalNode, Plan, plan_job
from hybrid_shuffle.shuffle.routing import Partitioner, PartitionerKind

from .builders import TABLE, Builder

CUSTOMER = HashPartitioning(("customer",), 2)
TOTALS = pa.schema([("customer", pa.string()), ("amount", pa.float64())])


def plan(sink: LogicalNode, slots: int = 8) -> Plan:
    return plan_job("j", sink, load_config({"parallelism": 2}), slots)


def cached(b: Builder, up: LogicalNode, name: str = "c") -> LogicalNode:
    node = LogicalNode(next(b.ids), f"cache({name})", Identity(f"cache({name})"), [(up, None)])
    node.cache = Cache(name, "session", node, job=None)
    return node


def fill(node: LogicalNode, layout: CacheLayout) -> None:
    assert node.cache is not None
    partitions: list[Any] = [object()] * layout.parallelism
    node.cache.set_filled(partitions, layout, rows=10, nbytes=100, spilled=0)


def totals(b: Builder) -> LogicalNode:
    return b.agg(b.map(b.source("orders", 2), "clean"), "totals")


def test_a_cache_being_filled_ends_its_vertex_so_its_output_is_what_is_kept() -> None:
    b = Builder()
    cache = cached(b, totals(b))
    after = b.map(cache, "after")
    p = plan(after)
    names = [v.name for v in p.graph.vertices.values()]
    assert names == ["orders->clean", "totals->cache(c)", "after"]
    (filler,) = p.cache_fills()
    assert filler.name == "totals->cache(c)"
    assert [e.partitioner.kind for e in filler.outputs] == [PartitionerKind.FORWARD]
    assert "fills cache 'c' (empty)" in p.explain()


def test_a_filled_cache_is_a_source_and_its_lineage_is_not_planned() -> None:
    b = Builder()
    cache = cached(b, totals(b))
    fill(cache, CacheLayout(3, TOTALS, CUSTOMER))
    p = plan(b.map(cache, "after"))
    (vertex,) = p.graph.vertices.values()
    assert vertex.name == "cache(c)->after" and vertex.cache_read is not None
    assert vertex.parallelism == 3 and p.graph.edges == []
    assert "reads cache 'c' (filled, 3 partitions, hash(customer) into 2" in p.explain()


def test_a_key_by_on_the_cache_partitioning_needs_no_exchange_and_keeps_the_combiner() -> None:
    b = Builder()
    cache = cached(b, totals(b))
    fill(cache, CacheLayout(2, TOTALS, CUSTOMER))
    spec = ExchangeSpec(
        Partitioner(PartitionerKind.HASH, ("customer",)),
        "regroup",
        combiner=PartialAggregate(["customer"], {"amount": "sum"}, "again"),
    )
    final = HashAggregate(["customer"], {"amount": "sum"}, "again", "final")
    p = plan(LogicalNode(next(b.ids), "again", final, [(cache, spec)]))
    (vertex,) = p.graph.vertices.values()
    assert [op.name for op in vertex.operators] == ["cache(c)", "again.combine", "again"]
    assert p.notes == [
        "'again' needs no exchange on customer (edge 'regroup'): it reads cache 'c' as it is "
        "partitioned, hash(customer) into 2"
    ]


def test_an_exchange_stays_when_keys_count_or_a_dropped_key_column_differ() -> None:
    for build in (
        lambda b, c: b.agg(c, "other", keys=("amount",)),  # other keys
        lambda b, c: b.agg(c, "more", partitions=3),  # another count
        lambda b, c: b.agg(  # the key column is gone before the key_by
            LogicalNode(next(b.ids), "sel", Select(["amount"], "sel"), [(c, None)]),
            "after",
            keys=("amount",),
        ),
    ):
        b = Builder()
        cache = cached(b, totals(b))
        fill(cache, CacheLayout(2, TOTALS, CUSTOMER))
        p = plan(build(b, cache))
        assert len(p.graph.edges) == 1 and p.notes == []


def test_a_renamed_key_column_keeps_the_partitioning_under_its_new_name() -> None:
    b = Builder()
    cache = cached(b, totals(b))
    fill(cache, CacheLayout(2, TOTALS, CUSTOMER))
    renamed = LogicalNode(next(b.ids), "ren", Rename({"customer": "who"}, "ren"), [(cache, None)])
    p = plan(b.agg(renamed, "by_who", keys=("who",)))
    assert p.graph.edges == [] and "needs no exchange on who" in p.notes[0]


def test_a_cache_being_filled_keeps_every_column_of_its_lineage() -> None:
    b = Builder()
    src = b.source("orders", 2)
    cache = cached(b, src)
    keep = LogicalNode(next(b.ids), "sel", Select(["customer"], "sel"), [(cache, None)])
    assert plan(keep).source_columns[src.id] is None
    b2 = Builder()
    src2 = b2.source("orders", 2)
    keep2 = LogicalNode(next(b2.ids), "sel", Select(["customer"], "sel"), [(src2, None)])
    assert plan(keep2).source_columns[src2.id] == frozenset({"customer"})
    assert TABLE.column_names == ["customer", "amount"]


def test_an_adaptive_vertex_has_no_hash_partitioning_to_keep() -> None:
    b = Builder()
    p = plan(b.agg(b.source("orders", 2), "totals", partitions="auto"))
    sink = p.graph.sink
    assert p.graph.vertices[sink].adaptive is not None
    assert vertex_partitioning(p.graph, sink) is None
    q = plan(b.agg(b.source("orders", 2), "totals2", partitions=4))
    assert vertex_partitioning(q.graph, q.graph.sink) == HashPartitioning(("customer",), 4)


def test_a_cache_read_vertex_takes_its_partitioning_through_its_chain() -> None:
    b = Builder()
    cache = cached(b, totals(b))
    fill(cache, CacheLayout(2, TOTALS, CUSTOMER))
    vertex = JobVertex(VertexId(0), "read", 2, [Identity("c"), Select(["amount"], "s")])
    vertex.cache_read = cache.cache
    graph = JobGraph("j", {vertex.id: vertex}, [], vertex.id)
    assert vertex_partitioning(graph, vertex.id) is None
    vertex.operators = [Identity("c")]
    assert vertex_partitioning(graph, vertex.id) == CUSTOMER


def test_a_join_reads_its_cached_side_in_place_and_hashes_the_other_side_to_match() -> None:
    b = Builder()
    cache = cached(b, totals(b))
    fill(cache, CacheLayout(2, TOTALS, CUSTOMER))
    dimension = b.source("customers", 3)
    hashed = Partitioner(PartitionerKind.HASH, ("customer",))
    join = LogicalNode(
        next(b.ids),
        "joined",
        HashJoin(["customer"], "inner", "joined"),
        [(cache, ExchangeSpec(hashed, "joined.left")), (dimension, ExchangeSpec(hashed))],
    )
    p = plan(join)
    edges = {
        e.name: (e.partitioner.kind, p.graph.vertices[e.target].parallelism) for e in p.graph.edges
    }
    assert edges == {
        "joined.left": (PartitionerKind.FORWARD, 2),  # the cache's partitions, where they are
        "customers->joined": (PartitionerKind.HASH, 2),  # the other side, into as many
    }
    assert len(p.notes) == 1 and "(edge 'joined.left')" in p.notes[0]
