"""The driver JVM's class-data archive: which options a start gets, and when a written
archive is adopted (pure file logic; tests/spark/test_backends.py runs a real JVM)."""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path

import pytest

from hybrid_shuffle.spark import class_archive
from hybrid_shuffle.spark.class_archive import (
    ABANDONED_SECONDS,
    SETTLED_SECONDS,
    archive_dir,
    archive_key,
    archive_options,
    is_whole,
)

pytest.importorskip("pyspark")


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache folder, and a Java 17 whatever the machine has."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(class_archive, "_java_17", lambda java: True)
    return tmp_path / "hybrid-shuffle" / "jvm"


def archive_bytes(regions: list[tuple[int, int]], length: int) -> bytes:
    """A Java 17 dynamic archive's header listing ``regions`` (file offset, length),
    padded to ``length`` bytes."""
    header = bytearray(16 + 7 * 72)
    struct.pack_into("<IiI", header, 0, 0xF00BABA8, 0, 11)
    for i, (offset, used) in enumerate(regions):
        struct.pack_into("<QQQ", header, 16 + i * 72 + 24, offset, 0, used)
    return bytes(header).ljust(length, b"\0")


WHOLE = archive_bytes([(4096, 1000), (5096, 2000), (7096, 100)], 7196)


def _age(path: Path, seconds: float) -> None:
    old = time.time() - seconds
    os.utime(path, (old, old))


def _flag(options: str, name: str) -> str | None:
    values = [o.split("=", 1)[1] for o in options.split() if o.startswith(f"-XX:{name}=")]
    return values[0] if values else None


def test_the_first_start_writes_an_archive_at_exit_under_a_name_of_its_own(cache: Path) -> None:
    first = archive_options("local", {}, agent=False)
    second = archive_options("local", {}, agent=False)
    assert archive_dir() == cache
    pending = [_flag(o, "ArchiveClassesAtExit") for o in (first, second)]
    assert all(p is not None and Path(p).parent == cache for p in pending)
    assert pending[0] != pending[1]  # two drivers started side by side never share a file
    assert _flag(first, "SharedArchiveFile") is None
    assert "-Xlog:cds*=off" in first.split()
    assert "AllowArchivingWithJavaAgent" not in first  # no agent in local mode


def test_a_settled_archive_is_adopted_and_mapped_by_later_starts(cache: Path) -> None:
    pending = Path(str(_flag(archive_options("local", {}, agent=False), "ArchiveClassesAtExit")))
    pending.write_bytes(WHOLE)
    _age(pending, SETTLED_SECONDS + 1)
    options = archive_options("local", {}, agent=False)
    final = cache / f"{archive_key('local', {})}.jsa"
    assert _flag(options, "SharedArchiveFile") == str(final)
    assert final.read_bytes() == WHOLE and not pending.exists()
    assert _flag(options, "ArchiveClassesAtExit") is None
    assert _flag(archive_options("local", {}, agent=False), "SharedArchiveFile") == str(final)


def test_an_archive_still_being_written_is_left_alone(cache: Path) -> None:
    pending = Path(str(_flag(archive_options("local", {}, agent=False), "ArchiveClassesAtExit")))
    pending.write_bytes(WHOLE)  # written just now: the JVM may still be writing it
    options = archive_options("local", {}, agent=False)
    assert _flag(options, "SharedArchiveFile") is None
    assert pending.exists() and _flag(options, "ArchiveClassesAtExit") != str(pending)


def test_a_truncated_archive_is_never_adopted_and_deleted_once_abandoned(cache: Path) -> None:
    """Java maps a truncated archive and dies of SIGBUS: one cut short (its writer
    killed) stays pending, and goes once it is clearly abandoned."""
    pending = Path(str(_flag(archive_options("local", {}, agent=False), "ArchiveClassesAtExit")))
    pending.write_bytes(WHOLE[:-1])
    _age(pending, SETTLED_SECONDS + 1)
    assert _flag(archive_options("local", {}, agent=False), "SharedArchiveFile") is None
    assert pending.exists()
    _age(pending, ABANDONED_SECONDS + 1)
    assert _flag(archive_options("local", {}, agent=False), "SharedArchiveFile") is None
    assert not pending.exists()


@pytest.mark.parametrize(
    ("content", "whole"),
    [
        (WHOLE, True),
        (WHOLE + b"tail", True),
        (WHOLE[:-1], False),  # the bitmap region cut short
        (WHOLE[:600], False),  # the header alone
        (b"\0" * len(WHOLE), False),  # the header not written yet
        (archive_bytes([(4096, 10)], 4106)[:8] + b"\x0c\0\0\0" + WHOLE[12:], False),  # v12
        (b"", False),
    ],
)
def test_only_a_whole_java_17_archive_counts_as_whole(
    content: bytes, whole: bool, tmp_path: Path
) -> None:
    path = tmp_path / "a.jsa"
    path.write_bytes(content)
    assert is_whole(path) is whole


