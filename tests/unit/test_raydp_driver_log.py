"""RayDP's Java agent logs under ``/tmp/ray/session_latest/logs`` in the driver's JVM,
and a dangling link there (its session directory deleted) stopped the JVM before
PySpark's gateway came up.  The driver then gets a log directory of the engine's, a
warning names the link to remove, and Ray's link is left as it is.  Pure logic: a
link in a temporary directory stands for Ray's."""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import pytest

from hybrid_shuffle.spark.options import driver_log_option
from hybrid_shuffle.spill_dirs import default_spill_dir


def test_a_dangling_session_link_gives_the_driver_its_own_log_directory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    link = tmp_path / "session_latest"
    os.symlink(tmp_path / "session_deleted", link)
    with caplog.at_level(logging.WARNING, logger="hybrid_shuffle.spark.options"):
        option = driver_log_option(str(link))
    assert option.startswith("-Dray.logging.dir=")
    logs = Path(option.removeprefix("-Dray.logging.dir="))
    assert logs.is_dir() and logs.is_relative_to(tmp_path / "tmp")
    assert f"rm {link}" in caplog.text
    assert link.is_symlink()  # Ray's file, not the engine's to remove


def test_a_working_or_missing_session_link_keeps_the_agents_default(tmp_path: Path) -> None:
    session = tmp_path / "session_now"
    session.mkdir()
    link = tmp_path / "session_latest"
    assert driver_log_option(str(link)) == ""  # no Ray has run here yet
    os.symlink(session, link)
    assert driver_log_option(str(link)) == ""


def test_a_log_directory_it_cannot_make_falls_back_to_one_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    Path(default_spill_dir()).write_text("not a directory")  # the engine's directory taken
    link = tmp_path / "session_latest"
    os.symlink(tmp_path / "session_deleted", link)
    logs = Path(driver_log_option(str(link)).removeprefix("-Dray.logging.dir="))
    assert logs.is_dir() and logs.name.startswith("hybrid-shuffle-raydp-driver-logs-")
