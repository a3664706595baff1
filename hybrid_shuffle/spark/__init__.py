"""The session's Spark and the hand-over of DataFrames between Spark and the engine.

``backends`` chooses and starts Spark (``spark.backend``: ``raydp``, ``local``,
``attach``), ``options`` holds the settings it starts with, ``bridge`` moves
DataFrames in and out, through RayDP or through the engine's own ``holder``.
"""

from hybrid_shuffle.spark.bridge import SIZE_HINT, SparkBridge, check_spark_types
from hybrid_shuffle.spark.options import JAVA_OPTIONS, spark_configs

__all__ = ["JAVA_OPTIONS", "SIZE_HINT", "SparkBridge", "check_spark_types", "spark_configs"]
