"""The builder users write jobs with: ``Job`` (sources, planning, running) and ``Stream``
(operators and exchanges)."""

from hybrid_shuffle.api.job import Job
from hybrid_shuffle.api.local_keyed_stream import LocalKeyedStream
from hybrid_shuffle.api.stream import KeyedStream, Stream

__all__ = ["Job", "KeyedStream", "LocalKeyedStream", "Stream"]
