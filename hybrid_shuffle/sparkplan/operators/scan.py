"""Leaves: Parquet scans read by the executors, every other leaf through Spark.

A ``FileSourceScanExec`` over Parquet becomes ``from_parquet`` on the files
Spark listed for it (after partition pruning), reading only the columns Spark
requires; Spark's pushed data filters stay in the plan's ``Filter`` above the
scan, which the stage runs.  The stage's DuckDB reads the files itself where it
reads them as pyarrow would (``sources.duck_scan``), which pushes that filter into
the Parquet scan.  A partitioned table's partition columns come from its
``key=value`` folders (``_partitioned``).  ``OneRowRelation`` (a ``SELECT`` without
``FROM``) and local tables of no row or no column are made in the engine
(``_local_rows``).  Any other leaf (a cached relation, a local table, ``range``, an
RDD, JDBC) is computed by Spark and handed over through ``from_spark``: that is not a
fallback, as nothing of the engine's could run it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from hybrid_shuffle.empty_column import placeholder
from hybrid_shuffle.sparkplan.expressions import Unsupported
from hybrid_shuffle.sparkplan.operators.registry import register_operator
from hybrid_shuffle.sparkplan.physical import jvm_node, local_path, partition_files
from hybrid_shuffle.sparkplan.relation import Column, Rel
from hybrid_shuffle.sparkplan.stage import Stage
from hybrid_shuffle.sparkplan.tree import Node

if TYPE_CHECKING:
    from hybrid_shuffle.sparkplan.translate import Translator

__all__: list[str] = []


@register_operator(
    "FileSourceScanExec",
    support="partial",
    note=(
        "Parquet, partitioned Hive-style (key=value folders, pruned by Spark's partition "
        "filters) too, read by the engine; other formats are read by Spark and handed "
        "over (not a fallback); a partition column of a type other than integers, float, "
        "double, string or date falls back"
    ),
)
def _file_scan(tr: Translator, node: Node, stage: Stage) -> Rel:
    from hybrid_shuffle.sparkplan.operators.basic import _attribute

    columns = [_attribute(o) for o in node.exprs("output")]
    found = tr.plan.scans.get(node.op_id or -1)
    if found is None or not found.roots:
        raise Unsupported("a file scan whose location the plan does not print")
    if found.format.lower() != "parquet":
        return tr.spark_leaf(node, stage, columns)
    required = {f["name"] for f in (node.get("requiredSchema") or {}).get("fields", [])}
    filters = node.exprs("partitionFilters")
    if filters or any(c.name not in required for c in columns):
        return _partitioned(tr, node, stage, columns, required, found.roots)
    paths = [local_path(p) for p in found.roots]
    stream = tr.job.from_parquet(
        paths if len(paths) > 1 else paths[0],
        name=f"scan_{node.op_id}",
        columns=[c.name for c in columns],
    )
    return stage.read_named(stream, [c.name for c in columns], columns)


#: partition column types read from the folder names by a DuckDB cast of the text, as
#: Spark parses them (a timestamp's zone, a boolean's spelling are Spark's own)
_PARTITION_TYPES = ("byte", "short", "integer", "long", "float", "double", "string", "date")


def _partitioned(
    tr: Translator,
    node: Node,
    stage: Stage,
    columns: list[Column],
    required: set[str],
    roots: list[str],
) -> Rel:
    """A scan of a Hive-style partitioned table (``key=value/`` folders): the files of the
    partitions Spark's pruning kept (every folder where the JVM does not list them), the
    partition values read from the paths as text and cast to the types of Spark's output
    attributes (``__HIVE_DEFAULT_PARTITION__`` is null), and Spark's partition filters
    applied to the rows in the stage, so a partial pruning never changes the answer."""
    import pyarrow.dataset as ds

    from hybrid_shuffle.sparkplan.expressions import compile_expression
    from hybrid_shuffle.sparkplan.relation import attribute_column

    # a dynamic pruning filter (a join's keys as a subquery) only saves reading: the join
    # it came from still filters the rows
    filters = [f for f in node.exprs("partitionFilters") if f.cls != "DynamicPruningExpression"]
    partition = {c.id: c for c in columns if c.name not in required}
    for f in filters:
        for ref in f.walk():
            if ref.cls == "AttributeReference":
                column = attribute_column(ref)
                partition.setdefault(column.id, column)
    kinds = {c.type.name for c in partition.values()}
    if not kinds <= set(_PARTITION_TYPES):
        raise Unsupported(f"a partition column of type {sorted(kinds - set(_PARTITION_TYPES))}")
    names = list(dict.fromkeys(c.name for c in partition.values()))
    listing = partition_files(tr.plan, node)
    files = None if listing is None else [local_path(f) for f in listing[0]]
    if listing is not None:
        root = _base(files or [], listing[1])
    else:  # every folder under the one root Spark lists
        root = local_path(roots[0]).rstrip("/") if len(roots) == 1 else None
        if root is not None and "=" in root.rsplit("/", 1)[-1]:
            root = None
    if files == []:  # every partition pruned: no row
        empty = pa.schema([pa.field(c.ref, c.type.arrow) for c in columns]).empty_table()
        stream = tr.job.from_arrow(empty, name=f"scan_{node.op_id}", parallelism=1)
        return stage.read_named(stream, [c.ref for c in columns], columns)
    if root is None:
        raise Unsupported("a partitioned scan whose table folder the plan does not name")
    scheme = ds.partitioning(pa.schema([(n, pa.string()) for n in names]), flavor="hive")
    try:
        dataset = ds.dataset(
            files if files is not None else root,
            format="parquet",
            partitioning=scheme,
            partition_base_dir=root if files is not None else None,
        )
    except (OSError, pa.ArrowException) as e:
        raise Unsupported(f"the partitioned table at {root} cannot be listed ({e})") from e
    data = [c.name for c in columns if c.name in required]
    stream = tr.job.from_parquet(dataset, name=f"scan_{node.op_id}", columns=data + names)
    typed = [c for c in columns if c.name in required]
    by_name = {c.name: c for c in reversed(partition.values())}
    keys = [by_name[n] for n in names]
    read = stage.read_named(stream, data + names, typed + keys)
    items = [c.ref for c in typed] + [f"CAST({c.ref} AS {c.type.duck}) AS {c.ref}" for c in keys]
    everything = typed + keys
    rel = Rel(f"SELECT {', '.join(items)} FROM ({read.sql}) AS t", everything)
    if filters:
        scope = rel.scope(tr.subquery_of_stage)
        test = " AND ".join(f"({compile_expression(f, scope).text})" for f in filters)
        rel = Rel(f"SELECT {rel.select_list()} FROM ({rel.sql}) AS t WHERE {test}", everything)
    out = Rel("", columns)
    return Rel(f"SELECT {out.select_list()} FROM ({rel.sql}) AS t", columns)


def _base(files: list[str], depth: int) -> str | None:
    """The table's folder of partition files ``depth`` ``key=value`` folders below it;
    ``None`` if they do not all have one."""
    bases = set()
    for f in files:
        folders = f.rstrip("/").split("/")[:-1]
        cut = len(folders) - depth
        if cut < 1 or any("=" not in part for part in folders[cut:]):
            return None
        bases.add("/".join(folders[:cut]))
    return bases.pop() if len(bases) == 1 else None


@register_operator(
    "InMemoryTableScanExec",
    "LocalTableScanExec",
    "RDDScanExec",
    "OneRowRelationExec",  # Spark 4's own operator for a SELECT without FROM
    "RangeExec",
    "RowDataSourceScanExec",
    "BatchScanExec",
    "ExternalRDDScanExec",
    note=(
        "computed by Spark and handed over (not a fallback); a SELECT without FROM and "
        "empty local tables are made in the engine"
    ),
)
def _spark_leaf(tr: Translator, node: Node, stage: Stage) -> Rel:
    from hybrid_shuffle.sparkplan.operators.basic import _attribute

    outputs = node.exprs("output")
    columns = [_attribute(o) for o in outputs] if outputs else tr.jvm_output(node)
    local = _local_rows(tr, node, columns)
    if local is not None:
        stream = tr.job.from_arrow(local, name=f"local_{node.op_id}", parallelism=1)
        return stage.read_named(stream, [c.ref for c in columns], columns)
    return tr.spark_leaf(node, stage, columns)


def _local_rows(tr: Translator, node: Node, columns: list[Column]) -> pa.Table | None:
    """The rows of a leaf the engine makes itself: ``OneRowRelation`` (a ``SELECT``
    without ``FROM``: one row of no column; Spark 3.5's ``RDDScanExec`` of that name,
    Spark 4's ``OneRowRelationExec``), a ``LocalTableScan`` of no row (what the
    optimizer leaves of ``WHERE false``) or of no column (only its row count is read);
    ``None`` for any other leaf (Spark computes it).  A table of no column is a
    placeholder column of nulls, one per row (``empty_column``)."""
    one_row = node.cls == "OneRowRelationExec" or (
        node.cls == "RDDScanExec" and node.get("name") == "OneRowRelation"
    )
    if one_row and not columns:
        return placeholder(1)
    if node.cls != "LocalTableScanExec":
        return None
    if not columns:
        rows = node.get("rows")
        count = len(rows) if isinstance(rows, list) else int(jvm_node(tr.plan, node).rows().size())
        return placeholder(count)
    if node.get("rows") == [] and not any(c.type.opaque for c in columns):
        return pa.schema([pa.field(c.ref, c.type.arrow) for c in columns]).empty_table()
    return None
