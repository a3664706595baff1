"""Column pruning: which columns each exchange and each source must carry.

Spark's optimizer drops the columns nothing downstream reads before a scan or
a shuffle; this is the same pass over the logical nodes.  Walking from the
sink (which keeps every column) back to the sources, each operator answers
``input_columns(wanted)``: the columns it needs of each input to produce what
its consumers want of it.  A node read by several consumers keeps the union of
what they want.  An operator the engine cannot look into (``map_batches``, a
``filter`` function) answers "every column", so nothing above it is pruned.

The answers are names, not schemas: they may name columns an input does not
have (they are intersected with each batch's columns when applied), and they
never leave out one an operator reads.  Two places apply them: the producer
side of every exchange (``JobEdge.columns``, before a combiner and before
partitioning, so fewer bytes are hashed, copied and stored) and ``from_spark``
sources (``Plan.source_columns``: Spark selects the columns before it converts
anything to Arrow).  A cache being filled keeps every column, as the sink does:
the jobs that will read it are not known yet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from hybrid_shuffle.operators.base import Columns
from hybrid_shuffle.plan.logical import LogicalNode

__all__ = ["ColumnNeeds", "prune_columns"]


@dataclass
class ColumnNeeds:
    #: node id -> the columns its output must carry (``None``: all)
    outputs: dict[int, Columns] = field(default_factory=dict)
    #: (node id, input index) -> the columns that input must carry (``None``: all)
    inputs: dict[tuple[int, int], Columns] = field(default_factory=dict)


def _union(a: Columns, b: Columns) -> Columns:
    return None if a is None or b is None else a | b


def prune_columns(
    nodes: Sequence[LogicalNode], sink: LogicalNode, schemas: Mapping[int, pa.Schema | None]
) -> ColumnNeeds:
    """What every node's output and every node's inputs must carry (``nodes`` in build
    order: inputs before the nodes that read them).  Where a node's output schema is
    known (``schemas``), the answer is within its columns, and ``None`` when nothing
    of it would be dropped, so ``explain()`` names only exchanges that really prune."""
    needs = ColumnNeeds()
    needs.outputs[sink.id] = None  # the job's result keeps every column
    for node in nodes:
        if node.fills_cache:  # and so does a cache: later jobs may read any column
            needs.outputs[node.id] = None
    for node in reversed(nodes):
        if node.operator is None:  # a source
            continue
        wanted = needs.outputs.get(node.id)
        per_input = node.operator.input_columns(wanted)
        for index, (up, spec) in enumerate(node.inputs):
            need = per_input[index] if index < len(per_input) else None
            if spec is not None and spec.combiner is not None:
                # the exchange carries the combiner's input: the rows before the partials
                need = spec.combiner.input_columns(wanted)[0]
            known = schemas.get(up.id)
            if need is not None and known is not None:  # the names the input really has
                need = None if need.issuperset(known.names) else need & frozenset(known.names)
            needs.inputs[(node.id, index)] = need
            if up.id in needs.outputs:
                needs.outputs[up.id] = _union(needs.outputs[up.id], need)
            else:
                needs.outputs[up.id] = need
    return needs
