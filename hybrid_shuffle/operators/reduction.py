"""What a per-key reduction must offer to run in two (or three) phases.

A hash aggregate, its map-side combiner and a FLIP-44 local aggregate all do the
same three things with a reduction: reduce raw rows to *partials* (one or a few
rows per key), reduce partials to fewer partials, and turn fully reduced
partials into the user's rows.  ``Aggregation`` (sum, count, min, max, mean) and
``TopN`` (the n best rows per key) are the two reductions; ``PartialAggregate``
and ``LocalAggregate`` run either of them on Arrow, and ``HashAggregate`` plans
either for its DuckDB operator (``duck/aggregate.py``, whose SQL follows the same
partials: ``duck/lowering.py``).

The contract that makes the phases agree (and that their tests check):
``combine`` is associative and commutative over any grouping of partials, and
``results(combine(partials of all rows))`` equals one reduction of all the rows,
however the rows were split into batches, subtasks and flushes.  Partials of
one key may appear in any number of rows, so every phase may hash-partition them
by ``keys`` (the exchange does).
"""

from __future__ import annotations

from typing import Protocol

import pyarrow as pa

from hybrid_shuffle.operators.base import Columns

__all__ = ["Reduction"]


class Reduction(Protocol):
    """A per-key reduction in phases; see the module docstring for the contract."""

    #: the grouping columns (every partial row carries them)
    keys: list[str]
    #: the operator it belongs to (errors name it)
    name: str

    @property
    def columns(self) -> Columns:
        """The input columns it reads (``None``: every column)."""
        ...

    @property
    def partial_columns(self) -> Columns:
        """The columns of its partials (``None``: every column of the input)."""
        ...

    def check(self, schema: pa.Schema) -> None:
        """Raise a ``PlanError`` naming the column if raw rows of ``schema`` cannot be
        reduced."""
        ...

    def check_partials(self, schema: pa.Schema) -> None:
        """Raise a ``PlanError`` naming the column if ``schema`` is not a schema of its
        partials (a local stage's output read by a merging aggregate)."""
        ...

    def partial(self, table: pa.Table) -> pa.Table:
        """Raw rows -> partials."""
        ...

    def combine(self, partials: pa.Table) -> pa.Table:
        """Partials -> fewer partials, same columns and types."""
        ...

    def results(self, combined: pa.Table) -> pa.Table:
        """Fully combined partials -> the user's rows."""
        ...
