"""Leaves: Parquet scans read by the executors, every other leaf through Spark.

A ``FileSourceScanExec`` over Parquet becomes ``from_parquet`` on the files
Spark listed for it (after partition pruning), reading only the columns Spark
requires; Spark's pushed data filters stay in the plan's ``Filter`` above the
scan, which the stage runs.  Any other leaf (a cached relation, a local table,
``range``, an RDD, JDBC) is computed by Spark and handed over through
``from_spark``: that is not a fallback, as nothing of the engine's could run it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from hybrid_shuffle.sources.parquet import EMPTY_COLUMN
from hybrid_shuffle.sparkplan.expressions import Unsupported
from hybrid_shuffle.sparkplan.operators.registry import register_operator
from hybrid_shuffle.sparkplan.physical import jvm_node
from hybrid_shuffle.sparkplan.relation import Column, Rel
from hybrid_shuffle.sparkplan.stage import Stage
from hybrid_shuffle.sparkplan.tree import Node

if TYPE_CHECKING:
    from hybrid_shuffle.sparkplan.translate import Translator

__all__: list[str] = []


@register_operator("FileSourceScanExec")
def _file_scan(tr: Translator, node: Node, stage: Stage) -> Rel:
    from hybrid_shuffle.sparkplan.operators.basic import _attribute

    columns = [_attribute(o) for o in node.exprs("output")]
    found = tr.plan.scans.get(node.op_id or -1)
    if found is None or not found.roots:
        raise Unsupported("a file scan whose location the plan does not print")
    if found.format.lower() != "parquet":
        return tr.spark_leaf(node, stage, columns)
    required = {f["name"] for f in (node.get("requiredSchema") or {}).get("fields", [])}
    if node.get("partitionFilters") or any(c.name not in required for c in columns):
        raise Unsupported("a scan of a partitioned table")
    paths = [_local(p) for p in found.roots]
    stream = tr.job.from_parquet(
        paths if len(paths) > 1 else paths[0],
        name=f"scan_{node.op_id}",
        columns=[c.name for c in columns],
    )
    return stage.read_named(stream, [c.name for c in columns], columns)


def _local(path: str) -> str:
    """A ``file:`` URI as a path (pyarrow reads other schemes by their URI)."""
    return path[len("file:") :] if path.startswith("file:") else path


@register_operator(
    "InMemoryTableScanExec",
    "LocalTableScanExec",
    "RDDScanExec",
    "RangeExec",
    "RowDataSourceScanExec",
    "BatchScanExec",
    "ExternalRDDScanExec",
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
    without ``FROM``: one row of no column), a ``LocalTableScan`` of no row (what the
    optimizer leaves of ``WHERE false``) or of no column (only its row count is read);
    ``None`` for any other leaf (Spark computes it).  A table of no column is a
    placeholder column of nulls, one per row (``EMPTY_COLUMN``)."""
    if node.cls == "RDDScanExec" and node.get("name") == "OneRowRelation" and not columns:
        return pa.table({EMPTY_COLUMN: pa.nulls(1)})
    if node.cls != "LocalTableScanExec":
        return None
    if not columns:
        rows = node.get("rows")
        count = len(rows) if isinstance(rows, list) else int(jvm_node(tr.plan, node).rows().size())
        return pa.table({EMPTY_COLUMN: pa.nulls(count)})
    if node.get("rows") == [] and not any(c.type.opaque for c in columns):
        return pa.schema([pa.field(c.ref, c.type.arrow) for c in columns]).empty_table()
    return None
