"""Python functions of a Spark plan, run as steps of the engine's tasks.

``function`` loads a function as Spark ships it (through PySpark's own worker);
``scalar``, ``iterator`` and ``grouped`` are the steps: a scalar UDF per batch,
a function iterating its partition (``mapInPandas``), a function per group
(``applyInPandas``, cogroup, grouped aggregates); ``groups`` finds the groups and
``values`` converts a row-at-a-time ``@udf``'s values as Spark does.
"""

from hybrid_shuffle.operators.python.grouped import (
    PythonCoGroupedMap,
    PythonGroupedAgg,
    PythonGroupedMap,
    PythonWindowAgg,
)
from hybrid_shuffle.operators.python.iterator import PythonMapIter
from hybrid_shuffle.operators.python.scalar import PythonEval

__all__ = [
    "PYTHON_STEPS",
    "PythonCoGroupedMap",
    "PythonEval",
    "PythonGroupedAgg",
    "PythonGroupedMap",
    "PythonMapIter",
    "PythonWindowAgg",
]

#: the steps' classes (each knows its output schema without running: its declared types)
PYTHON_STEPS = (
    PythonEval,
    PythonMapIter,
    PythonGroupedMap,
    PythonGroupedAgg,
    PythonCoGroupedMap,
    PythonWindowAgg,
)
