"""The Spark settings the engine starts Spark with, per backend.

Java 17 needs the ``--add-opens`` list (RayDP's documented list plus
``java.math``, without which RayDP's app master cannot serialise a decimal) on
every JVM Spark starts: the driver, the executors and, on RayDP, its app master.
The user's own Java options are appended to ours, never replace them; every
other user setting (``spark.configs``) wins over ours.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from collections.abc import Mapping

from hybrid_shuffle.config import SparkConfig
from hybrid_shuffle.quiet import LOG4J2_QUIET, is_quiet, spark_log_configs
from hybrid_shuffle.spill_dirs import default_spill_dir, make_private_dirs

__all__ = [
    "DAEMON_MODULE",
    "JAVA_OPTIONS",
    "driver_log_option",
    "local_spark_configs",
    "spark_configs",
]

log = logging.getLogger(__name__)

_OPENS = (
    "java.lang", "java.lang.invoke", "java.lang.reflect", "java.io", "java.net", "java.nio",
    "java.math", "java.text", "java.util", "java.util.concurrent",
    "java.util.concurrent.atomic", "jdk.internal.ref", "sun.nio.ch", "sun.nio.cs",
    "sun.security.action", "sun.util.calendar",
)  # fmt: skip
JAVA_OPTIONS = " ".join(
    [
        "-XX:+IgnoreUnrecognizedVMOptions",
        *(f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in _OPENS),
        "-Djdk.reflect.useDirectMethodHandle=false",
        "-Dio.netty.tryReflectionSetAccessible=true",
    ]
)
#: the module Spark's executors run as their Python daemon (``spark/python_daemon.py``)
DAEMON_MODULE = "hybrid_shuffle.spark.python_daemon"
_JAVA_KEYS = (
    "spark.driver.extraJavaOptions",
    "spark.executor.extraJavaOptions",
    "spark.ray.raydp_app_master.extraJavaOptions",
)
#: RayDP's app master only registers executors: its JVM starts faster with the quick
#: compiler alone and one garbage-collector thread (the driver and the executors, which
#: run the user's work, keep the JVM's defaults)
_APP_MASTER_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: where RayDP's Java agent writes its log in the driver's JVM unless ``ray.logging.dir``
#: says otherwise: fixed in the agent, whatever Ray's temporary directory is
RAY_SESSION_LINK = "/tmp/ray/session_latest"


def driver_log_option(link: str = RAY_SESSION_LINK) -> str:
    """The driver JVM's ``-Dray.logging.dir``, when RayDP's agent cannot use its default.

    The agent makes ``<link>/logs`` when the driver's JVM starts and stops the JVM when
    it cannot (PySpark then says only ``JAVA_GATEWAY_EXITED``).  It cannot when the
    link is dangling: something deleted the session directory it points at (a tmp
    cleaner, a hand), and Ray never replaces a dangling link (it tests the link with
    ``os.path.exists``, which follows it).  Then the agent gets a directory of the
    engine's and a warning names the link to remove; Ray's own files are left alone.
    Ray's Java workers (the executors, the app master) are given their session's log
    directory by Ray, so only the driver needs this.  ``""`` when the default works.
    """
    if not os.path.islink(link) or os.path.exists(link):
        return ""
    # in the user's own engine directory (the spill root's default), as the engine keeps
    # its other temporary files: two users never share it
    logs = os.path.join(default_spill_dir(), "raydp-driver-logs")
    try:
        make_private_dirs(logs)
    except OSError:  # something not a directory in the way: one of this process's own
        logs = tempfile.mkdtemp(prefix="hybrid-shuffle-raydp-driver-logs-")
    log.warning(
        "%s points at %s, which no longer exists, and Ray does not replace it; RayDP's "
        "driver logs to %s instead (rm %s, and Ray links it again at its next start)",
        link,
        os.readlink(link),
        logs,
        link,
    )
    return f"-Dray.logging.dir={logs}"


def _common(config: SparkConfig) -> dict[str, str]:
    return {
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "1000000",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",
        # the Arrow collect holds a partition's batches in the driver JVM before Python
        # reads them: 1 GiB ran out of heap at 30M rows (four partitions)
        "spark.driver.memory": "4g",
        "spark.driver.maxResultSize": "2g",
        # Spark's Python workers fork from a daemon that has imported Ray and the
        # hand-over's code: a worker Spark starts anew (the first, or one after a minute
        # idle) hands over without importing them (spark/python_daemon.py)
        "spark.python.daemon.module": DAEMON_MODULE,
    }


def _with_user(
    settings: dict[str, str], config: SparkConfig, java_keys: tuple[str, ...]
) -> dict[str, str]:
    user: Mapping[str, str] = config.configs
    settings.update({k: v for k, v in user.items() if k not in _JAVA_KEYS})
    for key in java_keys:
        settings[key] = f"{settings.get(key, JAVA_OPTIONS)} {user.get(key, '')}".strip()
    return settings


def spark_configs(config: SparkConfig, log_level: str | None = None) -> dict[str, str]:
    """Spark settings for RayDP: ours, then the user's (Java options are merged, not replaced).

    Spark's log4j2 configuration is the quiet one unless ``log_level`` is ``debug``
    (``hybrid_shuffle.quiet``); a user's own ``spark.log4j.config.file.name`` wins.
    """
    settings = {**spark_log_configs(log_level), **_common(config)}
    settings[_JAVA_KEYS[0]] = f"{JAVA_OPTIONS} {driver_log_option()}".strip()
    settings[_JAVA_KEYS[2]] = f"{JAVA_OPTIONS} {_APP_MASTER_OPTIONS}"
    return _with_user(settings, config, _JAVA_KEYS)


def local_spark_configs(config: SparkConfig, log_level: str | None = None) -> dict[str, str]:
    """Spark settings for local mode: the executors are the driver's threads, so the
    driver's heap is ``executor_memory`` times the executors (at least the 4 GiB the
    Arrow collect needs), and the quiet log4j2 file is a JVM option of the driver
    (RayDP's ``spark.log4j.config.file.name`` does not exist here)."""
    settings = _common(config)
    heap_mib = max(4096, (config.executor_memory >> 20) * config.executors)
    settings["spark.driver.memory"] = f"{heap_mib}m"
    quiet = f"-Dlog4j2.configurationFile=file:{LOG4J2_QUIET}" if is_quiet(log_level) else ""
    settings["spark.driver.extraJavaOptions"] = f"{JAVA_OPTIONS} {quiet}".strip()
    settings["spark.executor.extraJavaOptions"] = JAVA_OPTIONS
    return _with_user(settings, config, _JAVA_KEYS[:2])
