"""Class-data archives of Spark's JVMs (Java's CDS), kept between runs.

A Spark driver loads and verifies some 12,000 classes from jars as it starts and plans
its first query: seconds of CPU on a laptop, paid again by every process that starts
Spark (the main job, ``hybrid-shuffle sql``, a test module).  Java 13+ can write the
classes a JVM loaded into an archive as it exits (``-XX:ArchiveClassesAtExit``) and map
that archive into later JVMs (``-XX:SharedArchiveFile``), which then skip the parsing
and verification: measured on 2 cores, a local-mode Spark's start and first query went
from 11.0 s to 5.6 s, and a warm ``./dev main`` from 32.6 s to 25.4 s (BENCHMARKS.md,
issue 37).

The contract:

* One archive per JVM setup: the ``java`` binary, pyspark's (and on RayDP, RayDP's)
  installation and the driver's class path make the key (``archive_key``); another
  setup never maps it.  The JVM checks it again itself (its class path, its JDK build)
  and runs without it, in silence, if anything differs.
* The first driver of a setup writes the archive as its JVM exits, under a name of its
  own (``<key>.<random>.pending``): drivers that start side by side never write one
  file.  A later start adopts a pending file (renamed to ``<key>.jsa``, atomically)
  once nothing has written it for ``SETTLED_SECONDS`` and it is whole: its header is
  Java 17's and its file holds every region the header lists (``is_whole``).  This
  matters: Java maps an archive it is given without checking its length, and a JVM
  given a truncated one (a writer killed mid-write) dies of SIGBUS as it starts.
  So the archive is used on Java 17 only, whose header layout is checked here; other
  JDKs start without one, as before.
* Ray's Java workers that RayDP starts (its executors, and its app master's actor:
  one class path, so one archive) are stopped by Ray killing them, so their JVMs never
  reach the exit that writes an archive.  Instead the first executor of a setup runs
  with ``-XX:+RecordDynamicDumpInfo``, and when Spark stops (``dump_workers``) the
  engine asks it for its archive (``jcmd <pid> VM.cds dynamic_dump``), which is whole
  when ``jcmd`` returns; later executors and app masters map it.  An executor on
  another node (``address=``) is not this machine's to ask: it gets none.
* ``spark.jvm_archive: false`` turns them off; a user's own ``-XX:SharedArchiveFile``,
  ``-XX:ArchiveClassesAtExit`` or ``-Xshare`` in ``spark.driver.extraJavaOptions`` (or
  ``spark.executor.extraJavaOptions``, for the workers) wins.

The archives live in ``$XDG_CACHE_HOME/hybrid-shuffle/jvm`` (``~/.cache`` without it),
about 130 MB a driver's and 50 MB the workers'; one that no start used for a week is
deleted (``UNUSED_SECONDS``), and deleting the folder is always safe.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
import shutil
import struct
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "SETTLED_SECONDS",
    "archive_dir",
    "archive_key",
    "archive_options",
    "dump_workers",
    "is_whole",
    "worker_options",
]

log = logging.getLogger(__name__)

#: a pending archive is adopted only once nothing has written it for this long (and it
#: is whole): the JVM writes it in a few seconds after its process's Python exited
SETTLED_SECONDS = 3.0

#: a pending archive that is not whole this long after its last write was left by a JVM
#: that died while writing it: it is deleted
ABANDONED_SECONDS = 3600.0

#: an archive no start has used for this long belongs to a setup that is gone (another
#: clone's virtualenv, an older pyspark): it is deleted, so that the folder holds what
#: is in use, not every installation the machine ever had
UNUSED_SECONDS = 7 * 24 * 3600.0

#: Java 17's dynamic archive: the header's magic and version, and its regions (rw, ro,
#: bitmap, four heap regions), 72 bytes each from byte 16, a region's file offset and
#: length at bytes 24 and 40 of it (CDSFileMapRegion in HotSpot's filemap.hpp)
_MAGIC, _VERSION, _REGIONS, _REGION_BYTES = 0xF00BABA8, 11, 7, 72

#: Java options (the driver's, or the executors') that mean the user manages class-data
#: sharing themselves
_USERS_OWN = ("-XX:SharedArchiveFile", "-XX:ArchiveClassesAtExit", "-Xshare")

#: the JVM's own messages about archives (one that does not fit its class path) stay off
#: the terminal: without an archive the JVM simply starts as it would have
_QUIET = "-Xlog:cds*=off"

#: RayDP's driver runs a Java agent (it only binds Spark's logging at start and rewrites
#: no class), and a JVM with an agent writes an archive only when told it may; a JVM
#: maps such an archive only when told the same, and then warns on every start, which
#: only -PrintWarnings silences
_WITH_AGENT_DUMP = "-XX:+UnlockDiagnosticVMOptions -XX:+AllowArchivingWithJavaAgent"
_WITH_AGENT_USE = f"{_WITH_AGENT_DUMP} -XX:-PrintWarnings"


def archive_dir() -> Path:
    """Where the archives are kept: ``$XDG_CACHE_HOME/hybrid-shuffle/jvm``."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(cache) / "hybrid-shuffle" / "jvm"


