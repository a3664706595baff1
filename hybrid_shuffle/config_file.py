"""Reading a YAML config file: text first, then plain data, each failure naming the file.

The file must be UTF-8 text (a byte-order mark is fine), parse as YAML with a
safe loader, give no key twice in one mapping (YAML would keep the last one
silently) and hold a mapping at the top.  Validation of the keys is
``hybrid_shuffle.config``'s; this module only turns a path into a mapping.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from hybrid_shuffle.errors import ConfigError

__all__ = ["read_yaml_file"]


def read_yaml_file(path: str) -> Mapping[str, Any] | None:
    """The file's top-level mapping, or None for an empty file."""
    text = _read_text(path)
    try:
        raw = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: plain data only
    except yaml.reader.ReaderError as e:
        raise ConfigError(
            f"config file '{path}' is not YAML text (character #x{e.character:04x} at "
            f"position {e.position}); give a UTF-8 YAML file"
        ) from e
    except ConfigError as e:
        raise ConfigError(f"config file '{path}' {e}") from e
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"config file '{path}': YAML syntax error{where}: {problem}") from e
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ConfigError(f"config file '{path}': the top level must be a mapping of keys")
    return raw


class _UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses a key given twice in one mapping (YAML keeps the last)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise ConfigError(
                    f"line {key_node.start_mark.line + 1}: key '{key}' is given twice (first on "
                    f"line {seen[key].start_mark.line + 1}); keep one"
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def _read_text(path: str) -> str:
    """The file's text; a ``ConfigError`` naming the file if it cannot be read as UTF-8."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError as e:
        raise ConfigError(f"config file '{path}' does not exist; check the path") from e
    except IsADirectoryError as e:
        raise ConfigError(f"config file '{path}' is a directory; give the YAML file") from e
    except OSError as e:
        raise ConfigError(
            f"config file '{path}' cannot be read ({e.strerror or e}); check its permissions"
        ) from e
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"config file '{path}' is not UTF-8 text (byte 0x{data[e.start]:02x} at offset "
            f"{e.start}); give a UTF-8 YAML file"
        ) from e
