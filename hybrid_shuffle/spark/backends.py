"""Where the session's Spark runs (``spark.backend``): RayDP, local mode, or the user's own.

- ``raydp``: Spark on Ray through ``raydp.init_spark``, its executors Ray actors.
  RayDP 1.6.5 pins ``pyspark<=3.5.7``, so this backend needs pyspark 3.5 and
  RayDP installed (``pip install 'hybrid-shuffle[raydp]'``); it is the default
  there, as before this setting existed.
- ``local``: Spark's local mode in the driver process's JVM, ``executors *
  executor_cores`` task threads.  It needs only pyspark, any supported version,
  and is the default wherever RayDP cannot run (pyspark 4).
- ``attach``: the ``SparkSession`` given as ``hs.Session(config, spark=...)``: a
  notebook's session, a cluster's, ``spark-submit``'s.  The engine never stops it.

The choice is checked when the session opens (not when Spark first starts), so a
backend that does not fit the installed pyspark is one ``ConfigError`` sentence
naming both versions, before any job is built.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import os
import sys
import threading
from dataclasses import dataclass
from typing import Any

from hybrid_shuffle._words import plural
from hybrid_shuffle.config import SparkConfig
from hybrid_shuffle.errors import ConfigError
from hybrid_shuffle.spark.class_archive import archive_options, dump_workers, worker_options
from hybrid_shuffle.spark.options import local_spark_configs, spark_configs

__all__ = [
    "SparkBackend",
    "choose_backend",
    "describe_backend",
    "installed_pyspark",
    "launch_driver_jvm",
    "require_pyspark",
    "start_spark",
    "stop_spark",
]

log = logging.getLogger(__name__)

#: the newest pyspark RayDP 1.6.5 accepts
_RAYDP_PYSPARK = (3, 5)


@dataclass(frozen=True)
class SparkBackend:
    """The backend the session uses and the pyspark it runs with."""

    #: ``raydp``, ``local`` or ``attach``
    name: str
    #: the installed pyspark's version, ``4.3.0`` (None: pyspark is not installed)
    pyspark: str | None

    @property
    def uses_raydp(self) -> bool:
        return self.name == "raydp"


def installed_pyspark() -> str | None:
    """The installed pyspark's version, read from its metadata (pyspark is not imported:
    that takes a second and is not needed to choose)."""
    try:
        return importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError:
        return None


def _major_minor(version: str) -> tuple[int, int]:
    parts = [*version.split("."), "0"][:2]
    try:
        return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)
    except ValueError:
        return 0, 0


def choose_backend(config: SparkConfig, spark: Any) -> SparkBackend:
    """The backend ``spark.backend`` asks for (or the installed pyspark's default), checked
    against what is installed and against ``spark=``."""
    pyspark = installed_pyspark()
    name = config.backend
    if spark is not None:
        if name not in (None, "attach"):
            raise ConfigError(
                f"spark.backend: {name} starts its own Spark, but a SparkSession was passed as "
                "spark=; set spark.backend: attach (or leave it out) to use the session passed"
            )
        return SparkBackend("attach", pyspark)
    if name == "attach":
        raise ConfigError(
            "spark.backend: attach uses the SparkSession you already have, and none was given; "
            "pass it as hs.Session(config, spark=spark), or choose raydp or local"
        )
    raydp_installed = importlib.util.find_spec("raydp") is not None
    if name is None:
        fits = pyspark is not None and _major_minor(pyspark) <= _RAYDP_PYSPARK
        name = "raydp" if fits and raydp_installed else "local"
    if name == "raydp":
        if pyspark is not None and _major_minor(pyspark) > _RAYDP_PYSPARK:
            raise ConfigError(
                f"spark.backend: raydp needs pyspark 3.5 (RayDP 1.6.5 pins pyspark<=3.5.7), but "
                f"pyspark {pyspark} is installed; use spark.backend: local on pyspark {pyspark}, "
                "or install pyspark 3.5 with pip install 'hybrid-shuffle[raydp]'"
            )
        if not raydp_installed:
            raise ConfigError(
                "spark.backend: raydp needs RayDP, which is not installed; pip install "
                "'hybrid-shuffle[raydp]', or use spark.backend: local"
            )
    return SparkBackend(name, pyspark)


def require_pyspark(backend: SparkBackend) -> None:
    """One sentence naming the extras to install, when pyspark is not installed (checked
    before anything says Spark is starting)."""
    if backend.pyspark is None:
        raise ConfigError(
            "spark: this needs pyspark, which is not installed; pip install "
            "'hybrid-shuffle[spark4]' (Spark 4, local mode) or 'hybrid-shuffle[raydp]' "
            "(Spark 3.5 on Ray)"
        )


def describe_backend(backend: SparkBackend, config: SparkConfig) -> str:
    """What is starting, for the line printed while it starts: ``Spark (RayDP, 2 cores)``
    or ``Spark (local mode, 2 cores)``, the cores being every executor's together."""
    where = "RayDP" if backend.uses_raydp else "local mode"
    cores = config.executors * config.executor_cores
    return f"Spark ({where}, {cores} {plural(cores, 'core')})"


def start_spark(
    backend: SparkBackend,
    config: SparkConfig,
    app_name: str,
    log_level: str | None,
    configs: dict[str, str] | None = None,
) -> Any:
    """Start the Spark session ``backend`` names (``raydp`` or ``local``); on RayDP with
    ``configs``, the settings ``launch_driver_jvm`` launched the driver's JVM with."""
    require_pyspark(backend)
    # pyspark reads the Python of its workers from this variable, not from the conf
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if backend.uses_raydp:
        import raydp

        if configs is None:
            configs = driver_configs("raydp", config, log_level)
        launching = _driver_jvm_thread(config, configs)
        try:
            return raydp.init_spark(
                app_name,
                num_executors=config.executors,
                executor_cores=config.executor_cores,
                executor_memory=config.executor_memory,
                configs=configs,
                # the driver's JVM joins Ray only for RayDP's from_spark_recoverable, which
                # the engine does not use (it reads through its holder): a second or more
                # saved, and a Ray client address (ray://) works
                fault_tolerant_mode=False,
            )
        finally:
            if launching is not None:
                launching.join()
    from pyspark.sql import SparkSession

    if SparkSession.getActiveSession() is not None:
        raise ConfigError(
            "spark.backend: local cannot start a second Spark in a process that already has "
            "one; pass yours as hs.Session(config, spark=spark) (spark.backend: attach)"
        )
    builder = SparkSession.builder.master(f"local[{config.executors * config.executor_cores}]")
    builder = builder.appName(app_name)
    for key, value in driver_configs("local", config, log_level).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def driver_configs(backend: str, config: SparkConfig, log_level: str | None) -> dict[str, str]:
    """The settings Spark starts with on ``backend`` (``raydp`` or ``local``): the
    options module's, with the driver JVM's class-data archive (``class_archive``)
    unless ``spark.jvm_archive`` is off."""
    if backend == "raydp":
        configs = spark_configs(config, log_level)
    else:
        configs = local_spark_configs(config, log_level)
    if config.jvm_archive:
        _append(
            configs,
            "spark.driver.extraJavaOptions",
            archive_options(backend, configs, agent=backend == "raydp"),
        )
        if backend == "raydp":  # Ray's Java workers: the executors, the app master's actor
            executors, app_master = worker_options(configs)
            _append(configs, "spark.executor.extraJavaOptions", executors)
            _append(configs, "spark.ray.raydp_app_master.extraJavaOptions", app_master)
    return configs


def _append(configs: dict[str, str], key: str, options: str) -> None:
    configs[key] = f"{configs.get(key, '')} {options}".strip()


def launch_driver_jvm(config: SparkConfig, log_level: str | None = None) -> dict[str, str]:
    """Launch the RayDP driver's JVM now (``_driver_jvm_thread``), and wait for it: a
    background start does it while Ray starts, as it needs no Ray.  Returns the settings
    it launched with, for ``start_spark``: made once, the archives' options name one
    driver archive and register one executor recording (``class_archive``)."""
    configs = driver_configs("raydp", config, log_level)
    thread = _driver_jvm_thread(config, configs)
    if thread is not None:
        thread.join()
    return configs


def _driver_jvm_thread(config: SparkConfig, configs: dict[str, str]) -> threading.Thread | None:
    """Launch the driver's JVM (PySpark's gateway, ``spark-submit``) in a thread, while
    RayDP starts its app master, instead of after it: the two JVMs start side by side
    (a few seconds saved).  The JVM gets the settings RayDP itself would launch it with
    (its ``_prepare_spark_configs``: RayDP's class path and Java agent); RayDP's
    ``getOrCreate`` then finds the gateway up (PySpark's lock makes it wait for the
    launch) and creates the SparkContext in it, with the app master's URL.  Nothing is
    launched when the process already has a gateway (an earlier Spark of the process:
    PySpark reuses its JVM) or RayDP's internals are not what this expects (RayDP
    launches it, as before)."""
    from pyspark import SparkConf, SparkContext

    if SparkContext._gateway is not None:
        return None
    try:
        from raydp.spark.ray_cluster import SparkCluster

        bare: Any = SparkCluster.__new__(SparkCluster)
        bare._configs = dict(configs)
        bare._num_executors = config.executors
        bare._executor_cores = config.executor_cores
        bare._executor_memory = config.executor_memory
        bare._prepare_spark_configs()
        conf = SparkConf(loadDefaults=False).setAll(list(bare._configs.items()))
    except Exception as e:  # RayDP changed: let it launch the JVM itself
        log.debug("driver JVM not launched ahead (%s: %s)", type(e).__name__, e)
        return None

    def launch() -> None:
        try:
            SparkContext._ensure_initialized(conf=conf)
        except Exception as e:  # RayDP's own launch says it again, in the caller's thread
            log.debug("driver JVM launch ahead failed (%s: %s)", type(e).__name__, e)

    thread = threading.Thread(target=launch, name="hybrid-shuffle-spark-driver", daemon=True)
    thread.start()
    return thread


def stop_spark(
    backend: SparkBackend, spark: Any, config: SparkConfig, log_level: str | None = None
) -> None:
    """Stop a Spark the session started (never the one passed to it).

    In local mode, when the session's Spark was the first of the process, PySpark
    launched the driver's JVM with the session's settings as ``--conf``, and
    spark-submit made them JVM system properties, which every later ``SparkConf``
    of the process loads: a Spark the user builds after the session closed would
    inherit them (``arrow.maxRecordsPerBatch`` of a million, the engine's heap and
    shuffle partitions).  So the ones still holding the session's values are cleared.
    """
    if backend.name == "attach":
        return
    if backend.uses_raydp:
        import raydp

        if config.jvm_archive:
            dump_workers()  # the first executor's archive, if it was started to record one
        raydp.stop_spark()
        return
    jvm = spark.sparkContext._jvm
    spark.stop()
    for key, value in local_spark_configs(config, log_level).items():
        if jvm.System.getProperty(key) == value:
            jvm.System.clearProperty(key)
