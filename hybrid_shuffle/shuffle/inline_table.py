"""A small buffer's table that travels by value, as Arrow IPC bytes (``BufferRef.inline``).

Why not the table itself: Ray pickles a ``pyarrow.Table`` with its own reducers, column
by column and chunk by chunk in Python, which took 0.4-0.9 ms for a partial aggregate's
few KiB, and a handed-over inline buffer is pickled at least twice on its way (into
its producer's task report, then from the driver into every consumer's deployment) and
unpickled as often.
A consumer of an adaptive edge (``partitions: auto``) reads every one of the 64
subpartitions its producers wrote, each a buffer of a few rows: the driver spent 95 ms
pickling one such deployment of the main job, between two stages, on the critical path.
As one IPC stream the same table costs 20-35 us to write and as much to read, and a
process that only relays it (the driver, from a report into deployments) never decodes
it.

The bytes are written once, when the buffer is kept (the producer then holds no slice
of a larger batch: IPC writes a slice's own rows only); the table is decoded on first
use in the process that reads it, and kept there.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["InlineTable"]


class InlineTable:
    """One table as an Arrow IPC stream: ``table`` decodes it (once per process)."""

    __slots__ = ("_ipc", "_table")

    def __init__(self, ipc: bytes) -> None:
        self._ipc = ipc
        self._table: pa.Table | None = None

    @classmethod
    def of(cls, table: pa.Table) -> InlineTable:
        """``table`` written as IPC now; the object keeps the bytes only."""
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        return cls(sink.getvalue().to_pybytes())  # bytes: Ray pickles them 30x faster

    @property
    def table(self) -> pa.Table:
        table = self._table
        if table is None:  # two threads may both decode: the same table either way
            table = self._table = pa.ipc.open_stream(pa.py_buffer(self._ipc)).read_all()
        return table

    @property
    def ipc_bytes(self) -> int:
        return len(self._ipc)

    def __reduce__(self) -> tuple[type[InlineTable], tuple[bytes]]:
        return (InlineTable, (self._ipc,))

    def __repr__(self) -> str:
        return f"InlineTable({len(self._ipc)} bytes of IPC)"
