"""A build side indexed once, by direct address: the join of a single integer key of
small range (a perfect hash join, as ``dense_aggregate`` is a perfect hash aggregate).

``Table.join`` rebuilds its hash table from the build side on every call; for
keys like surrogate ids (customer keys 1..N, dates) the key itself can address
the build rows instead.  ``DenseBuild.create`` sorts the build rows by key once
into a CSR layout (``starts[k]..starts[k+1]`` are the rows of key ``lo + k``);
each probe batch is then a few NumPy gathers and two Arrow ``take`` calls, so
the build side costs once per subtask, whatever the number of probe batches.
The index takes 8 bytes per slot and per build row; a caller with a memory
budget passes what it can spare (``max_bytes``).

It answers exactly as ``Table.join`` does (``inner``, ``left outer``, ``left
semi`` or ``left anti``; key columns once from the left side, right columns
suffixed where names collide, null keys never match, every duplicate pair):
the output schema *is* the one pyarrow's join gives for the same inputs, and a
key that does not qualify (not an integer-like type, a range wider than
``MAX_SPAN_PER_ROW`` times the build rows, no non-null build key) makes
``create`` return ``None`` and the caller use ``Table.join``.

Right and full outer joins probe as inner and left joins do and then add the
build rows no probe row matched: given a ``matched`` array (one bool per build
row), ``probe`` marks every build row it pairs with a probe row.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["DenseBuild"]

#: a key range up to this many slots per build row is addressed directly
MAX_SPAN_PER_ROW = 8
#: ... and any range up to this many slots (a small build side of sparse keys)
MIN_SPAN = 1 << 16
#: the join types ``probe`` answers (as ``HashJoin`` names them)
HOWS = ("inner", "left", "semi", "anti")


def _key_values(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray] | None:
    """int64 values (nulls as 0) and the validity mask, for integer-like keys; else None."""
    t = column.type
    if pa.types.is_integer(t) and t != pa.uint64():
        as_int = pc.cast(column, pa.int64())
    elif pa.types.is_date32(t):
        as_int = pc.cast(pc.cast(column, pa.int32()), pa.int64())
    elif pa.types.is_date64(t) or pa.types.is_timestamp(t):
        as_int = pc.cast(column, pa.int64())
    else:
        return None
    valid = pc.is_valid(as_int).to_numpy(zero_copy_only=False)
    values = pc.fill_null(as_int, 0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    return values, valid


class DenseBuild:
    """The build (right) table, indexed by its key's value; see the module docstring."""

    def __init__(
        self,
        payload: pa.Table,
        lo: int,
        starts: np.ndarray,
        rows: np.ndarray,
        unique: bool,
        how: str,
        schema: pa.Schema,
        matched: np.ndarray | None = None,
    ) -> None:
        self.payload = payload
        self.lo = lo
        self.starts = starts
        self.rows = rows
        self.unique = unique
        self.how = how
        self.schema = schema
        #: one bool per build row, set where a probe row paired with it (None: not kept)
        self.matched = matched

    @property
    def nbytes(self) -> int:
        """Bytes of the index (the payload is the caller's build table)."""
        return int(self.starts.nbytes + self.rows.nbytes)

    @classmethod
    def create(
        cls,
        right: pa.Table,
        key: str,
        how: str,
        output_schema: pa.Schema,
        left: pa.Schema,
        suffix: str,
        matched: np.ndarray | None = None,
        max_bytes: int | None = None,
    ) -> DenseBuild | None:
        """The index of ``right`` on ``key`` for join type ``how`` (one of ``HOWS``), or
        None when the key does not qualify, the output would not be ``output_schema``
        (pyarrow's join schema for these inputs) or the index would take more than
        ``max_bytes`` (8 bytes per slot and per build row); ``matched``: see the module
        docstring."""
        if how not in HOWS:
            return None
        payload = right.drop_columns([key])
        if how in ("semi", "anti"):
            if output_schema.names != left.names or output_schema.types != left.types:
                return None
        elif not _is_left_then_payload(output_schema, left, payload.schema, suffix):
            return None
        keys = _key_values(right.column(key))
        if keys is None:
            return None
        values, valid = keys
        present = values[valid]
        if present.size == 0:
            return None
        lo, hi = int(present.min()), int(present.max())
        span = hi - lo + 1
        if span > max(MAX_SPAN_PER_ROW * present.size, MIN_SPAN):
            return None
        if max_bytes is not None and 8 * (span + 1 + present.size) > max_bytes:
            return None
        slot = present - lo
        counts = np.bincount(slot, minlength=span)
        starts = np.zeros(span + 1, dtype=np.int64)
        np.cumsum(counts, out=starts[1:])
        unique = bool(counts.max() <= 1)
        return cls(
            payload,
            lo,
            starts,
            _by_slot(slot, valid, starts, unique),
            unique,
            how,
            output_schema,
            matched,
        )

    def probe(self, left: pa.Table, key: str) -> pa.Table:
        """``left`` joined with the build side, as ``Table.join`` would give it."""
        keys = _key_values(left.column(key))
        assert keys is not None  # both sides have the key's type (the join checks it)
        values, valid = keys
        span = len(self.starts) - 1
        slot = values - self.lo
        inside = valid & (slot >= 0) & (slot < span)
        slot = np.where(inside, slot, 0)
        first = self.starts[slot]
        counts = np.where(inside, self.starts[slot + 1] - first, 0)
        if self.how in ("semi", "anti"):  # each left row once, if it has a match (or not)
            keep = counts > 0 if self.how == "semi" else counts == 0
            kept = left.filter(pa.array(keep))
            return pa.Table.from_arrays(kept.columns, schema=self.schema)
        n = left.num_rows
        if self.unique:
            matched = counts > 0
            right_rows = self.rows[np.minimum(first, max(len(self.rows) - 1, 0))]
            if self.how == "inner":
                left_rows: np.ndarray | None = np.flatnonzero(matched)
                paired = right_rows[left_rows]
                taken = pa.array(paired)
            else:
                left_rows = None  # every left row, in order: no copy of the left side
                taken = pa.array(right_rows, mask=~matched)
                paired = right_rows[matched] if self.matched is not None else right_rows
        else:
            per_row = counts if self.how == "inner" else np.maximum(counts, 1)
            left_rows = np.repeat(np.arange(n), per_row)
            total = int(per_row.sum())
            offsets = np.arange(total) - np.repeat(np.cumsum(per_row) - per_row, per_row)
            has = np.repeat(counts > 0, per_row)
            at = np.repeat(first, per_row) + offsets
            picked = self.rows[np.where(has, at, 0)] if len(self.rows) else at
            taken = pa.array(picked, mask=~has) if self.how != "inner" else pa.array(picked)
            paired = picked[has] if self.matched is not None else picked
        if self.matched is not None:
            self.matched[paired] = True
        left_part = left if left_rows is None else left.take(pa.array(left_rows))
        right_part = self.payload.take(taken)
        return pa.Table.from_arrays([*left_part.columns, *right_part.columns], schema=self.schema)


def _by_slot(slot: np.ndarray, valid: np.ndarray, starts: np.ndarray, unique: bool) -> np.ndarray:
    """The build rows with a key, ordered by slot (``slot``: their slots): scattered
    to their place when every slot has at most one row, else sorted (within a slot the
    order is free, so no stable sort is needed; a 16-bit slot sorts by radix)."""
    present = np.flatnonzero(valid)
    if unique:
        rows = np.empty_like(present)
        rows[starts[slot]] = present
        return rows
    if len(starts) - 1 <= 1 << 16:
        return present[np.argsort(slot.astype(np.uint16), kind="stable")]
    return present[np.argsort(slot)]


def _is_left_then_payload(
    output: pa.Schema, left: pa.Schema, payload: pa.Schema, suffix: str
) -> bool:
    """``output`` is the left columns, then the payload's in order (a name suffixed where
    pyarrow suffixes it), with the same types: what ``probe`` assembles."""
    if len(output) != len(left) + len(payload) or output.names[: len(left)] != left.names:
        return False
    for i, f in enumerate(payload):
        name = output.names[len(left) + i]
        if name not in (f.name, f"{f.name}{suffix}"):
            return False
    return [f.type for f in output] == [*left.types, *payload.types]
