"""Append-only Arrow IPC spill file of one result partition, checked when read back.

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

What is read back is what was written, or a ``PartitionCorruptedError`` naming
the partition and the file (``read``):

- each segment's xxh3-64 checksum is computed as it is appended and kept in
  memory with its offset and length (``SpillSegment``), and checked on every
  read; ``checksums=False`` (``shuffle.checksums: false``) computes and checks
  none;
- a file shorter than the segment (truncated), a file no longer linked in its
  directory (deleted: the open descriptor would still read it, but whatever
  removed it owns that directory too), and a segment that does not decode are
  refused whether checksums are on or not: those checks cost one ``fstat``.
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass

import pyarrow as pa
import xxhash

from hybrid_shuffle.errors import PartitionCorruptedError
from hybrid_shuffle.spill_dirs import create_private_file

__all__ = ["SpillFile", "SpillSegment", "checksum"]


def checksum(data: pa.Buffer | bytes) -> int:
    """The checksum of one segment's bytes: xxh3-64 (tens of GB/s; a spill is bound by
    the disk, not by this)."""
    return xxhash.xxh3_64_intdigest(memoryview(data))


@dataclass(frozen=True)
class SpillSegment:
    offset: int
    length: int
    #: ``checksum`` of the segment's bytes as written; None when checksums are off
    checksum: int | None = None


class SpillFile:
    """One partition's spill file, created new and private (0600) at ``path``.

    ``partition`` is the partition's id, for messages.  Raises ``FileExistsError``
    if anything (a file, a symlink) is already at ``path``; other ``OSError``s (a
    missing directory, a full disk) propagate.
    """

    def __init__(self, path: str, partition: str = "", checksums: bool = True) -> None:
        self.path = path
        self.partition = partition
        self.checksums = checksums
        self._lock = threading.Lock()
        self._file = create_private_file(path, "w+b", "spill file")
        self._size = 0

    def append(self, table: pa.Table) -> SpillSegment:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        data = sink.getvalue()
        digest = checksum(data) if self.checksums else None
        with self._lock:
            offset = self._size
            self._file.seek(offset)
            self._file.write(data)
            self._file.flush()
            self._size += data.size
        return SpillSegment(offset, data.size, digest)

    def read(self, segment: SpillSegment) -> pa.Table:
        """The table written at ``segment``; ``PartitionCorruptedError`` if the file was
        deleted or cut short, or the bytes are not what was written."""
        with self._lock:
            status = None if self._file.closed else os.fstat(self._file.fileno())
            if status is None or status.st_nlink == 0:  # unlinked: the fd alone still reads it
                raise self._corrupted(
                    "was deleted while its partition could still be read; something else "
                    "removes files under shuffle.spill_dir (a temp-file cleaner?), so give "
                    "the engine a directory of its own"
                )
            size = status.st_size
            try:
                data = b""
                if size >= segment.offset + segment.length:
                    data = os.pread(self._file.fileno(), segment.length, segment.offset)
            except OSError as e:  # EIO: the disk failed the read
                raise self._corrupted(
                    f"cannot be read at offset {segment.offset} ({type(e).__name__}: "
                    f"{e.strerror or e}); check the disk under shuffle.spill_dir"
                ) from e
        if len(data) < segment.length:
            raise self._corrupted(
                f"is truncated: its buffer at offset {segment.offset} needs {segment.length} "
                f"bytes, the file ends at {size}; a full disk or another process "
                "cut it short, so check the disk under shuffle.spill_dir"
            )
        if segment.checksum is not None and checksum(data) != segment.checksum:
            raise self._corrupted(
                f"is corrupted: its buffer at offset {segment.offset} ({segment.length} "
                "bytes) does not match the checksum it was written with; the disk under "
                "shuffle.spill_dir returned other bytes, so check that disk"
            )
        try:
            return pa.ipc.open_stream(pa.py_buffer(data)).read_all()
        except (pa.ArrowException, OSError, ValueError) as e:  # Arrow's IOError is an OSError
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise self._corrupted(
                f"is corrupted: its buffer at offset {segment.offset} ({segment.length} "
                f"bytes) is not readable Arrow IPC ({first}); check the disk under "
                "shuffle.spill_dir"
            ) from e

    def _corrupted(self, what: str) -> PartitionCorruptedError:
        of = f" of partition {self.partition}" if self.partition else ""
        return PartitionCorruptedError(
            f"spill file '{self.path}'{of} {what}",
            partition_id=self.partition or None,
            path=self.path,
        )

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
