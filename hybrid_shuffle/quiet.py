"""Quiet by default: Ray's, RayDP's and Spark's start-up chatter off, the engine's own logs on.

A plain run used to print about twenty lines before its result, none of them
about the user's job: Ray's token-authentication notice (security is in
docs/guide/cluster.md, section 6), its C++ "GcsClient has
no Cluster ID set" lines (from RayDP's app master, Spark's executors and
Spark's driver JVM), a ``ray.worker.global_worker`` deprecation notice that RayDP
triggers (in the driver and in its master actor), and Spark's log4j start-up
lines ("Your hostname resolves to a loopback address", "Setting default log
level", the native-hadoop notice).  Each is turned off here at its source, and
only that message or that logger: Ray's and Spark's other warnings and every
error still show, and so do the engine's own warnings.

The switch is ``Config.log_level`` (the YAML's top-level ``log_level:``; the
command line's ``--debug`` sets it to ``debug`` and ``-v`` to ``info``):

- unset (the default): the noise is off; the engine's ``hybrid_shuffle``
  loggers are left as the application configured them (Python's default shows
  warnings and errors);
- ``error``, ``warning``, ``info``: the noise is off, and the engine's loggers
  log at that level (to stderr, if nothing in the process handles them);
  ``error`` also turns off the engine's own progress lines (``announce``: Spark
  starting, and when it is up), the one level that asks for nothing but failures;
- ``debug``: the engine's loggers at DEBUG, and Ray, RayDP and Spark print
  everything they would by default.

What is done where, and why there:

- ``ray_init_options`` (given to ``ray.init``, so only when this process starts
  or joins Ray): ``log_to_driver`` off, so what Ray's workers write to their
  stdout and stderr stays in Ray's log files (``/tmp/ray/session_latest/logs``)
  instead of being copied to the driver's terminal.  That is where the C++
  "GcsClient" lines of RayDP's app master and Spark's executors come from (they
  are printed before Ray's C++ logging reads ``RAY_BACKEND_LOG_LEVEL``, so no
  level reaches them); it also holds ``print`` calls in user functions, which
  ``debug`` brings back to the terminal.  The engine's executors log nothing
  at WARNING or above, and their errors reach the driver in task reports, not
  through their output.  The options also carry a worker set-up hook
  (``quiet_worker``) that drops the deprecation notice in every worker's log.
- ``quiet_ray_init``: the token-authentication logger at ERROR for the duration
  of the ``ray.init`` call.
- ``quiet_driver``: the same deprecation filter on the driver's ``ray`` logger.
- ``spark_log_configs``: Spark's driver's log4j2 configuration pointed at
  ``log4j2-quiet.properties`` (shipped in this package; WARN for everything,
  ERROR for the two loggers that only announce start-up facts).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "LOG4J2_QUIET",
    "LOG_LEVELS",
    "announce",
    "announces",
    "configure_engine_logging",
    "is_quiet",
    "quiet_driver",
    "quiet_ray_init",
    "quiet_worker",
    "ray_init_options",
    "spark_log_configs",
]

#: the values ``log_level`` may take (Python's level names, lower case)
LOG_LEVELS = ("error", "warning", "info", "debug")
#: the log4j2 configuration of a quiet Spark driver and RayDP app master
LOG4J2_QUIET = Path(__file__).resolve().parent / "log4j2-quiet.properties"

_TOKEN_LOGGER = "ray._private.authentication.authentication_token_setup"
_ENGINE_LOGGER = "hybrid_shuffle"


def is_quiet(log_level: str | None) -> bool:
    """Whether third-party start-up noise is silenced at ``log_level`` (all but ``debug``)."""
    return log_level != "debug"


def announces(log_level: str | None) -> bool:
    """Whether the engine prints its progress lines at ``log_level``: at every level but
    ``error`` (unset included), since a 20-second start with nothing on the terminal
    looks like a hang."""
    return log_level != "error"


def announce(log_level: str | None, message: str) -> None:
    """Print one progress line of the engine's to stderr (not a log record: at the default
    level the engine's loggers show only warnings), unless ``announces`` says no."""
    if announces(log_level):
        print(message, file=sys.stderr, flush=True)


class _DropPrivateAttributeNotice(logging.Filter):
    """Drops Ray's "`ray.worker.global_worker` is a private attribute" notice, which
    RayDP triggers and no user can act on; every other record of the logger passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (message.startswith("DeprecationWarning: `ray.") and "private" in message)


def _add_filter(logger: logging.Logger) -> None:
    if not any(isinstance(f, _DropPrivateAttributeNotice) for f in logger.filters):
        logger.addFilter(_DropPrivateAttributeNotice())


def quiet_driver() -> None:
    """Drop the deprecation notice on this process's ``ray`` logger (idempotent)."""
    _add_filter(logging.getLogger("ray"))


def quiet_worker() -> None:
    """Ray's ``worker_process_setup_hook`` of a quiet job: the driver's filter, in a worker."""
    quiet_driver()


def ray_init_options(log_level: str | None) -> dict[str, Any]:
    """The ``ray.init`` keyword arguments that set Ray's chattiness for ``log_level``
    (see the module docstring); when quiet, also filters the driver's ``ray`` logger."""
    if not is_quiet(log_level):
        return {"logging_level": logging.INFO, "log_to_driver": True}
    quiet_driver()
    hook = f"{__name__}.{quiet_worker.__name__}"
    return {
        "logging_level": logging.WARNING,
        "log_to_driver": False,
        "runtime_env": {"worker_process_setup_hook": hook},
    }


@contextlib.contextmanager
def quiet_ray_init(log_level: str | None) -> Iterator[None]:
    """Around ``ray.init``: the token-authentication notice off when quiet.

    Ray announces that it turned token authentication on for a new local
    cluster (a secure default, nothing to act on); its logger goes back to its
    level afterwards, so a real authentication failure later still shows.  How to
    run a cluster of one's own with a token, and what the engine keeps private, is
    in docs/guide/cluster.md, section 6 ("Security"): the engine's INFO log says
    so where it hid the notice.
    """
    if not is_quiet(log_level):
        yield
        return
    logger = logging.getLogger(_TOKEN_LOGGER)
    before = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(before)
    logging.getLogger(__name__).info(
        "Ray's notices on token authentication were hidden (log_level: debug shows them); "
        "docs/guide/cluster.md, section 6, says how to run a cluster with a token"
    )


def spark_log_configs(log_level: str | None) -> dict[str, str]:
    """The RayDP setting that points Spark's driver at the quiet log4j2 file (none at
    ``debug``: Spark's own defaults).  RayDP's app master keeps Ray's log4j2 set-up,
    which writes to Ray's log files: with ``log_to_driver`` off nothing of it reaches
    the terminal."""
    if not is_quiet(log_level):
        return {}
    return {"spark.log4j.config.file.name": str(LOG4J2_QUIET)}


def configure_engine_logging(log_level: str | None) -> None:
    """Set the engine's ``hybrid_shuffle`` loggers to ``log_level`` (unset: leave them).

    A stderr handler is added only when nothing in the process would show the
    records (no handler but the package's ``NullHandler`` on the engine's logger,
    none on the root logger), so an application's own logging set-up is never
    doubled.
    """
    if log_level is None:
        return
    logger = logging.getLogger(_ENGINE_LOGGER)
    logger.setLevel(log_level.upper())
    shown = [h for h in logger.handlers if not isinstance(h, logging.NullHandler)]
    if not shown and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
