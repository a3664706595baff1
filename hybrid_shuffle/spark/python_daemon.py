"""Spark's Python worker daemon, with the hand-over's imports made once before it forks.

Spark starts a Python worker for each task that runs Python (the hand-over's
``mapInArrow``) by forking its daemon (``pyspark.daemon``), and stops a worker
after a minute idle.  A fresh worker imports Ray, pyarrow and the engine's
hand-over code when it unpickles the task's function: the better part of a second
of every cold hand-over.  This daemon imports them first, so every worker it
forks has them already; it is otherwise Spark's own (``spark.python.daemon.module``
names it).  Nothing Ray runs is started here: each worker joins Ray itself, after
the fork.
"""

from __future__ import annotations

import pyarrow  # noqa: F401
import ray  # noqa: F401
from pyspark import daemon

import hybrid_shuffle.spark.holder  # noqa: F401

if __name__ == "__main__":
    daemon.manager()  # type: ignore[no-untyped-call]
