"""hybrid-shuffle: pipelined, blocking and hybrid exchanges of a dataflow job on Ray."""

from hybrid_shuffle.api import Job, KeyedStream, Stream
from hybrid_shuffle.config import Config, load_config
from hybrid_shuffle.errors import (
    ConfigError,
    DataConsumptionError,
    ExecutorLostError,
    HybridShuffleError,
    JobFailedError,
    PartitionNotFoundError,
    PlanError,
    ProducerFailedError,
    SlotsExceededError,
    WaitTimeoutError,
)
from hybrid_shuffle.result import EdgeMetrics, JobResult
from hybrid_shuffle.session import Session

__all__ = [
    "Config",
    "ConfigError",
    "DataConsumptionError",
    "EdgeMetrics",
    "ExecutorLostError",
    "HybridShuffleError",
    "Job",
    "JobFailedError",
    "JobResult",
    "KeyedStream",
    "PartitionNotFoundError",
    "PlanError",
    "ProducerFailedError",
    "Session",
    "SlotsExceededError",
    "Stream",
    "WaitTimeoutError",
    "load_config",
]
