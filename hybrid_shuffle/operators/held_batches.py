"""Input batches held as Arrow while they fit: a sort's or an aggregate's small input.

A sort task or an aggregate task whose whole input fits in a share of its memory
answers it on Arrow or NumPy, which is faster there (``docs/architecture.md`` §11):
the sort takes a range exchange's sorted slices as they are, and the aggregate groups
a dense integer key with one ``np.bincount`` per column.  A task whose input outgrows
that share hands every batch to DuckDB, which bounds its memory and spills.

``HeldBatches`` is the buffer between the two.  It holds batches of one schema
within ``limit`` bytes and counts them in the operator's peak (``context.hold``).
The first batch it refuses ends holding for good.  The caller then takes the held
batches (``release``, in arrival order) to DuckDB, followed by the batch it refused.
So the rows reach DuckDB in the order they came, and none is held twice.
"""

from __future__ import annotations

import pyarrow as pa

from hybrid_shuffle.operators.context import OperatorContext

__all__ = ["HeldBatches"]


class HeldBatches:
    """Batches held within ``limit`` bytes, all of the first one's schema (see the module
    docstring); ``holding`` is False once one was refused or ``release`` was called."""

    def __init__(self, limit: int, context: OperatorContext) -> None:
        self.limit = limit
        self._context = context
        self._tables: list[pa.Table] = []
        self.nbytes = 0
        self.holding = True

    def offer(self, table: pa.Table) -> bool:
        """Hold ``table`` if still holding, it fits within ``limit`` with those held, and
        its schema is the first batch's; else stop holding and return False (the caller
        releases the held batches and goes on without them)."""
        fits = self.nbytes + table.nbytes <= self.limit
        if self.holding and fits and (not self._tables or table.schema.equals(self.schema)):
            self._tables.append(table)
            self.nbytes += table.nbytes
            self._context.hold(self.nbytes)
            return True
        self.holding = False
        return False

    @property
    def schema(self) -> pa.Schema:
        """The held batches' schema (there must be one held)."""
        return self._tables[0].schema

    def release(self) -> list[pa.Table]:
        """Every held batch, in the order they came; holding stops."""
        tables, self._tables, self.nbytes, self.holding = self._tables, [], 0, False
        return tables
