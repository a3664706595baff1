"""Spark's physical operators -> SQL over a stage's inputs, one module per family.

Each module registers, per Spark operator class, a handler
``(translator, node, stage) -> Rel`` in ``OPERATORS``: ``basic`` (project,
filter, sort, limits, union, expand), ``aggregate`` (hash, object-hash and sort
aggregates in every mode), ``join`` (broadcast hash, shuffled hash, sort-merge),
``nested_loop`` (broadcast nested loop, cartesian product), ``window``,
``exchange`` (shuffle, broadcast, reused: the edges), ``python`` (UDFs,
``mapInPandas``, ``applyInPandas``: steps of the engine's tasks), ``scan``
(Parquet, and every other leaf through Spark).  A class with no handler, or a handler raising
``Unsupported``, falls back to Spark (``translate``).
"""

from __future__ import annotations

from hybrid_shuffle.sparkplan.operators.registry import (
    OPERATORS,
    SUPPORT,
    Handler,
    register_operator,
)

from hybrid_shuffle.sparkplan.operators import (  # noqa: F401  isort: skip
    aggregate,
    basic,
    exchange,
    generate,
    join,
    nested_loop,
    python,
    scan,
    window,
)

__all__ = ["OPERATORS", "SUPPORT", "Handler", "register_operator"]
