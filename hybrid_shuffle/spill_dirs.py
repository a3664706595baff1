"""PROVISIONAL (replaced by the spill-at-rest work): session spill directories."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable

from hybrid_shuffle.errors import ConfigError

_OWNER = ".owner"


def check_spill_root(root: str) -> str:
    try:
        os.makedirs(root, mode=0o700, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"shuffle.spill_dir: cannot create '{root}' ({e})") from e
    if not os.path.isdir(root) or not os.access(root, os.W_OK | os.X_OK):
        raise ConfigError(f"shuffle.spill_dir: '{root}' is not a writable directory")
    return root


def create_session_dir(root: str, session_id: str, owner: str) -> str:
    path = os.path.join(root, session_id)
    os.mkdir(path, 0o700)
    with open(os.path.join(path, _OWNER), "w") as f:
        f.write(owner)
    return path


def remove_session_dir(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def sweep_stale_sessions(root: str, is_alive: Callable[[str], bool]) -> list[str]:
    return []
