"""Which translated stage holds a shuffled join that may run as a broadcast join at
run time (``plan.join_switch``; ``adaptive.broadcast_bytes``).

Spark's AQE may turn a sort-merge or shuffled hash join into a broadcast hash join
once a side's real size is known.  The engine can do the same only for a stage
whose every other operator keeps its meaning whatever rows each task gets: the
switched join runs in the tasks of its probe side's producer, whose rows are not
hash-partitioned on the join keys.  So the stage qualifies when it holds exactly one
shuffled join, each side of it arrives straight from an exchange (through Spark's
sort and code-generation wrappers only), and every operator above the join is a
projection, a filter, a broadcast join it streams through, or a partial aggregate
(which Spark's final aggregate completes after its own exchange).  The stage's other
inputs may only be broadcast ones (a broadcast join's build side, a subquery's value):
they go with the join.  A final
aggregate, a window or a second join on the same partitioning would need the hash
partitioning: such a stage may still *split* (``SwitchableJoin.split``).  The join's
own query then runs in the probe producer's tasks, and its rows go over the probe
side's exchange, hashed on the same key columns, to the rest of the stage, which reads
them where it read the join's rows: every task of the rest then holds the rows it held
before (each joined row lands where its probe row did), so a final aggregate, a window or
a sort above the join keeps its meaning.  An inner join whose side (or both) is the
rows of its exchange that semi and anti joins on the same keys keep (Spark's plan of an
``IN`` or ``EXISTS`` beside a join: TPC-H Q18) splits before them: the rest of the stage
runs them on the joined rows (``Rel.switch_below``), and the input they read may be a
hash edge, since it stays with the rest.  A stage that runs a top-n's partial part (its
rows gathered into one task for the final top-n) may switch or split as one that feeds
an exchange.  The stage's query is kept with its input tokens so that the engine can
name its inputs again (``SwitchableJoin``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from hybrid_shuffle.plan.join_switch import SPLIT_TOKEN, SwitchableJoin, build_sides
from hybrid_shuffle.sparkplan.edge_facts import ROW_BY_ROW
from hybrid_shuffle.sparkplan.operators.join import join_type
from hybrid_shuffle.sparkplan.relation import Column, FilterJoins, Rel, engine_names

if TYPE_CHECKING:
    from hybrid_shuffle.sparkplan.physical import PhysicalPlan
    from hybrid_shuffle.sparkplan.stage import Stage
    from hybrid_shuffle.sparkplan.tree import Node

__all__ = [
    "AGGREGATES",
    "SHUFFLED_JOINS",
    "SHUFFLE_EXCHANGES",
    "bound",
    "estimate",
    "selective",
    "switchable_join",
]

SHUFFLED_JOINS = frozenset({"SortMergeJoinExec", "ShuffledHashJoinExec"})
SHUFFLE_EXCHANGES = frozenset({"ShuffleExchangeExec", "ReusedExchangeExec"})
AGGREGATES = frozenset({"HashAggregateExec", "ObjectHashAggregateExec", "SortAggregateExec"})
#: what a stage may feed and still switch: Spark's exchange, or the gather of a top-n
_PER_TASK_TOPS = frozenset({"ShuffleExchangeExec", "TakeOrderedAndProjectExec"})
#: what may stand between a join and the exchange of one of its sides
_UNDER = frozenset({"SortExec", "WholeStageCodegenExec", "InputAdapter"})


def switchable_join(
    plan: PhysicalPlan,
    top: Node,
    stage: Stage,
    rel: Rel,
    final: bool,
    rels: Mapping[int, Rel] | None = None,
    vetoed: Collection[int] = (),
) -> SwitchableJoin | None:
    """The stage's shuffled join if the stage may run as a broadcast join (see the module
    docstring); ``top`` is the exchange the stage feeds (or the top-n whose partial part
    it runs), or the plan's root (``final``: the job's last stage, whose query names its
    columns as Spark does).  ``rels`` maps
    ``id(node)`` to each translated operator's relation: with it, a stage whose operators
    above the join need its hash partitioning may split.  ``vetoed``: ``id(join)`` of
    joins that may not switch (``translate``: a left side whose keys went down the
    right side)."""
    if final:
        below = top
    elif top.cls in _PER_TASK_TOPS and len(top.children) == 1:
        # an exchange, or a top-n whose partial part runs in the stage (any task's rows
        # will do: the gathered final top-n completes it)
        below = top.children[0]
    else:
        return None
    join = _join_below(below)
    split: Rel | None = None
    if join is None and rels is not None:
        join = _join_below(below, split=True)
        split = None if join is None else rels.get(id(join))
        if split is None:
            return None
    if join is None or len(join.children) != 2 or id(join) in vetoed:
        return None
    sides = [_exchange_below(child) for child in join.children]
    filtered = [i for i, side in enumerate(sides) if side is None]
    exchanges = _filtered_sides(join, rels) if filtered else None
    if exchanges is not None:
        assert rels is not None
        split, sides = rels[id(join)], list(exchanges)
    edges = [f"exchange_{plan.shown_id(s.op_id or -1)}" for s in sides if s is not None]
    if len(edges) != 2:
        return None
    tokens = {i.spec.edge: i.token for i in stage.inputs if i.spec is not None and i.spec.edge}
    others = [i for i in stage.inputs if i.spec is None or i.spec.edge not in edges]
    if len(tokens) != len(stage.inputs) or edges[0] == edges[1] or not set(edges) <= set(tokens):
        return None
    shown = plan.shown_id(join.op_id or -1)
    kind = join_type(join)
    template = rel.renamed(engine_names([c.name for c in rel.columns])) if final else rel.sql
    cut: str | None = None  # the query that runs in the probe producer's tasks, if split
    columns: list[Column] = []
    if split is not None:
        # the rest of the stage reads the join's rows where its query was: the join's
        # query must be found there once, and no input read on both sides of the cut
        if template.count(split.sql) != 1:
            return None
        cut, columns, rest = split.sql, split.columns, f"SELECT * FROM {SPLIT_TOKEN}"
        if exchanges is not None and split.switch_below is not None:
            # the join runs before the filtered side's semi and anti joins, which the
            # rest of the stage runs after it (``Rel.switch_below``)
            filters = split.switch_below
            cut, columns = filters.base.sql, filters.base.columns
            rest = FilterJoins(Rel(rest, columns), filters.joins).sql(split.columns)
        template = template.replace(split.sql, rest)
        if any(t in template and t in cut for t in tokens.values()):
            return None
    # besides the join's sides, only broadcast inputs go with it
    if not all(i.side for i in others if cut is None or i.token in cut):
        return None
    # Spark's estimates (calls into the JVM): of both sides where either may be built (the
    # smaller is built), and of each side that may be the probe side, to bound how big a
    # build side may still be broadcast (``bound``, ``JoinSwitch.limit``)
    buildable = build_sides(kind)
    one = exchanges is not None and len(filtered) == 1
    if one:  # only the side no semi or anti join filters may be built
        buildable = ("right",) if filtered == [0] else ("left",)
    either = len(buildable) == 2
    probes = (buildable != ("left",), buildable != ("right",)) if buildable else (False, False)
    # a filtered side's producer writes its exchange's rows: they bound the build side
    children = join.children if exchanges is None else list(exchanges)
    pairs = zip(children, probes, strict=True)
    bounds = [bound(plan, side) if probe else None for side, probe in pairs]
    return SwitchableJoin(
        f"{join.cls.removesuffix('Exec')} ({shown})",
        kind,
        edges[0],
        edges[1],
        estimate(plan, join.children[0]) if either else None,
        estimate(plan, join.children[1]) if either else None,
        template,
        tokens,
        split=cut,
        split_columns=tuple(c.ref for c in columns),
        left_bound=bounds[0],
        right_bound=bounds[1],
        build=edges[1 - filtered[0]] if one else None,
    )


def _filtered_sides(join: Node, rels: Mapping[int, Rel] | None) -> tuple[Node, Node] | None:
    """The exchanges of a shuffled inner join's sides, where a side is rows of its exchange
    kept by the stage's semi and anti joins and the translation wrote the join below them
    (``Rel.switch_below``): the join may split off before those filters, into the tasks
    producing the probe side.  None otherwise."""
    if rels is None or join_type(join) != "Inner":
        return None
    found = rels.get(id(join))
    if found is None or found.switch_below is None:
        return None
    left, right = (_filtered_exchange(child) for child in join.children)
    return None if left is None or right is None else (left, right)


def _filtered_exchange(node: Node) -> Node | None:
    """The exchange whose rows a join side is, kept by shuffled semi and anti joins (their
    left sides, through Spark's wrappers and projections)."""
    while True:
        while node.cls in _UNDER or node.cls == "ProjectExec":
            if len(node.children) != 1:
                return None
            node = node.children[0]
        if node.cls in SHUFFLE_EXCHANGES:
            return node
        semi = node.cls in SHUFFLED_JOINS and join_type(node) in ("LeftSemi", "LeftAnti")
        if not semi or node.get("isNullAwareAntiJoin") or len(node.children) != 2:
            return None
        node = node.children[0]


def _join_below(node: Node, split: bool = False) -> Node | None:
    """The stage's one shuffled join, if everything above it keeps its meaning in any
    task (see the module docstring); with ``split``, under operators of one input each
    (and the streamed sides of broadcast joins) whatever partitioning they need: the
    join a split runs in the probe producer's tasks."""
    while True:
        if node.cls in SHUFFLED_JOINS:
            return node
        if node.cls in SHUFFLE_EXCHANGES or node.cls == "BroadcastExchangeExec":
            return None  # the stage ends here
        one = len(node.children) == 1
        if one and (split or node.cls in ROW_BY_ROW or (node.cls in AGGREGATES and _partial(node))):
            node = node.children[0]
        elif node.cls == "BroadcastHashJoinExec" and len(node.children) == 2:
            streamed = 0 if node.object("buildSide") == "BuildRight" else 1
            node = node.children[streamed]
        else:
            return None


def _partial(node: Node) -> bool:
    """An aggregate in Spark's ``Partial`` mode only: it requires no distribution."""
    modes = {e.object("mode") for e in node.exprs("aggregateExpressions")}
    return modes == {"Partial"}


def _exchange_below(node: Node) -> Node | None:
    while node.cls in _UNDER and len(node.children) == 1:
        node = node.children[0]
    return node if node.cls in SHUFFLE_EXCHANGES else None


def _read_by_exchange(side: Node) -> Node:
    """What a join side's exchange reads (the side itself if no exchange is below it)."""
    exchange = _exchange_below(side)
    return exchange.children[0] if exchange is not None and exchange.children else side


def estimate(plan: PhysicalPlan, side: Node, decoded: bool = False) -> int | None:
    """How big a join side (its exchange) is likely to be, to choose which side to build
    first when either may be (and, through ``bound``, how big a build side may still be
    broadcast).  Spark without cost-based optimisation estimates a filter as its input
    and an inner join as the product of its sides, so: the estimate of what the exchange
    reads when no join is below it (its columns pruned, as Spark scales it), else the sum
    of the files scanned below; a quarter of that when a filter other than ``IS NOT
    NULL`` is below (a filtered dimension table is the case this is for).

    ``decoded``: the scan's rows as Arrow (``_parquet_bytes``) where no join is below and
    the scan is Parquet read here, in place of Spark's figure: the unit of the bytes a
    build side writes, which ``bound`` is weighed against.  Below a join the sum of the
    scans is no estimate at all (a join with a filtered dimension may keep 1% of the
    rows: TPC-H Q8's ``lineitem`` side at SF10, 807 MiB so counted, made its 87 MiB other
    side broadcast and the query 18% slower), and Spark's figures stay, their
    compression erring towards staying shuffled.  The choice of the side to build keeps
    Spark's figures: with these, the quarter a filter is guessed at chose TPC-H Q12's
    ``orders`` side (29 MiB) over its ``lineitem`` side, whose filter keeps 0.5% (0.5
    MiB) and which Spark's figures rightly call the smaller."""
    below = _read_by_exchange(side)
    nodes = list(below.walk())
    joined = any(n.cls.endswith("JoinExec") or n.cls == "CartesianProductExec" for n in nodes)
    size = _decoded(plan, nodes) if decoded and not joined else None
    if size is None and not joined:
        size = _statistics(plan, below)
    if size is None:
        scans = [_statistics(plan, n) for n in nodes if n.cls in _SCANS]
        if not scans or any(s is None for s in scans):
            return None
        size = sum(s for s in scans if s is not None)
    if any(selective(n) for n in nodes):
        size //= 4
    return size


def _decoded(plan: PhysicalPlan, nodes: list[Node]) -> int | None:
    """The scans among ``nodes`` as Arrow (``_parquet_bytes``), or None if any is not
    Parquet read here."""
    sizes = [_parquet_bytes(plan, n) for n in nodes if n.cls in _SCANS]
    if not sizes or any(s is None for s in sizes):
        return None
    return sum(s for s in sizes if s is not None)


#: joins that may drop any share of their left side's rows (Spark estimates them as it)
_SEMI_JOINS = frozenset({"LeftSemi", "LeftAnti", "ExistenceJoin"})
_LIMITS = frozenset({"GlobalLimitExec", "LocalLimitExec", "TakeOrderedAndProjectExec"})


def bound(plan: PhysicalPlan, side: Node) -> int | None:
    """``estimate`` of a join's probe side where it may bound how big the build side may
    be broadcast (``plan.join_switch.JoinSwitch.limit``): None where an operator below the
    side's exchange may drop rows by a factor no estimate knows, an aggregate (with its
    ``HAVING``), a semi or anti join, or a limit.  Spark, without cost-based
    optimisation, estimates each as its input: TPC-H Q18's ``orders`` side, semi-joined
    with the orders of over 300 units, was estimated at 135 MB at SF10 and holds 624
    rows, and broadcasting its 43 MiB other side to it cost 8%.  Filters and inner joins
    are what ``estimate`` already scales for."""
    below = _read_by_exchange(side)
    for node in below.walk():
        semi = node.cls.endswith("JoinExec") and join_type(node) in _SEMI_JOINS
        if semi or node.cls in AGGREGATES or node.cls in _LIMITS:
            return None
    return estimate(plan, side, decoded=True)


def selective(node: Node) -> bool:
    """A filter (``FilterExec``) that keeps fewer rows than ``IS NOT NULL`` checks alone
    would; any other node is not one."""
    if node.cls != "FilterExec":
        return False
    condition = node.expr("condition")
    plain = {"And", "IsNotNull", "AttributeReference"}
    return condition is not None and any(n.cls not in plain for n in condition.walk())


_SCANS = frozenset({"FileSourceScanExec", "BatchScanExec", "InMemoryTableScanExec"})


#: a scan's footers read at most (the rest of its files scaled by their sizes): a plan's
#: estimate must not cost a listing's worth of reads
_FOOTERS_READ = 16


def _parquet_bytes(plan: PhysicalPlan, node: Node) -> int | None:
    """How many bytes a Parquet scan's rows take as Arrow, its required columns only:
    each file's row count (its footer) times the columns' widths, and the variable-width
    columns' values uncompressed.  Spark's statistics count the files' bytes, compressed
    and encoded: as Arrow (the unit of the bytes a build side writes), the ``lineitem``
    columns TPC-H's Q10 reads take 5.9 times Spark's figure at SF10.  None for any other
    scan, or where its files cannot be listed and read here (another file system, a
    partitioned table whose pruned files Spark does not list)."""
    if id(node) in plan.parquet_bytes:
        return plan.parquet_bytes[id(node)]
    size = None
    found = plan.scans.get(node.op_id or -1) if node.cls == "FileSourceScanExec" else None
    if found is not None and found.format.lower() == "parquet" and found.roots:
        required = {f["name"] for f in (node.get("requiredSchema") or {}).get("fields", [])}
        with contextlib.suppress(OSError, ValueError, pa.ArrowException):
            size = _files_bytes(_scanned_files(plan, node, found.roots), required)
    plan.parquet_bytes[id(node)] = size
    return size


def _scanned_files(plan: PhysicalPlan, node: Node, roots: list[str]) -> list[str]:
    """The files under ``roots`` (Spark's pruned listing for a partitioned scan)."""
    from hybrid_shuffle.sparkplan.physical import local_path, partition_files

    if node.exprs("partitionFilters"):
        listing = partition_files(plan, node)
        if listing is None:
            raise ValueError("the pruned partitions' files are not listed")
        roots = listing[0]
    files = []
    for root in roots:
        path = local_path(root)
        if os.path.isdir(path):
            for folder, _, names in os.walk(path):
                files += [os.path.join(folder, n) for n in names if not n.startswith((".", "_"))]
        else:
            files.append(path)
    return files


def _files_bytes(files: list[str], required: set[str]) -> int:
    """``_parquet_bytes`` of ``files``: the footers of the first ``_FOOTERS_READ``, the
    others scaled from those by the files' sizes."""
    if not files:
        return 0
    read = files[:_FOOTERS_READ]
    total = sum(_footer_bytes(path, required) for path in read)
    if len(read) == len(files):
        return total
    sampled = sum(os.path.getsize(path) for path in read)
    whole = sum(os.path.getsize(path) for path in files)
    return total * whole // max(sampled, 1)


def _footer_bytes(path: str, required: set[str]) -> int:
    """One file's rows as Arrow, ``required`` columns only (see ``_parquet_bytes``)."""
    file = pq.ParquetFile(path)
    meta, schema = file.metadata, file.schema_arrow
    total, variable = 0, set()
    for name in required & set(schema.names):
        try:
            total += meta.num_rows * schema.field(name).type.bit_width // 8
        except ValueError:  # variable width: its offsets, and its values below
            total += meta.num_rows * 4
            variable.add(name)
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in range(group.num_columns):
            chunk = group.column(c)
            if chunk.path_in_schema.split(".")[0] in variable:
                total += chunk.total_uncompressed_size
    return total


def _statistics(plan: PhysicalPlan, node: Node) -> int | None:
    """Spark's estimate of ``node``'s bytes (its logical plan's statistics)."""
    from hybrid_shuffle.sparkplan.physical import jvm_node

    if id(node) in plan.sizes:
        return plan.sizes[id(node)]
    try:
        link = jvm_node(plan, node).logicalLink()
        size = int(str(link.get().stats().sizeInBytes())) if link.isDefined() else None
    except Exception:  # no JVM node (a plan read from JSON), or another Spark's API
        size = None
    plan.sizes[id(node)] = size
    return size
