"""Choosing the shuffle service named by ``shuffle.service``.

A built-in name or a dotted path (``package.module:Factory`` or
``package.module.Factory``) to a class implementing the ``ShuffleServiceFactory``
protocol, so a second implementation plugs in without touching the scheduler
(FLIP-31).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from hybrid_shuffle.errors import ConfigError
from hybrid_shuffle.shuffle.api import ShuffleServiceFactory
from hybrid_shuffle.shuffle.local.service import ExecutorLocalShuffleServiceFactory

__all__ = ["BUILTIN_SERVICES", "load_shuffle_service"]

BUILTIN_SERVICES: dict[str, Callable[[], ShuffleServiceFactory]] = {
    ExecutorLocalShuffleServiceFactory.name: ExecutorLocalShuffleServiceFactory,
}


def load_shuffle_service(name: str) -> ShuffleServiceFactory:
    if name in BUILTIN_SERVICES:
        return BUILTIN_SERVICES[name]()
    hint = (
        f"use one of: {', '.join(BUILTIN_SERVICES)}, or a dotted path 'package.module:Factory' "
        "to a class implementing the ShuffleServiceFactory protocol"
    )
    module_name, sep, attr = name.partition(":")
    if not sep:
        module_name, _, attr = name.rpartition(".")
    if not module_name or not attr:
        raise ConfigError(f"shuffle.service: '{name}' is not a shuffle service; {hint}")
    try:
        factory_class = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"shuffle.service: cannot import '{name}' ({e}); {hint}") from e
    factory = factory_class() if isinstance(factory_class, type) else None
    if not isinstance(factory, ShuffleServiceFactory):
        raise ConfigError(
            f"shuffle.service: '{name}' does not implement the ShuffleServiceFactory protocol; "
            f"{hint}"
        )
    return factory
