"""Parquet datasets the driver opened, kept while their files stay as they were.

Translating a Spark query makes a ``from_parquet`` source per scan, and each one
opened its dataset and parsed the files' footers to cut them into row-group fragments:
11-14 ms for TPC-H's ``lineitem`` at SF10 (one file, 524 row groups), three times over
in Q21's translation, whose whole translation took about 90 ms.  A source opened again
over the same files takes the dataset, its fragments and their row counts from here.

Nothing stale is kept: the key is the path with every file's size and modification
time under it, listed afresh on each open as pyarrow's discovery lists them (names
starting with ``.`` or ``_`` skipped), so a file rewritten, added or removed makes the
source open the dataset anew.  Only a local file or directory is kept (not a list of
files, a dataset the caller opened, or a source with a filter, whose fragments the
filter prunes), and only the ``_KEEP`` opened last.  Plain Python and pyarrow.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Any

__all__ = ["Opened", "keep", "kept", "key_of"]

#: the datasets kept at most (the least recently opened goes first)
_KEEP = 32

#: a dataset's key: its path and each file's (path, size, modification time in ns)
Key = tuple[str, tuple[tuple[str, int, int], ...]]
#: what is kept: the dataset, its row-group fragments and each fragment's row count
Opened = tuple[Any, list[Any], list[int]]

_LOCK = threading.Lock()
_OPENED: OrderedDict[Key, Opened] = OrderedDict()


def key_of(path: Any) -> Key | None:
    """``path``'s key if it is a local Parquet file or directory (None: not kept)."""
    if not isinstance(path, (str, os.PathLike)):
        return None
    where = os.fspath(path)
    if not isinstance(where, str) or "://" in where:
        return None
    try:
        if os.path.isfile(where):
            files = [where]
        elif os.path.isdir(where):
            files = []
            for folder, dirs, names in os.walk(where):
                dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
                files += [os.path.join(folder, n) for n in names if not n.startswith((".", "_"))]
        else:
            return None
        stats = tuple((f, s.st_size, s.st_mtime_ns) for f in sorted(files) for s in [os.stat(f)])
    except OSError:
        return None
    return where, stats


def kept(key: Key) -> Opened | None:
    """The dataset opened for ``key`` last, if it is still kept."""
    with _LOCK:
        found = _OPENED.get(key)
        if found is not None:
            _OPENED.move_to_end(key)
        return found


def keep(key: Key, opened: Opened) -> None:
    """Keep ``opened`` for ``key`` (dropping the least recently opened past ``_KEEP``)."""
    with _LOCK:
        _OPENED[key] = opened
        _OPENED.move_to_end(key)
        while len(_OPENED) > _KEEP:
            _OPENED.popitem(last=False)
