"""``Stream.write_parquet``: every subtask writes its own Parquet files; the driver commits.

A two-step commit, as Spark's file output committer does, so that a restarted
region (failover) never leaves the rows of a failed attempt behind:

1. each task attempt writes ``part-<subtask>-<n>.parquet`` files into a staging
   directory of its own, ``<dir>/_temporary/<run>/<subtask>.<attempt>/``
   (``ParquetWrite``, chained into the stream's last tasks: no row leaves the
   executor), and emits one manifest row per file (subtask, staged path, rows,
   bytes) at its end;
2. the driver reads the manifest of the final attempts (the job's result: a few
   rows, never the data) and moves those files into ``<dir>``
   (``commit``); ``_temporary`` goes, with whatever failed attempts wrote.

The driver and the executors must therefore see the same directory: a local
one on a one-node cluster, a shared file system on several nodes.  Files
starting with ``_`` are what ``pyarrow.dataset`` ignores, so a reader of
``<dir>`` never sees the staging area.

Batches are coalesced to about ``ROW_GROUP_BYTES`` before each write (an
exchange's buffers are small; a row group per buffer would make slow files),
and a file is closed after about ``FILE_BYTES`` of Arrow data.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from hybrid_shuffle.errors import PlanError
from hybrid_shuffle.operators.base import Operator
from hybrid_shuffle.operators.context import OperatorContext

__all__ = [
    "FILE_BYTES",
    "MANIFEST",
    "ROW_GROUP_BYTES",
    "WRITE_MODES",
    "ParquetWrite",
    "commit",
    "prepare",
]

#: Arrow bytes gathered before one row group is written
ROW_GROUP_BYTES = 16 << 20
#: Arrow bytes after which a subtask starts its next file
FILE_BYTES = 512 << 20
#: ``write_parquet(mode=)``: fail on a directory holding files, or replace its parts
WRITE_MODES = ("error", "overwrite")
#: what the sink emits (and ``write_parquet``'s result table holds): one row per file
MANIFEST = pa.schema(
    [
        ("subtask", pa.int32()),
        ("path", pa.string()),
        ("rows", pa.int64()),
        ("bytes", pa.int64()),
    ]
)
STAGING = "_temporary"


class ParquetWrite(Operator):
    """Writes its input to Parquet files in ``staging`` (see the module docstring);
    emits the manifest of the files from ``finish``."""

    needs_context = True

    def __init__(self, staging: str, name: str) -> None:
        self.staging = staging
        self.name = name
        self._context: OperatorContext | None = None
        self._writer: pq.ParquetWriter | None = None
        self._pending: list[pa.Table] = []
        self._pending_bytes = 0
        self._file_bytes = 0
        self._files: list[tuple[str, int]] = []  # (path, rows) of the files written
        self._schema: pa.Schema | None = None

    def open(self, context: OperatorContext | None = None) -> None:
        self._context = context or OperatorContext.unbounded()
        self._writer, self._pending, self._pending_bytes, self._files = None, [], 0, []
        self._schema = None

    @property
    def _dir(self) -> str:
        assert self._context is not None
        return os.path.join(self.staging, f"{self._context.subtask}.{self._context.attempt}")

    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        self._schema = self._schema or table.schema
        if table.num_rows:
            self._pending.append(table)
            self._pending_bytes += table.nbytes
            if self._pending_bytes >= ROW_GROUP_BYTES:
                self._flush()
        return ()

    def _flush(self) -> None:
        """Write what is pending as one row group, into a new file when the current one
        is full."""
        if not self._pending:
            return
        assert self._context is not None and self._schema is not None
        if self._writer is None or self._file_bytes >= FILE_BYTES:
            self._close()
            os.makedirs(self._dir, exist_ok=True)
            path = os.path.join(
                self._dir, f"part-{self._context.subtask:05d}-{len(self._files):05d}.parquet"
            )
            self._writer = pq.ParquetWriter(path, self._schema)
            self._files.append((path, 0))
            self._file_bytes = 0
        table = pa.concat_tables(self._pending)
        self._writer.write_table(table, row_group_size=max(table.num_rows, 1))
        path, rows = self._files[-1]
        self._files[-1] = (path, rows + table.num_rows)
        self._file_bytes += self._pending_bytes
        self._context.metrics.rows_written += table.num_rows
        self._pending, self._pending_bytes = [], 0

    def _close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def finish(self) -> Iterable[pa.Table]:
        assert self._context is not None
        self._flush()
        if not self._files and self._context.subtask == 0 and self._schema is not None:
            # one file with the columns, so that an empty result can still be read
            os.makedirs(self._dir, exist_ok=True)
            path = os.path.join(self._dir, "part-00000-00000.parquet")
            pq.write_table(self._schema.empty_table(), path)
            self._files.append((path, 0))
        self._close()
        metrics = self._context.metrics
        sizes = [os.path.getsize(p) for p, _ in self._files]
        metrics.files_written = len(self._files)
        metrics.bytes_written = sum(sizes)
        yield pa.table(
            {
                "subtask": pa.array([self._context.subtask] * len(self._files), pa.int32()),
                "path": pa.array([p for p, _ in self._files], pa.string()),
                "rows": pa.array([r for _, r in self._files], pa.int64()),
                "bytes": pa.array(sizes, pa.int64()),
            },
            schema=MANIFEST,
        )

    def output_schema(self, input_schemas: Sequence[pa.Schema | None]) -> pa.Schema | None:
        return MANIFEST


def prepare(directory: str, mode: str, what: str) -> None:
    """Before the run: ``directory`` exists and may be written (``mode``: ``error``
    refuses one that holds anything but staging leftovers; ``overwrite`` removes the
    ``part-*.parquet`` files a previous write left, and nothing else)."""
    if mode not in WRITE_MODES:
        raise PlanError(f"{what}: mode='{mode}' is not a write mode; use one of: error, overwrite")
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise PlanError(f"{what}: {directory!r} is a file; give a directory to write into")
    os.makedirs(directory, exist_ok=True)
    present = [n for n in os.listdir(directory) if n != STAGING]
    if mode == "error" and present:
        raise PlanError(
            f"{what}: {directory!r} already holds {len(present)} file(s) ({present[0]}, ...); "
            "give an empty or new directory, or mode='overwrite' to replace its part files"
        )
    for name in present:
        if name.startswith("part-") and name.endswith(".parquet"):
            os.remove(os.path.join(directory, name))


def commit(directory: str, staging: str, manifest: pa.Table) -> pa.Table:
    """After a successful run: move the files of ``manifest`` (the final attempts')
    from ``staging`` into ``directory``, drop the staging area, and return the manifest
    with the files' final paths."""
    final = []
    for path in manifest.column("path").to_pylist():
        target = os.path.join(directory, os.path.basename(path))
        os.replace(path, target)
        final.append(target)
    abort(directory, staging)
    return manifest.set_column(
        manifest.schema.get_field_index("path"), "path", pa.array(final, pa.string())
    )


def abort(directory: str, staging: str) -> None:
    """Remove the run's staging directory (and ``_temporary`` when nothing else is in it)."""
    shutil.rmtree(staging, ignore_errors=True)
    root = os.path.join(directory, STAGING)
    if os.path.isdir(root) and not os.listdir(root):
        os.rmdir(root)