def test_another_jdk_gets_no_archive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(class_archive, "_java_17", lambda java: False)
    assert archive_options("local", {}, agent=False) == ""


def test_another_class_path_or_backend_is_another_archive() -> None:
    plain = archive_key("local", {})
    assert archive_key("local", {"spark.driver.extraClassPath": "/opt/my.jar"}) != plain
    assert archive_key("local", {"spark.jars": "/opt/udf.jar"}) != plain
    assert archive_key("local", {}) == plain


def test_with_raydps_agent_the_archive_is_allowed_and_its_warning_silenced() -> None:
    pytest.importorskip("raydp")
    writing = archive_options("raydp", {}, agent=True).split()
    assert "-XX:+UnlockDiagnosticVMOptions" in writing
    assert "-XX:+AllowArchivingWithJavaAgent" in writing
    pending = Path(str(_flag(" ".join(writing), "ArchiveClassesAtExit")))
    pending.write_bytes(WHOLE)
    _age(pending, SETTLED_SECONDS + 1)
    # Java maps an archive written with the flag only when given it again
    mapping = archive_options("raydp", {}, agent=True).split()
    assert _flag(" ".join(mapping), "SharedArchiveFile") is not None
    assert "-XX:+UnlockDiagnosticVMOptions" in mapping
    assert "-XX:+AllowArchivingWithJavaAgent" in mapping
    assert "-XX:-PrintWarnings" in mapping  # the warning it prints on every start


@pytest.mark.parametrize(
    "own",
    ["-Xshare:off", "-XX:SharedArchiveFile=/mine.jsa", "-XX:ArchiveClassesAtExit=/mine.jsa"],
)
def test_a_users_own_class_data_sharing_wins(own: str, cache: Path) -> None:
    assert archive_options("local", {"spark.driver.extraJavaOptions": own}, agent=False) == ""


def test_an_unwritable_cache_means_no_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    assert archive_options("local", {}, agent=False) == ""


def test_the_driver_gets_the_archive_options_unless_the_config_turns_them_off() -> None:
    from hybrid_shuffle.config import SparkConfig
    from hybrid_shuffle.spark.backends import driver_configs

    key = "spark.driver.extraJavaOptions"
    on = driver_configs("local", SparkConfig(), None)[key]
    assert _flag(on, "ArchiveClassesAtExit") is not None and "--add-opens" in on
    off = driver_configs("local", SparkConfig(jvm_archive=False), None)[key]
    assert "Archive" not in off and "--add-opens" in off


def test_the_first_executor_records_its_classes_and_later_workers_map_its_archive(
    cache: Path,
) -> None:
    pytest.importorskip("raydp")
    executors, app_master = class_archive.worker_options({})
    assert app_master == ""  # nothing to map yet
    recording = executors.split()
    assert "-XX:+RecordDynamicDumpInfo" in recording
    assert "-XX:+AllowArchivingWithJavaAgent" in recording  # RayDP's agent runs in them
    assert any(o.startswith("-Dhybrid_shuffle.jvm_archive=") for o in recording)
    final = cache / f"{archive_key('raydp-workers', {})}.jsa"
    final.write_bytes(WHOLE)  # what dump_workers puts in place once jcmd wrote it whole
    for options in class_archive.worker_options({}):  # the executors', the app master's
        assert _flag(options, "SharedArchiveFile") == str(final)
        assert "-XX:+RecordDynamicDumpInfo" not in options.split()
    own = {"spark.executor.extraJavaOptions": "-Xshare:off"}
    assert class_archive.worker_options(own) == ("", "")


def test_asking_for_no_executor_archive_starts_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark stopping without an executor started to record (a second run, local
    mode, the archives off) runs no ``jcmd`` and lists no process."""
    monkeypatch.setattr(class_archive, "_recording", {})
    monkeypatch.setattr(class_archive.subprocess, "run", None)  # would fail if called
    class_archive.dump_workers()


def test_archives_no_start_used_for_a_week_are_deleted_and_used_ones_kept(cache: Path) -> None:
    """Each clone's virtualenv is another setup with archives of its own: those of
    setups no start used for ``UNUSED_SECONDS`` go, the one in use is marked used."""
    key = archive_key("local", {})
    cache.mkdir(parents=True)
    mine, stale, recent = cache / f"{key}.jsa", cache / "0ld.jsa", cache / "other.jsa"
    for path in (mine, stale, recent, cache / "0ld.1234.pending"):
        path.write_bytes(WHOLE)
    for path in (mine, stale, cache / "0ld.1234.pending"):
        _age(path, class_archive.UNUSED_SECONDS + 60)
    options = archive_options("local", {}, agent=False)
    assert _flag(options, "SharedArchiveFile") == str(mine)
    assert sorted(p.name for p in cache.iterdir()) == sorted([mine.name, recent.name])
    assert time.time() - mine.stat().st_mtime < 60  # used just now: kept another week
