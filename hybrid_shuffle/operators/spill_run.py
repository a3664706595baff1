"""A run: tables an operator spilled, written once and read back in batches.

Sorts spill sorted runs, joins and aggregations spill hash buckets; each is a
``SpillRun``: one private file (0600, exclusive create, as partition spill
files are) holding an Arrow IPC stream.  It is written front to back by one
thread (``append``, then ``close``), then read front to back in record
batches (``batches``) through a memory map, so reading costs page cache, not
the operator's memory.  ``delete`` removes the file; the task removes its
whole spill directory when it ends, whatever happened, so a failed operator
leaves nothing behind either.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pyarrow as pa

from hybrid_shuffle.spill_dirs import create_private_file

__all__ = ["SpillRun"]


class SpillRun:
    """One spilled run of one schema (see the module docstring for its life)."""

    def __init__(self, path: str, schema: pa.Schema) -> None:
        self.path = path
        self.schema = schema
        self.rows = 0
        #: bytes of the Arrow data appended (what the operator no longer holds in memory)
        self.bytes = 0
        self._file = create_private_file(path, "wb", "operator spill file")
        self._sink = pa.PythonFile(self._file, mode="w")
        self._writer: pa.ipc.RecordBatchStreamWriter | None = pa.ipc.new_stream(self._sink, schema)

    def append(self, table: pa.Table | pa.RecordBatch) -> None:
        """Write ``table`` (of the run's schema) at the end of the run."""
        assert self._writer is not None, "append after close"
        if table.num_rows == 0:
            return
        if isinstance(table, pa.RecordBatch):
            self._writer.write_batch(table)
        else:
            self._writer.write_table(table)
        self.rows += table.num_rows
        self.bytes += table.nbytes

    def close(self) -> None:
        """No more appends; the run can be read."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            self._sink.close()
            self._file.close()

    def batches(self, max_rows: int | None = None) -> Iterator[pa.RecordBatch]:
        """The run's rows in order, in batches of at most ``max_rows`` (zero-copy slices of
        what was written), read through a memory map."""
        self.close()
        with pa.memory_map(self.path, "r") as source:
            reader = pa.ipc.open_stream(source)
            for batch in reader:
                if max_rows is None or batch.num_rows <= max_rows:
                    yield batch
                    continue
                for offset in range(0, batch.num_rows, max_rows):
                    yield batch.slice(offset, max_rows)

    def read_all(self) -> pa.Table:
        """The whole run as one table (for a run known to fit in memory)."""
        batches = list(self.batches())
        return pa.Table.from_batches(batches, schema=self.schema)

    def delete(self) -> None:
        """Close and remove the file; idempotent."""
        with contextlib.suppress(Exception):
            self.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
