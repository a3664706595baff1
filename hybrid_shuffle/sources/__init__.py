"""Sources that read in the executors: the driver plans splits, each subtask reads its own."""

from hybrid_shuffle.sources.parquet import ParquetSource, ParquetSplit, deal_splits

__all__ = ["ParquetSource", "ParquetSplit", "deal_splits"]
