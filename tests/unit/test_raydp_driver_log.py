"""RayDP's Java agent logs under ``/tmp/ray/session_latest/logs`` in the driver's JVM,
and a dangling link there (its session directory deleted) stopped the JVM before
PySpark's gateway came up.  The driver then gets a log directory of the engine's, a
warning names the link to remove, and Ray's link is left as it is.  Pure logic: a
link in a temporary directory stands for Ray's."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from hybrid_shuffle.spark.options import driver_log_option


def test_a_dangling_session_link_gives_the_driver_its_own_log_directory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    link = tmp_path / "session_latest"
    os.symlink(tmp_path / "session_deleted", link)
    with caplog.at_level(logging.WARNING, logger="hybrid_shuffle.spark.options"):
        option = driver_log_option(str(link))
    assert option.startswith("-Dray.logging.dir=")
    logs = Path(option.removeprefix("-Dray.logging.dir="))
    assert logs.is_dir()
    assert f"rm {link}" in caplog.text
    assert link.is_symlink()  # Ray's file, not the engine's to remove


def test_a_working_or_missing_session_link_keeps_the_agents_default(tmp_path: Path) -> None:
    session = tmp_path / "session_now"
    session.mkdir()
    link = tmp_path / "session_latest"
    assert driver_log_option(str(link)) == ""  # no Ray has run here yet
    os.symlink(session, link)
    assert driver_log_option(str(link)) == ""
