"""The command line's mistakes, in-process through ``cli.main``: one sentence on stderr,
exit 2 for a bad command line or config (before any pipeline code or Ray runs), and
``--debug`` declared once, before the command."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from hybrid_shuffle.cli import main

ROOT = Path(__file__).resolve().parents[2]
MAIN_YAML = str(ROOT / "configs" / "main.yaml")


def stderr_of(capsys: pytest.CaptureFixture[str]) -> str:
    return capsys.readouterr().err.strip()


def option_lines(text: str, option: str) -> list[str]:
    """The help lines that describe ``option`` (not the usage line)."""
    return [line for line in text.splitlines() if re.match(rf"\s+{option}\b", line)]


def test_debug_is_declared_once_at_the_top_level(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert len(option_lines(capsys.readouterr().out, "--debug")) == 1
    for command in (["run", "--help"], ["explain", "--help"], ["validate", "--help"]):
        assert main(command) == 0
        assert "--debug" not in capsys.readouterr().out, command


def test_debug_after_the_command_says_where_it_goes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", MAIN_YAML, "--debug"]) == 2
    assert stderr_of(capsys).endswith(
        "error: --debug goes before the command: hybrid-shuffle --debug validate ..."
    )


def test_verbose_after_the_command_says_where_it_goes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["validate", MAIN_YAML, "-v"]) == 2
    assert stderr_of(capsys).endswith(
        "error: -v goes before the command: hybrid-shuffle -v validate ..."
    )


def test_unknown_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", MAIN_YAML, "--loud"]) == 2
    assert stderr_of(capsys).endswith("error: unrecognized arguments: --loud")


def test_a_valid_config_validates(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", MAIN_YAML]) == 0
    assert capsys.readouterr().out.startswith(f"{MAIN_YAML}: valid (job tpch-revenue")


def test_bad_config_exits_2_in_one_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("shuffle:\n  credits: 0\n")
    assert main(["validate", str(bad)]) == 2
    assert stderr_of(capsys) == (
        "hybrid-shuffle: shuffle.credits: must be an integer from 1 to 1024, got 0"
    )


def test_binary_config_exits_2_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    binary = tmp_path / "config.yaml"
    binary.write_bytes(bytes(range(256)))
    message = (
        f"hybrid-shuffle: config file '{binary}' is not UTF-8 text (byte 0x80 at offset 128); "
        "give a UTF-8 YAML file"
    )
    assert main(["validate", str(binary)]) == 2
    assert stderr_of(capsys) == message
    for command in ("run", "explain"):
        assert main([command, "pipeline.py", "--config", str(binary)]) == 2
        assert stderr_of(capsys) == message


def test_bad_config_is_reported_before_the_pipeline_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "imported"
    pipeline = tmp_path / "pipeline.py"
    pipeline.write_text(f"open({str(marker)!r}, 'w').close()\n\ndef build(session): ...\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("parallelism: 0\n")
    assert main(["run", str(pipeline), "--config", str(bad)]) == 2
    assert stderr_of(capsys) == "hybrid-shuffle: parallelism: must be a positive integer, got 0"
    assert not marker.exists()


def test_spill_dir_that_is_a_file_fails_validation_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "spill"
    file.write_text("")
    config = tmp_path / "c.yaml"
    config.write_text(f"shuffle:\n  spill_dir: {file}\n")
    assert main(["validate", str(config)]) == 2
    assert stderr_of(capsys) == (
        f"hybrid-shuffle: shuffle.spill_dir: '{file}' is a file, not a directory; set it to a "
        "directory only you can write"
    )


def test_validate_creates_no_spill_dir(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(f"shuffle:\n  spill_dir: {tmp_path / 'later'}\n")
    assert main(["validate", str(config)]) == 0
    assert not (tmp_path / "later").exists()


def test_debug_shows_the_traceback_of_a_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("slots: -1\n")
    assert main(["--debug", "validate", str(bad)]) == 2
    err = stderr_of(capsys)
    assert "Traceback" in err
    assert err.endswith("hybrid-shuffle: slots: must be a positive integer, got -1")


def test_missing_pipeline_file_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "nope.py", "--config", MAIN_YAML]) == 2
    assert stderr_of(capsys) == (
        "hybrid-shuffle: pipeline file 'nope.py' does not exist; check the path"
    )


def test_an_unreachable_address_fails_in_seconds_naming_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pipeline = str(ROOT / "examples" / "pipeline_revenue.py")
    config = str(ROOT / "configs" / "pipeline_revenue.yaml")  # its job's edges: planned first
    started = time.monotonic()
    assert main(["run", pipeline, "--config", config, "--address", "127.0.0.1:1"]) != 0
    assert time.monotonic() - started < 30
    message = stderr_of(capsys)
    assert message.startswith("hybrid-shuffle: address: cannot reach a Ray cluster at 127.0.0.1:1")
    assert len(message.splitlines()) == 1


def test_a_bad_run_timeout_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    pipeline = str(ROOT / "examples" / "pipeline_revenue.py")
    assert main(["run", pipeline, "--config", MAIN_YAML, "--timeout", "soon"]) == 2
    assert "--timeout: must be a positive number of seconds, got 'soon'" in stderr_of(capsys)
