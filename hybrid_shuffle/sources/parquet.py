"""``Job.from_parquet``: a Parquet dataset read by the source subtasks themselves.

The driver opens the dataset with ``pyarrow.dataset`` (file listing, schema, and
the row groups' footers), checks the columns and the filter against the files'
schema, and cuts the dataset into row-group fragments, dropping those whose
statistics rule the filter out.  At run time (once column pruning has said
which columns the job reads) it deals the fragments into ``parallelism``
contiguous splits of about equal rows: a ``ParquetSplit`` is plain, picklable
data (paths, row-group ids, columns, filter), shipped in the task deployment
like a from_arrow source's ObjectRefs, and read inside the executor
(``runtime.task`` calls ``read``).  The driver never holds a row, and
``JobResult.sources_seconds`` only counts the splitting.

Pushdown is pyarrow's: the columns read are ``columns`` (or, left out, the ones
the plan needs: ``plan.pruning``), and the filter is applied by the scan (row
groups skipped on statistics, rows filtered exactly).

A split also says how DuckDB would read it (``ParquetSplit.scan``, a ``DuckScan``)
when DuckDB reads the same types pyarrow does; a task whose chain starts with a
``sql`` query then lets the query read the split itself (``sources.duck_scan``).
No such description for a source with a filter, a dataset opened by the caller, a
read of no column, files that are not local, or an empty split.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyarrow.fs import LocalFileSystem

from hybrid_shuffle.empty_column import placeholder
from hybrid_shuffle.errors import PlanError, summary
from hybrid_shuffle.sources import opened_parquet
from hybrid_shuffle.sources.duck_scan import DuckScan, reads_like_pyarrow, row_ranges

if TYPE_CHECKING:  # imported where the driver opens a dataset: pyarrow.dataset imports
    # pandas, a third of a second of CPU that every executor process would pay at start
    import pyarrow.dataset as ds

__all__ = ["ParquetSource", "ParquetSplit", "deal_splits"]


def deal_splits(rows: Sequence[int], parallelism: int) -> list[list[int]]:
    """Indices of ``rows`` (row counts of fragments, in file order) dealt into
    ``parallelism`` contiguous groups of about equal rows (some empty when there are
    fewer fragments than groups).  A fragment goes to the group its first row falls
    in on an even split of the total, so no group is starved by one large fragment
    coming early and the order of the files is kept."""
    if parallelism < 1:
        raise ValueError(f"parallelism must be positive, got {parallelism}")
    groups: list[list[int]] = [[] for _ in range(parallelism)]
    if not rows:
        return groups
    total = sum(rows)
    if total == 0:  # no statistics worth using: deal by count
        for i in range(len(rows)):
            groups[i * parallelism // len(rows)].append(i)
        return groups
    start = 0
    for i, n in enumerate(rows):
        # the fragment's middle row decides its group, which balances both ways
        groups[min((2 * start + n) * parallelism // (2 * total), parallelism - 1)].append(i)
        start += n
    return groups


class _Fragments(Sequence[Any]):
    """A split's row-group fragments as they travel: the files' format and filesystem
    once, and each fragment's path, row-group ids and partition expression, rebuilt into
    fragments on first use.

    Pickled as themselves, pyarrow's fragments carry the format, the filesystem and the
    partition expression each: a split of TPC-H SF1's ``lineitem`` (27 row groups) was
    21.8 KiB, 1.0 ms to pickle on the driver (in every deployment, one task after
    another) and 0.7 ms to load in the executor; as parts it is 2.3 KiB, 0.06 ms and
    0.02 ms.  A task whose DuckDB reads the split (``scan``) never builds them."""

    def __init__(self, format: Any, filesystem: Any, parts: tuple[tuple[Any, ...], ...]) -> None:
        self._format = format
        self._filesystem = filesystem
        self._parts = parts
        self._built: list[Any] | None = None

    @classmethod
    def of(cls, fragments: Sequence[Any]) -> _Fragments:
        if not fragments:
            return cls(None, None, ())
        first = fragments[0]
        parts = tuple(
            (f.path, tuple(rg.id for rg in f.row_groups), _expression(f.partition_expression))
            for f in fragments
        )
        made = cls(first.format, first.filesystem, parts)
        made._built = list(fragments)  # the driver's own, as they are
        return made

    def _fragments(self) -> list[Any]:
        if self._built is None:
            self._built = [
                self._format.make_fragment(path, self._filesystem, expression, list(ids))
                for path, ids, expression in self._parts
            ]
        return self._built

    def __getitem__(self, index: Any) -> Any:
        return self._fragments()[index]

    def __len__(self) -> int:
        return len(self._parts)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Fragments, (self._format, self._filesystem, self._parts))


def _expression(expression: pc.Expression) -> pc.Expression | None:
    """A fragment's partition expression, or None for the trivial one (no partitions)."""
    return None if expression.equals(pc.scalar(True)) else expression