def _java() -> str:
    """The ``java`` PySpark launches: ``$JAVA_HOME/bin/java``, else the one on the PATH."""
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(found) if found else "java"


def _installed(module: str) -> str:
    """Where ``module`` is installed and its version: another installation's jars make
    another class path."""
    imported = __import__(module)
    return f"{module} {getattr(imported, '__version__', '?')} {imported.__file__}"


def archive_key(backend: str, configs: Mapping[str, str]) -> str:
    """The setup a driver's (``backend``: ``local`` or ``raydp``) or Ray's Java workers'
    (``raydp-workers``) archive belongs to, a short hex digest of what decides the
    classes a JVM loads: the JDK (path, size and time of ``java``), pyspark's, RayDP's
    and Ray's installations, and the class path and jars the settings add."""
    java = _java()
    try:
        stat = os.stat(java)
        java_id = f"{java} {stat.st_size} {stat.st_mtime_ns}"
    except OSError:
        java_id = java
    parts = [backend, java_id, _installed("pyspark")]
    if backend.startswith("raydp"):
        parts += [_installed("raydp"), _installed("ray")]
    for key in ("spark.driver.extraClassPath", "spark.jars", "spark.jars.packages"):
        parts.append(f"{key}={configs.get(key, '')}")
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()[:16]


def is_whole(path: Path) -> bool:
    """Whether ``path`` is a whole Java 17 dynamic archive: the header's magic and version,
    and a file at least as long as the furthest region the header lists."""
    with open(path, "rb") as file:
        header = file.read(16 + _REGIONS * _REGION_BYTES)
        length = os.fstat(file.fileno()).st_size
    if len(header) < 16 + _REGIONS * _REGION_BYTES:
        return False
    magic, _crc, version = struct.unpack_from("<IiI", header, 0)
    if (magic, version) != (_MAGIC, _VERSION):
        return False
    ends = []
    for region in range(_REGIONS):
        offset, _mapping, used = struct.unpack_from(
            "<QQQ", header, 16 + region * _REGION_BYTES + 24
        )
        ends.append(offset + used if used else 0)
    return 0 < max(ends) <= length


def _adopt(directory: Path, key: str) -> Path | None:
    """The archive of ``key``, adopting a settled, whole pending one if none is in place
    yet (and deleting pending ones abandoned half-written)."""
    final = directory / f"{key}.jsa"
    if final.exists():
        return final
    now = time.time()
    for pending in sorted(directory.glob(f"{key}.*.pending")):
        try:
            age = now - pending.stat().st_mtime
            if age > SETTLED_SECONDS and is_whole(pending):
                os.replace(pending, final)  # another start may adopt its own: same classes
                return final
            if age > ABANDONED_SECONDS:
                pending.unlink()
        except OSError:  # another start adopted or deleted it first
            continue
    return final if final.exists() else None


def _prune(directory: Path, key: str) -> None:
    """Delete the other setups' archives (and pending files) unused for ``UNUSED_SECONDS``."""
    cutoff = time.time() - UNUSED_SECONDS
    for path in directory.iterdir():
        try:
            if not path.name.startswith(f"{key}.") and path.stat().st_mtime < cutoff:
                path.unlink()
        except OSError:  # another start deleted it first
            continue


def _used(archive: Path) -> Path:
    """``archive``, marked as used now (its time is what ``_prune`` reads)."""
    with contextlib.suppress(OSError):
        os.utime(archive)
    return archive


def _java_17(java: str) -> bool:
    """Whether ``java`` is a Java 17 (its home's ``release`` file says so)."""
    release = Path(java).parent.parent / "release"
    try:
        text = release.read_text()
    except OSError:
        return False
    return 'JAVA_VERSION="17.' in text


