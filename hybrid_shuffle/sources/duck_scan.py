"""A Parquet split read by DuckDB itself: what a scan-and-query stage fuses into one query.

A ``from_parquet`` source whose chain starts with a ``sql`` query would decode
its row groups with pyarrow and push them into DuckDB as Arrow.  When DuckDB
reads the very same columns as the very same types, the task lets the query's
DuckDB read the split instead (``runtime.task``): ``input`` is a view over
``read_parquet`` of the split's files, restricted to its row groups by
``file_row_number`` ranges (a split's row groups of one file are contiguous, so
one range per file; DuckDB skips the row groups outside a range on their
statistics), and the query's ``WHERE`` is pushed into the Parquet scan.
Decoding, filtering and the stage's operators are then one DuckDB pipeline on
the task's DuckDB threads.

The driver decides (``reads_like_pyarrow``, once per source and column set) and
ships a ``DuckScan`` with each split: plain, picklable data (paths, row ranges,
columns).  It fuses only where the answer cannot change: local files whose
Parquet schemas are all the same, the columns read all in the files (no
partition column), no column DuckDB would name differently, and DuckDB's Arrow
schema of the read equal to pyarrow's (an INT96 timestamp, a dictionary, a
time zone, a view type: anything differing keeps the pyarrow path).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa

from hybrid_shuffle.errors import summary
from hybrid_shuffle.operators.duck.lowering import quote
from hybrid_shuffle.operators.duck.planning_database import planning_cursor

__all__ = ["DuckScan", "RowRange", "reads_like_pyarrow", "row_ranges"]

#: the virtual column ``read_parquet`` numbers a file's rows by
_ROW_NUMBER = "file_row_number"


@dataclass(frozen=True)
class RowRange:
    """Rows ``start`` to ``stop`` (exclusive) of one file: whole row groups of it."""

    path: str
    start: int
    stop: int
    #: the range is the whole file (no row-number filter needed)
    whole: bool


@dataclass(frozen=True)
class DuckScan:
    """What DuckDB reads of one split: ``columns`` of ``ranges``, in order."""

    #: the source's name (errors name it)
    source: str
    ranges: tuple[RowRange, ...]
    columns: tuple[str, ...]

    @property
    def rows(self) -> int:
        """The rows of the split's row groups (what the pyarrow path counts in)."""
        return sum(r.stop - r.start for r in self.ranges)

    def sql(self) -> str:
        """The ``SELECT`` over ``read_parquet`` that is the split's rows."""
        items = ", ".join(quote(c) for c in self.columns)
        parts = []
        for r in self.ranges:
            if r.whole:
                parts.append(f"SELECT {items} FROM read_parquet({_literal(r.path)}, {_OPTIONS})")
            else:
                parts.append(
                    f"SELECT {items} FROM read_parquet({_literal(r.path)}, {_OPTIONS}, "
                    f"{_ROW_NUMBER} = true) WHERE {_ROW_NUMBER} >= {r.start} "
                    f"AND {_ROW_NUMBER} < {r.stop}"
                )
        return " UNION ALL ".join(parts)

    def read_error(self, error: BaseException) -> OSError | None:
        """A DuckDB error that names one of the split's files, as one sentence naming the
        source and the file (it was there, and a Parquet file, when the job was planned);
        ``None`` for any other error (the query's own)."""
        text = summary(error)
        for r in self.ranges:
            if r.path in str(error):
                return OSError(
                    f"from_parquet '{self.source}': cannot read {r.path} ({text}); the file "
                    "was removed or rewritten after the job was planned, so run the job again"
                )
        return None


#: ``read_parquet``'s options: the files' own columns only, whatever their folders say
_OPTIONS = "hive_partitioning = false"


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def row_ranges(fragments: Sequence[Any], file_rows: dict[str, list[int]]) -> tuple[RowRange, ...]:
    """The row ranges of ``fragments`` (row-group fragments in file order), contiguous row
    groups of one file merged; ``file_rows`` is path -> its row groups' row counts."""
    ranges: list[tuple[str, int, int]] = []
    for fragment in fragments:
        counts = file_rows[fragment.path]
        for group in fragment.row_groups:
            start = sum(counts[: group.id])
            stop = start + counts[group.id]
            if ranges and ranges[-1][0] == fragment.path and ranges[-1][2] == start:
                ranges[-1] = (fragment.path, ranges[-1][1], stop)
            else:
                ranges.append((fragment.path, start, stop))
    return tuple(
        RowRange(os.path.abspath(path), start, stop, start == 0 and stop == sum(file_rows[path]))
        for path, start, stop in ranges
    )


def reads_like_pyarrow(fragments: Sequence[Any], columns: Sequence[str], schema: pa.Schema) -> bool:
    """DuckDB's ``read_parquet`` of ``columns`` of the files of ``fragments`` (pyarrow's,
    their footers read) gives the types pyarrow reads them as (``schema``, the split's read
    schema): every file has the same Parquet schema (then DuckDB reads each the same way),
    each column is one of the files' own, and the Arrow schema of DuckDB's
    ``read_parquet(...) LIMIT 0`` of the first file has ``columns``' names and types."""
    if not fragments or not columns:
        return False
    names = [n.lower() for n in schema.names]
    if len(set(names)) != len(names) or _ROW_NUMBER in names:
        return False  # DuckDB's names are case-insensitive; a column of its virtual name
    files = {f.path: f.metadata.schema for f in fragments}
    first = next(iter(files.values()))
    if not all(first.equals(other) for other in files.values()):
        return False
    items = ", ".join(quote(c) for c in columns)
    path = _literal(os.path.abspath(fragments[0].path))
    connection = planning_cursor()
    try:
        query = f"SELECT {items} FROM read_parquet({path}, {_OPTIONS}) LIMIT 0"
        got = connection.execute(query).to_arrow_table().schema
    except duckdb.Error:
        return False  # a column DuckDB does not have or cannot read: pyarrow reads it
    finally:
        connection.close()
    want = [schema.field(c) for c in columns]
    return got.names == list(columns) and all(
        g.type == w.type for g, w in zip(got, want, strict=True)
    )
