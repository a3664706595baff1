"""Where spilled partitions live on disk, and who may read them.

Spilled buffers are users' rows, so they are kept private to the user running
the session and removed when nothing needs them any more:

- the **root** (``shuffle.spill_dir``) defaults to a per-user folder,
  ``hybrid-shuffle-<uid>`` in the system temp folder, created 0700.  A root is
  refused (``ConfigError`` naming ``shuffle.spill_dir``) when it is a file,
  cannot be created or written, or can be written by every user without the
  sticky bit (anyone could replace this session's directory; a group-writable
  root is accepted, as user-private groups and umask 002 make it common); the default root
  must moreover be a real directory owned by this user (anyone can pre-create a
  name in the temp folder);
- each session gets its own **session directory** ``<root>/<session id>``,
  0700, holding an **owner marker** (``.owner``, 0600: a magic first line and
  the owner string, e.g. ``host:driver-pid``).  The marker is what makes a
  directory "ours": the sweep never touches a folder without it;
- ``remove_session_dir`` deletes a session directory on close, and
  ``sweep_stale_sessions`` deletes, at the start of a session, the directories
  of sessions whose owner is gone (a driver that crashed never closed its own).

Spill files inside are created 0600 with exclusive create and without
following symlinks (``hybrid_shuffle.shuffle.spill_file``).  Modes are set
with an explicit ``chmod`` after creation, so neither a permissive nor an odd
umask changes them.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import stat
import tempfile
import uuid
from collections.abc import Callable
from typing import IO, Any

from hybrid_shuffle.errors import ConfigError

__all__ = [
    "OWNER_MARKER",
    "check_spill_root",
    "create_session_dir",
    "default_spill_dir",
    "is_session_id",
    "make_private_dirs",
    "new_session_id",
    "read_owner",
    "remove_session_dir",
    "spill_files",
    "sweep_stale_sessions",
]

log = logging.getLogger("hybrid_shuffle")

#: the file inside a session directory that names its owner (a dot file: not data)
OWNER_MARKER = ".owner"
#: the first line of every owner marker, so a stray ``.owner`` file is not taken for ours
_MAGIC = "hybrid-shuffle session directory"
#: session ids as ``new_session_id`` makes them (``s`` + hex); only such names are swept
_SESSION_ID = re.compile(r"s[0-9a-f]{8,32}")
_MAX_OWNER = 1024
_PRIVATE_DIR = 0o700
_PRIVATE_FILE = 0o600
_KEY = "shuffle.spill_dir"
_FIX = "set it to a directory only you can write"
#: create a new file: never an existing one, never through a symlink
_EXCLUSIVE = (
    os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
)


def default_spill_dir() -> str:
    """The default root: ``hybrid-shuffle-<uid>`` in the system temp folder.

    Per user, so that two users of one machine never share (or fight over) a
    directory; ``check_spill_root`` insists that this one belongs to the caller.
    """
    who = str(os.getuid()) if hasattr(os, "getuid") else _safe_user()
    return os.path.join(tempfile.gettempdir(), f"hybrid-shuffle-{who}")


def _safe_user() -> str:
    import getpass

    return re.sub(r"[^A-Za-z0-9_.-]", "_", getpass.getuser()) or "user"


def new_session_id() -> str:
    """A fresh session id of the form the sweep recognises (``s`` and 10 hex digits)."""
    return f"s{uuid.uuid4().hex[:10]}"


def is_session_id(name: str) -> bool:
    """Whether ``name`` has the form of a session id (``s`` and 8 to 32 hex digits)."""
    return _SESSION_ID.fullmatch(name) is not None


# -- the root ---------------------------------------------------------------------------------


def check_spill_root(root: str, *, create: bool = True) -> str:
    """The absolute path of a usable spill root, created (0700) if missing and ``create``.

    Raises ``ConfigError`` naming ``shuffle.spill_dir`` when the root is a file,
    cannot be created or written, is writable by every user without the sticky
    bit, or is the default root but not a directory of this user.  With
    ``create=False`` (``hybrid-shuffle validate``) nothing is created: a missing
    root passes if its nearest existing ancestor is a writable directory.
    """
    path = os.path.abspath(os.path.expanduser(root))
    if not os.path.lexists(path):
        if not create:
            _check_creatable(path)
            return path
        _create_root(path)
    _check_root(path, is_default=path == os.path.abspath(default_spill_dir()))
    return path


def _create_root(path: str) -> None:
    try:
        make_private_dirs(path)
    except NotADirectoryError as e:
        raise ConfigError(
            f"{_KEY}: cannot create '{path}' because a part of that path is a file; {_FIX}"
        ) from e
    except OSError as e:
        raise ConfigError(f"{_KEY}: cannot create '{path}' ({e.strerror or e}); {_FIX}") from e


def _check_creatable(path: str) -> None:
    parent = os.path.dirname(path)
    while not os.path.lexists(parent) and parent != os.path.dirname(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ConfigError(f"{_KEY}: cannot create '{path}' because '{parent}' is a file; {_FIX}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(
            f"{_KEY}: cannot create '{path}' because '{parent}' is not writable by this "
            f"user; {_FIX}"
        )


def _check_root(path: str, *, is_default: bool) -> None:
    try:
        st = os.lstat(path) if is_default else os.stat(path)
    except OSError as e:  # a dangling symlink, or a component we may not search
        raise ConfigError(f"{_KEY}: cannot use '{path}' ({e.strerror or e}); {_FIX}") from e
    if not stat.S_ISDIR(st.st_mode):
        what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "a file"
        raise ConfigError(f"{_KEY}: '{path}' is {what}, not a directory; {_FIX}")
    uid = os.getuid() if hasattr(os, "getuid") else None
    if is_default and uid is not None and st.st_uid != uid:
        raise ConfigError(
            f"{_KEY}: the default spill directory '{path}' belongs to another user (uid "
            f"{st.st_uid}); remove it or set {_KEY} to a directory only you can write"
        )
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"{_KEY}: '{path}' is not writable by this user; {_FIX}")
    if uid is not None and st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
        raise ConfigError(
            f"{_KEY}: '{path}' is writable by every user and has no sticky bit, so anyone "
            "could replace this session's files; run chmod o-w (or chmod +t) on it or "
            "choose another directory"
        )


def make_private_dirs(path: str) -> None:
    """Create ``path`` and every missing parent with mode exactly 0700.

    ``os.makedirs(path, mode=0o700)`` applies the mode to the last component
    only (parents get 0777 minus the umask); executors that create a session's
    directory on another node should call this instead.  Existing components
    are left as they are; one that is not a directory raises ``NotADirectoryError``.
    """
    path = os.path.abspath(path)
    missing: list[str] = []
    current = path
    while not os.path.lexists(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    if os.path.lexists(current) and not os.path.isdir(current):
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", current)
    for directory in reversed(missing):
        try:
            os.mkdir(directory, _PRIVATE_DIR)
        except FileExistsError:  # created concurrently (another executor): keep theirs
            if not os.path.isdir(directory):
                raise
            continue
        os.chmod(directory, _PRIVATE_DIR)


# -- session directories ------------------------------------------------------------------------


def create_session_dir(root: str, session_id: str, owner: str) -> str:
    """Create ``<root>/<session_id>`` (0700) with its owner marker (0600); return its path.

    ``owner`` is an opaque one-line string the caller can later judge with the
    ``is_alive`` it passes to ``sweep_stale_sessions`` (the session uses
    ``host:driver-pid``).  ``session_id`` must look like ``new_session_id()``'s,
    or the sweep would never recognise the directory.  The directory must not
    exist yet (``FileExistsError``): a session never shares one.
    """
    if not is_session_id(session_id):
        raise ValueError(
            f"session id '{session_id}' is not of the form s<8 to 32 hex digits>; use "
            "new_session_id()"
        )
    if not owner or "\n" in owner or len(owner) > _MAX_OWNER:
        raise ValueError(f"owner must be one non-empty line of at most {_MAX_OWNER} characters")
    path = os.path.join(root, session_id)
    os.mkdir(path, _PRIVATE_DIR)
    os.chmod(path, _PRIVATE_DIR)
    try:
        with create_private_file(os.path.join(path, OWNER_MARKER), "w", "owner marker") as f:
            f.write(f"{_MAGIC}\n{owner}\n")
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    return path


def create_private_file(path: str, mode: str, what: str) -> IO[Any]:
    """A new file at ``path`` with mode exactly 0600 (whatever the umask), opened with
    ``mode``: never an existing file and never through a symbolic link, where it raises
    ``FileExistsError`` naming ``what`` and the path."""
    try:
        fd = os.open(path, _EXCLUSIVE, _PRIVATE_FILE)
    except OSError as e:
        if isinstance(e, FileExistsError) or e.errno == errno.ELOOP:
            raise FileExistsError(
                errno.EEXIST,
                f"{what} '{path}' already exists (a leftover file or a symbolic link); "
                "refusing to reuse it or write through it",
            ) from e
        raise
    try:
        os.fchmod(fd, _PRIVATE_FILE)
        return os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8")
    except BaseException:
        os.close(fd)
        os.unlink(path)
        raise


def read_owner(session_dir: str) -> str | None:
    """The owner string of a session directory, or None if it is not one of ours.

    Ours means: a real directory (not a symlink) whose owner marker is a regular
    file starting with the magic line.  Never raises for a foreign or broken
    directory; it simply is not ours.
    """
    marker = os.path.join(session_dir, OWNER_MARKER)
    try:
        if not stat.S_ISDIR(os.lstat(session_dir).st_mode):
            return None
        fd = os.open(marker, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return None
            text = f.read(len(_MAGIC) + _MAX_OWNER + 4).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    lines = text.split("\n")
    if len(lines) < 2 or lines[0] != _MAGIC or not lines[1]:
        return None
    return lines[1]


def remove_session_dir(path: str) -> None:
    """Delete a session directory and everything in it; never raises for I/O.

    Called from ``Session.close()``, which must finish closing even if the disk
    misbehaves: a directory that cannot be removed is logged at WARNING (the
    next session's sweep retries it).  ``path`` must end in a session id (a
    ``ValueError`` otherwise), so a wrong argument can never wipe the root.
    """
    if not is_session_id(os.path.basename(os.path.normpath(path))):
        raise ValueError(f"'{path}' is not a session directory (its name is not a session id)")
    try:
        if os.path.islink(path):  # never follow it: remove the link only
            os.unlink(path)
            return
    except FileNotFoundError:
        return
    except OSError as e:
        log.warning("could not remove the spill directory link %s: %s", path, e)
        return
    shutil.rmtree(path, ignore_errors=True)
    if os.path.lexists(path):
        log.warning("could not remove the spill directory %s; remove it by hand", path)


def sweep_stale_sessions(root: str, is_alive: Callable[[str], bool]) -> list[str]:
    """Remove the session directories under ``root`` whose owner is gone; return their paths.

    Only directories that are ours are candidates: named like a session id, a
    real directory owned by this user, with a valid owner marker
    (``read_owner``).  ``is_alive(owner)`` decides; if it raises, the directory
    is kept (logged), since deleting a live session's data is worse than
    keeping a dead one's.  A missing or unreadable root sweeps nothing.
    """
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    uid = os.getuid() if hasattr(os, "getuid") else None
    removed: list[str] = []
    for entry in sorted(entries, key=lambda e: e.name):
        if not is_session_id(entry.name):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or (uid is not None and st.st_uid != uid):
            continue
        owner = read_owner(entry.path)
        if owner is None:
            continue
        try:
            alive = is_alive(owner)
        except Exception:
            log.warning("cannot tell whether %s (owner %s) is alive; keeping it", entry.path, owner)
            continue
        if alive:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        if os.path.lexists(entry.path):
            log.warning("could not remove the stale spill directory %s", entry.path)
            continue
        log.info("removed the spill directory of ended session %s (owner %s)", entry.name, owner)
        removed.append(entry.path)
    return removed


def spill_files(session_dir: str) -> list[str]:
    """Every data file under a session directory (the owner marker is not data), sorted.

    Empty after every job: a non-empty answer means a job left rows on disk.
    """
    return sorted(
        os.path.join(directory, name)
        for directory, _, names in os.walk(session_dir)
        for name in names
        if not (directory == session_dir and name == OWNER_MARKER)
    )