def _place(configs: Mapping[str, str], options_key: str, setup: str) -> tuple[Path, str] | None:
    """The folder and key of ``setup``'s archive, or None where the engine keeps none:
    the user set class-data sharing in ``options_key`` themselves, the JDK is not Java
    17, or the folder cannot be made.  Other setups' stale archives go on the way."""
    own = configs.get(options_key, "")
    if any(flag in own for flag in _USERS_OWN) or not _java_17(_java()):
        return None
    directory = archive_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        key = archive_key(setup, configs)
        _prune(directory, key)
        return directory, key
    except OSError as e:
        log.debug("no JVM archive for %s (%s: %s)", setup, type(e).__name__, e)
        return None


def archive_options(backend: str, configs: Mapping[str, str], agent: bool) -> str:
    """The driver's Java options for its archive: map it if the setup has one, else
    write one at exit; empty where the engine keeps none (``_place``)."""
    place = _place(configs, "spark.driver.extraJavaOptions", backend)
    if place is None:
        return ""
    directory, key = place
    try:
        archive = _adopt(directory, key)
    except OSError as e:
        log.debug("no JVM archive (%s: %s)", type(e).__name__, e)
        return ""
    if archive is not None:
        mapped = f"-XX:SharedArchiveFile={_used(archive)}"
        return " ".join([mapped, _QUIET] + [_WITH_AGENT_USE] * agent)
    pending = directory / f"{key}.{secrets.token_hex(4)}.pending"
    return " ".join([_QUIET] + [_WITH_AGENT_DUMP] * agent + [f"-XX:ArchiveClassesAtExit={pending}"])


#: the Java option that marks a Ray Java worker whose archive this process will ask for
_MARKER = "-Dhybrid_shuffle.jvm_archive="
#: Ray's Java workers' main class: what a marked process must be running
_RAY_JAVA_WORKER = "io.ray.runtime.runner.worker.DefaultWorker"
#: the archives this process's executors were started to record: marker -> pending file
_recording: dict[str, Path] = {}


def worker_options(configs: Mapping[str, str]) -> tuple[str, str]:
    """The Java options of Ray's Java workers that RayDP starts with these settings, the
    executors' and the app master's: both map the workers' archive if the setup has
    one; else the executors record what ``dump_workers`` needs to write one, and the
    app master gets none.  Empty where the engine keeps none (``_place``, the user's own
    options being ``spark.executor.extraJavaOptions``)."""
    place = _place(configs, "spark.executor.extraJavaOptions", "raydp-workers")
    if place is None:
        return "", ""
    directory, key = place
    final = directory / f"{key}.jsa"
    if final.exists():
        mapped = f"-XX:SharedArchiveFile={_used(final)} {_QUIET} {_WITH_AGENT_USE}"
        return mapped, mapped
    token = secrets.token_hex(4)
    _recording[token] = directory / f"{key}.{token}.pending"
    return f"{_WITH_AGENT_DUMP} -XX:+RecordDynamicDumpInfo {_MARKER}{token}", ""


def dump_workers(timeout: float = 60.0) -> None:
    """Before Spark stops: write the archive of one executor this process started to
    record, if it runs on this machine (``jcmd``, bounded by ``timeout``), and put it in
    place once whole.  Never raises: without an archive the next start is as before."""
    if not _recording:
        return
    import psutil

    recording = dict(_recording)
    _recording.clear()
    jcmd = Path(_java()).with_name("jcmd")
    if not jcmd.exists():
        return
    for process in psutil.process_iter(["pid", "cmdline"]):
        command = process.info["cmdline"] or []
        tokens = [a[len(_MARKER) :] for a in command if a.startswith(_MARKER)]
        pending = recording.get(tokens[0]) if tokens else None
        if pending is None or _RAY_JAVA_WORKER not in command:
            continue
        try:
            subprocess.run(
                [str(jcmd), str(process.info["pid"]), "VM.cds", "dynamic_dump", str(pending)],
                capture_output=True, timeout=timeout, check=False,
            )  # fmt: skip
            if is_whole(pending):
                os.replace(pending, pending.with_name(pending.name.split(".")[0] + ".jsa"))
                return
            pending.unlink(missing_ok=True)
        except (OSError, subprocess.SubprocessError) as e:
            pid = process.info["pid"]
            log.debug("no archive from executor %s (%s: %s)", pid, type(e).__name__, e)
            pending.unlink(missing_ok=True)
