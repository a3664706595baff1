"""Append-only Arrow IPC spill file of one result partition.

Each buffer is written as a self-contained IPC stream segment (schema + one
table) at a recorded offset, so any buffer can be read back alone, in any
order, while the producer is still appending: what hybrid consumers and
re-reads of blocking / hybrid-full partitions need.  Writes come from the task
thread and reads from poll threads, hence the lock.

The rows are users' data, so the file is private and never reused: it is
created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` and mode 0600 (set again with
``fchmod``, so the umask cannot change it).  A file or symbolic link already
at the path -- a leftover, or one planted to make us write elsewhere -- makes
creation fail with a ``FileExistsError`` naming the path, instead of
truncating it or writing through the link.  ``delete`` closes and unlinks it.
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass

import pyarrow as pa

from hybrid_shuffle.spill_dirs import create_private_file

__all__ = ["SpillFile", "SpillSegment"]


@dataclass(frozen=True)
class SpillSegment:
    offset: int
    length: int


class SpillFile:
    """One partition's spill file, created new and private (0600) at ``path``.

    Raises ``FileExistsError`` if anything (a file, a symlink) is already at
    ``path``; other ``OSError``s (a missing directory, a full disk) propagate.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._file = create_private_file(path, "w+b", "spill file")
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
        """Close and remove the file; idempotent (a file already gone is fine)."""
        with self._lock:
            if self._file.closed:
                return  # deleted already: a new file at the same path is not ours
            self._file.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
