"""``log_level`` and the quiet defaults (``hybrid_shuffle.quiet``), without Ray."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from hybrid_shuffle.config import Config, load_config
from hybrid_shuffle.errors import ConfigError
from hybrid_shuffle.quiet import (
    LOG4J2_QUIET,
    configure_engine_logging,
    quiet_driver,
    quiet_ray_init,
    ray_init_options,
)
from hybrid_shuffle.spark import spark_configs


def test_log_level_is_unset_by_default_and_validated_at_load() -> None:
    assert load_config(None).log_level is None
    assert load_config({"log_level": "DEBUG"}).log_level == "debug"
    with pytest.raises(ConfigError, match=r"^log_level: 'loud' is not a log level; use one of"):
        load_config({"log_level": "loud"})
    with pytest.raises(ConfigError, match="log_level: 3 is not a log level"):
        load_config({"log_level": 3})


def test_log_level_survives_overrides_and_revalidation() -> None:
    config = Config().with_overrides(log_level="info")
    assert config.log_level == "info"
    assert load_config(config).log_level == "info"
    assert config.with_overrides(log_level=None).log_level is None


def test_quiet_ray_keeps_worker_output_in_its_logs_and_debug_brings_it_back() -> None:
    quiet = ray_init_options(None)
    assert quiet["log_to_driver"] is False
    assert quiet["logging_level"] == logging.WARNING
    assert quiet["runtime_env"] == {
        "worker_process_setup_hook": "hybrid_shuffle.quiet.quiet_worker"
    }
    assert ray_init_options("info")["log_to_driver"] is False
    debug = ray_init_options("debug")
    assert debug["log_to_driver"] is True
    assert "runtime_env" not in debug


def test_the_deprecation_notice_is_dropped_and_other_ray_warnings_pass() -> None:
    quiet_driver()
    quiet_driver()  # idempotent
    ray_logger = logging.getLogger("ray")
    assert len(ray_logger.filters) == 1

    def passes(message: str) -> bool:
        record = logging.LogRecord("ray", logging.WARNING, __file__, 1, message, None, None)
        return bool(ray_logger.filter(record))

    assert not passes(
        "DeprecationWarning: `ray.worker.global_worker` is a private attribute and access "
        "will be removed in a future Ray version."
    )
    assert passes("Object store is full; spilling objects to disk")


def test_spark_gets_the_quiet_log4j2_file_unless_debug_or_the_user_sets_one() -> None:
    assert Path(LOG4J2_QUIET).is_file()
    config = load_config(None).spark
    quiet = spark_configs(config)
    assert quiet["spark.log4j.config.file.name"] == str(LOG4J2_QUIET)
    assert "spark.log4j.config.file.name" not in spark_configs(config, "debug")
    own = load_config({"spark": {"configs": {"spark.log4j.config.file.name": "mine.xml"}}})
    assert spark_configs(own.spark)["spark.log4j.config.file.name"] == "mine.xml"


def test_the_quiet_log4j2_file_silences_only_start_up_notices() -> None:
    text = LOG4J2_QUIET.read_text()
    assert "rootLogger.level = warn" in text
    assert "org.apache.spark.util.Utils" in text  # the loopback-hostname warning


def test_engine_logging_is_left_alone_unless_a_level_is_set() -> None:
    logger = logging.getLogger("hybrid_shuffle")
    before_level, before_handlers = logger.level, list(logger.handlers)
    try:
        configure_engine_logging(None)
        assert logger.level == before_level
        configure_engine_logging("info")
        assert logger.level == logging.INFO
    finally:
        logger.setLevel(before_level)
        logger.handlers[:] = before_handlers


def test_the_hidden_token_notice_points_to_the_security_guide(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Quiet hides Ray's notice on token authentication while ``ray.init`` runs; the
    engine's INFO log then says where security is documented, and the guide has it."""
    token = logging.getLogger("ray._private.authentication.authentication_token_setup")
    with caplog.at_level(logging.INFO, logger="hybrid_shuffle"), quiet_ray_init(None):
        assert token.getEffectiveLevel() == logging.ERROR
        token.warning("Token authentication is enabled for this Ray cluster.")
    assert "Token authentication" not in caplog.text
    assert "docs/guide/cluster.md, section 6" in caplog.text
    guide = (Path(__file__).parents[2] / "docs" / "guide" / "cluster.md").read_text()
    assert "## 6. Security" in guide
    assert "RAY_AUTH_MODE=token" in guide
