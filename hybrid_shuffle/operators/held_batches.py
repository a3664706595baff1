"""Input batches held as Arrow while they fit: a sort's or an aggregate's small input.

A sort task or an aggregate task whose whole input fits in a share of its memory
answers it on Arrow or NumPy, which is faster there (``docs/architecture.md`` §11):
the sort takes a range exchange's sorted slices as they are, and the aggregate groups
a dense integer key with one ``np.bincount`` per column.  A task whose input outgrows
that share hands every batch to DuckDB, which bounds its memory and spills.

``HeldBatches`` is the buffer between the two.  It holds batches of one schema
within ``limit`` bytes and counts them in the operator's peak (``context.hold``).
Answering them may take memory beside them in proportion to their rows (the dense
aggregate's group index and float64 copies); ``row_bytes`` counts that against
``limit`` too, so the answer stays within it however narrow the rows.
The first batch it refuses ends holding for good.  The caller then takes the held
batches (``release``, in arrival order) to DuckDB, followed by the batch it refused.
So the rows reach DuckDB in the order they came, and none is held twice:
``hand_over`` lets each batch go once DuckDB has it, so the held bytes shrink as
DuckDB's grow.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from hybrid_shuffle.operators.context import OperatorContext

__all__ = ["HeldBatches", "hand_over"]


class HeldBatches:
    """Batches held within ``limit`` bytes, ``row_bytes`` a row included, all of the
    first one's schema (see the module docstring); ``holding`` is False once one was
    refused or ``release`` was called."""

    def __init__(self, limit: int, context: OperatorContext, row_bytes: int = 0) -> None:
        self.limit = limit
        self.row_bytes = row_bytes
        self._context = context
        self._tables: list[pa.Table] = []
        self.nbytes = 0
        self.rows = 0
        self.holding = True

    def offer(self, table: pa.Table) -> bool:
        """Hold ``table`` if still holding, it fits within ``limit`` with those held, and
        its schema is the first batch's; else stop holding and return False (the caller
        releases the held batches and goes on without them)."""
        rows = self.rows + table.num_rows
        fits = self.nbytes + table.nbytes + self.row_bytes * rows <= self.limit
        if self.holding and fits and (not self._tables or table.schema.equals(self.schema)):
            self._tables.append(table)
            self.nbytes += table.nbytes
            self.rows = rows
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
        tables, self._tables, self.holding = self._tables, [], False
        self.nbytes = self.rows = 0
        return tables


def hand_over(tables: list[pa.Table], push: Callable[[pa.Table], list[pa.Table]]) -> list[pa.Table]:
    """``push`` each of ``tables`` in order (emptying the list: a batch is let go once
    pushed) and return what the pushes gave."""
    out: list[pa.Table] = []
    tables.reverse()
    while tables:
        out.extend(push(tables.pop()))
    return out
