"""Append-only Arrow IPC spill file of one result partition.

Each buffer is written as a self-contained IPC stream segment (schema + one
table) at a recorded offset, so any buffer can be read back alone, in any
order, while the producer is still appending: what hybrid consumers and
re-reads of blocking / hybrid-full partitions need.  Writes come from the task
thread and reads from poll threads, hence the lock.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

import pyarrow as pa

__all__ = ["SpillFile", "SpillSegment"]


@dataclass(frozen=True)
class SpillSegment:
    offset: int
    length: int


class SpillFile:
    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._file = open(path, "w+b")  # noqa: SIM115 - closed in delete()
        self._size = 0

    def append(self, table: pa.Table) -> SpillSegment:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        data = sink.getvalue()
        with self._lock:
            offset = self._size
            self._file.seek(offset)
            self._file.write(data)
            self._file.flush()
            self._size += data.size
        return SpillSegment(offset, data.size)

    def read(self, segment: SpillSegment) -> pa.Table:
        with self._lock:
            self._file.seek(segment.offset)
            data = self._file.read(segment.length)
        return pa.ipc.open_stream(pa.py_buffer(data)).read_all()

    @property
    def size(self) -> int:
        return self._size

    def delete(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()
            if os.path.exists(self.path):
                os.unlink(self.path)