@dataclass(frozen=True)
class ParquetSplit:
    """One subtask's share of a Parquet dataset: row-group fragments to read in order
    (pyarrow's ``ParquetFileFragment``, one row group each; they travel as ``_Fragments``)."""

    fragments: Sequence[Any]
    schema: pa.Schema  # the dataset's (partition columns included)
    columns: tuple[str, ...] | None
    filter: pc.Expression | None
    #: the same rows as DuckDB reads them, where it reads the same types (else None)
    scan: DuckScan | None = None

    def read(self) -> Iterator[pa.Table]:
        """The split's rows, one table per row group (runs in the executor); a zero-row
        table of the columns when nothing is left, so the task knows its schema.  A read
        of no column (``columns=()``) yields ``EMPTY_COLUMN`` instead, one null per row."""
        columns = None if self.columns is None else list(self.columns)
        if columns == []:
            yield placeholder(sum(self._rows(f) for f in self.fragments))
            return
        emitted = False
        for fragment in self.fragments:
            table = fragment.to_table(schema=self.schema, columns=columns, filter=self.filter)
            if table.num_rows:
                emitted = True
                yield table
        if not emitted:
            names = self.schema.names if columns is None else columns
            yield pa.schema([self.schema.field(n) for n in names]).empty_table()

    def _rows(self, fragment: Any) -> int:
        """How many rows of a row-group fragment the filter keeps (its footer's count
        without one; ``count_rows`` would count the whole file's)."""
        if self.filter is None:
            return sum(rg.num_rows for rg in fragment.row_groups)
        return int(fragment.to_table(schema=self.schema, columns=[], filter=self.filter).num_rows)


class ParquetSource:
    """The driver's side of ``from_parquet``: opened and checked once, split per run."""

    def __init__(
        self,
        path: Any,
        name: str,
        columns: Sequence[str] | None,
        filter: pc.Expression | None,
    ) -> None:
        what = f"from_parquet '{name}'"
        # the same files opened before: their dataset and fragments (``opened_parquet``)
        key = opened_parquet.key_of(path) if filter is None else None
        found = opened_parquet.kept(key) if key is not None else None
        self.dataset = _open(path, what) if found is None else found[0]
        #: the schema the files are read as: their own, with views as plain strings
        self.read_schema = without_views(self.dataset.schema)
        full = self.read_schema
        if columns is not None:
            if isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
                raise PlanError(f"{what}: columns must be a list of column names, got {columns!r}")
            missing = [c for c in columns if c not in full.names]
            if missing:
                raise PlanError(
                    f"{what}: column '{missing[0]}' is not in the files at {path!r}; their "
                    f"columns are {', '.join(full.names)}"
                )
        if filter is not None:
            _check_filter(filter, full, what, path)
        self.name = name
        self.columns = None if columns is None else tuple(columns)
        self.filter = filter
        import pyarrow.dataset as ds

        #: DuckDB may read the splits (``sources.duck_scan``): the files' own columns, as
        #: pyarrow would read them, local and unfiltered
        self.duckdb_readable = (
            filter is None
            and not isinstance(path, ds.FileSystemDataset)
            and isinstance(self.dataset.filesystem, LocalFileSystem)
        )
        self._reads_like_pyarrow: dict[tuple[str, ...], bool] = {}
        #: the stream's schema: the columns asked for, in the files' order of them (no
        #: column: ``EMPTY_COLUMN``)
        self.schema = full if columns is None else pa.schema([full.field(c) for c in columns])
        if columns is not None and not columns:
            self.schema = placeholder(0).schema
        if found is not None:
            _, self.fragments, self.rows = found
        else:
            self.fragments = [
                rg
                for fragment in self.dataset.get_fragments(filter=filter)
                for rg in fragment.split_by_row_group(filter, schema=self.dataset.schema)
            ]
            self.rows = [sum(r.num_rows for r in f.row_groups) for f in self.fragments]
            if key is not None:
                opened_parquet.keep(key, (self.dataset, self.fragments, self.rows))

    def splits(self, parallelism: int, columns: Sequence[str] | None) -> list[ParquetSplit]:
        """``parallelism`` splits reading ``columns`` (``None``: the stream's own), one per
        subtask in subtask order."""
        keep = self.columns if columns is None else tuple(columns)
        fuse = self._fusable(keep)
        splits = []
        for group in deal_splits(self.rows, parallelism):
            fragments = tuple(self.fragments[i] for i in group)
            scan = None
            if fuse and fragments:
                read = tuple(self.read_schema.names) if keep is None else keep
                scan = DuckScan(self.name, row_ranges(fragments, self._file_rows()), read)
            splits.append(
                ParquetSplit(_Fragments.of(fragments), self.read_schema, keep, self.filter, scan)
            )
        return splits

    def _fusable(self, keep: tuple[str, ...] | None) -> bool:
        """DuckDB reads ``keep`` (``None``: every column) as pyarrow does (asked once per
        column set: it reads the files' footers)."""
        if not self.duckdb_readable or keep == ():
            return False
        read = tuple(self.read_schema.names) if keep is None else keep
        if read not in self._reads_like_pyarrow:
            fits = reads_like_pyarrow(self.fragments, read, self.read_schema)
            self._reads_like_pyarrow[read] = fits
        return self._reads_like_pyarrow[read]

    def _file_rows(self) -> dict[str, list[int]]:
        """Path -> its row groups' row counts (from the footers read when opened)."""
        if not hasattr(self, "_rows_per_file"):
            self._rows_per_file: dict[str, list[int]] = {}
            for fragment in self.fragments:
                if fragment.path not in self._rows_per_file:
                    meta = fragment.metadata
                    counts = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
                    self._rows_per_file[fragment.path] = counts
        return self._rows_per_file


