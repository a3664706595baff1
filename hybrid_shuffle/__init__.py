"""hybrid-shuffle: pipelined, blocking and hybrid exchanges of a dataflow job on Ray.

The public names are loaded on first use (PEP 562), so ``import hybrid_shuffle``
costs milliseconds and pulls in neither Ray nor pandas; ``hs.Session`` loads the
runtime.  The library logs to the ``hybrid_shuffle`` logger (job start, end and
failure at INFO; polls, spills and releases at DEBUG) and adds no handler.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from hybrid_shuffle.errors import (
    CacheLostError,
    CacheSessionError,
    ConfigError,
    DataConsumptionError,
    ExecutorLostError,
    HybridShuffleError,
    JobCancelledError,
    JobFailedError,
    JobTimeoutError,
    PartitionCorruptedError,
    PartitionNotFoundError,
    PlanError,
    ProducerFailedError,
    PythonFunctionError,
    QueryFailedError,
    SchemaMismatchError,
    SessionClosedError,
    SlotsExceededError,
    UnsupportedPlanError,
    WaitTimeoutError,
)

if TYPE_CHECKING:
    from hybrid_shuffle.api.cached_stream import CachedStream
    from hybrid_shuffle.api.job import Job
    from hybrid_shuffle.api.local_keyed_stream import LocalKeyedStream
    from hybrid_shuffle.api.stream import KeyedStream, Stream
    from hybrid_shuffle.config import Config, ConfigWarning, load_config
    from hybrid_shuffle.progress import ProgressBars
    from hybrid_shuffle.result import EdgeMetrics, JobResult, VertexMetrics
    from hybrid_shuffle.runtime.cache_catalog import CacheInfo
    from hybrid_shuffle.runtime.progress import JobProgress
    from hybrid_shuffle.session import Session

logging.getLogger(__name__).addHandler(logging.NullHandler())

_LAZY = {
    "CacheInfo": "hybrid_shuffle.runtime.cache_catalog",
    "CachedStream": "hybrid_shuffle.api.cached_stream",
    "Config": "hybrid_shuffle.config",
    "ConfigWarning": "hybrid_shuffle.config",
    "EdgeMetrics": "hybrid_shuffle.result",
    "Job": "hybrid_shuffle.api.job",
    "JobProgress": "hybrid_shuffle.runtime.progress",
    "JobResult": "hybrid_shuffle.result",
    "KeyedStream": "hybrid_shuffle.api.stream",
    "LocalKeyedStream": "hybrid_shuffle.api.local_keyed_stream",
    "ProgressBars": "hybrid_shuffle.progress",
    "Session": "hybrid_shuffle.session",
    "Stream": "hybrid_shuffle.api.stream",
    "VertexMetrics": "hybrid_shuffle.result",
    "load_config": "hybrid_shuffle.config",
}

__all__ = [
    "CacheInfo",
    "CacheLostError",
    "CacheSessionError",
    "CachedStream",
    "Config",
    "ConfigError",
    "ConfigWarning",
    "DataConsumptionError",
    "EdgeMetrics",
    "ExecutorLostError",
    "HybridShuffleError",
    "Job",
    "JobCancelledError",
    "JobFailedError",
    "JobProgress",
    "JobResult",
    "JobTimeoutError",
    "KeyedStream",
    "LocalKeyedStream",
    "PartitionCorruptedError",
    "PartitionNotFoundError",
    "PlanError",
    "ProducerFailedError",
    "ProgressBars",
    "PythonFunctionError",
    "QueryFailedError",
    "SchemaMismatchError",
    "Session",
    "SessionClosedError",
    "SlotsExceededError",
    "Stream",
    "UnsupportedPlanError",
    "VertexMetrics",
    "WaitTimeoutError",
    "load_config",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'hybrid_shuffle' has no attribute '{name}'")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
