"""Byte sizes as users write them in config (``4 MiB``, ``512MiB``, ``1 GB``, ``1048576``)."""

from __future__ import annotations

import re

from hybrid_shuffle.errors import ConfigError

__all__ = ["format_size", "parse_size"]

_UNITS = {
    "": 1,
    "b": 1,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "k": 1 << 10,
    "m": 1 << 20,
    "g": 1 << 30,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(value: int | str, path: str) -> int:
    """Bytes from ``1048576``, ``"4 MiB"``, ``"512MiB"``, ``"1 GB"``; must be positive."""
    if isinstance(value, bool):
        raise ConfigError(f"{path}: {value!r} is not a size; write e.g. 4 MiB, 512MiB or 1048576")
    if isinstance(value, int):
        size = value
    else:
        match = _SIZE.match(str(value))
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _UNITS:
            raise ConfigError(
                f"{path}: '{value}' is not a size; write e.g. 4 MiB, 512MiB or 1048576"
            )
        size = int(float(match.group(1)) * _UNITS[unit])
    if size <= 0:
        zero = "" if isinstance(value, int) else ", which is 0 bytes"
        raise ConfigError(f"{path}: must be a positive size, got {value!r}{zero}")
    return size


def format_size(n: int) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} B"