#: Arrow's view types and the plain type each is read as
_VIEWS = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}


def without_views(schema: pa.Schema) -> pa.Schema:
    """``schema`` with ``string_view``/``binary_view`` columns as ``string``/``binary``.
    Files written with views (tpchgen-cli's) read back as views, and DuckDB pushes a
    join's filter into its Arrow scan as a pyarrow expression comparing with a plain
    string scalar, which Arrow has no kernel for (``equal(string_view, string)``): the
    task failed on the data.  The cast is made by the Parquet reader as it decodes."""
    if not any(f.type in _VIEWS for f in schema):
        return schema
    fields = [f.with_type(_VIEWS.get(f.type, f.type)) for f in schema]
    return pa.schema(fields, metadata=schema.metadata)


def _open(path: Any, what: str) -> ds.Dataset:
    """The dataset at ``path`` (a file, a directory, or a list of files; hive-style
    partition directories become columns, of the types pyarrow infers), with a
    one-sentence error for a bad path; a ``pyarrow.dataset`` opened by the caller (with a
    partitioning of its own) as it is."""
    import pyarrow.dataset as ds

    if isinstance(path, ds.FileSystemDataset):  # opened by the caller (its partitioning)
        return path
    try:
        dataset = ds.dataset(path, format="parquet", partitioning="hive")
    except FileNotFoundError as e:
        raise PlanError(f"{what}: {path!r} does not exist; give a Parquet file or directory") from e
    except (pa.ArrowInvalid, OSError) as e:
        raise PlanError(
            f"{what}: {path!r} cannot be read as Parquet ({summary(e)}); give a Parquet "
            "file or a directory of them"
        ) from e
    if not dataset.files:
        raise PlanError(
            f"{what}: {path!r} holds no Parquet file; give a file or a directory of them"
        )
    return dataset


def _check_filter(filter: Any, schema: pa.Schema, what: str, path: Any) -> None:
    """A filter is a pyarrow expression on the files' columns, of a boolean result."""
    if not isinstance(filter, pc.Expression):
        raise PlanError(
            f"{what}: filter must be a pyarrow.compute expression such as "
            f"pc.field('x') > 0, got a {type(filter).__name__}"
        )
    try:
        schema.empty_table().filter(filter)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        missing = re.search(r"FieldRef\.Name\(([^)]*)\)", str(e))
        if missing:
            raise PlanError(
                f"{what}: the filter names column '{missing.group(1)}', which is not in the "
                f"files at {path!r}; their columns are {', '.join(schema.names)}"
            ) from e
        raise PlanError(
            f"{what}: the filter {filter} cannot apply to the files ({summary(e)})"
        ) from e
