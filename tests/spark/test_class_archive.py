"""Class-data archives of Spark's JVMs (``hybrid_shuffle.spark.class_archive``) on real
JVMs: the first driver writes its archive as its JVM exits and the next maps it; the
first RayDP executor is asked for its archive as Spark stops and the next maps it.

Local-mode drivers in processes of their own, and RayDP's executors in two sessions in
turn, each with a cache folder of the test's own.  The archive logic does not depend on
Spark's version (tests/unit/test_class_archive.py pins RayDP's agent flags), so this
runs in the Spark 3.5 pass only.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import hybrid_shuffle as hs
from hybrid_shuffle.config import SparkConfig
from hybrid_shuffle.spark.backends import choose_backend
from hybrid_shuffle.spark.class_archive import is_whole

from .conftest import CONFIG, JVM_CONFIGS, JVM_OPTIONS, own_ray

pytestmark = pytest.mark.spark
pytest.importorskip("pyspark")

#: runs after the modules sharing conftest's session, which own_ray() closes
STARTS_ITS_OWN_RAY = True
EXECUTOR = "spark.executor.extraJavaOptions"


_DRIVER = """
import sys
from pyspark.sql import SparkSession
from hybrid_shuffle.config import load_config
from hybrid_shuffle.spark.backends import driver_configs

log = f"{sys.argv[2]} -Xlog:class+load=info:file={sys.argv[1]}"
config = load_config({"spark": {"configs": {"spark.driver.extraJavaOptions": log}}}).spark
builder = SparkSession.builder.master("local[1]")
for key, value in driver_configs("local", config, None).items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
spark.stop()
"""


def test_the_drivers_jvm_writes_a_class_archive_and_the_next_driver_maps_it(
    tmp_path: Path,
) -> None:
    """Two drivers in turn, in processes of their own (a JVM is the process's once
    started): the first writes the archive as its JVM exits, the second loads Spark's
    classes from it (the JVM's class-load log says where each class came from)."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    folder = tmp_path / "cache" / "hybrid-shuffle" / "jvm"

    def driver(log: Path) -> str:
        done = subprocess.run(
            [sys.executable, "-c", _DRIVER, str(log), JVM_OPTIONS],
            env=env, capture_output=True, text=True, timeout=240, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        return log.read_text()

    first = driver(tmp_path / "first.log")
    assert "source: shared objects file (top)" not in first
    # the JVM outlives its Python by the archive's writing: wait for the file to settle
    sizes: list[int] = []

    def settled() -> bool:
        written = list(folder.glob("*.pending"))
        sizes.append(written[0].stat().st_size if len(written) == 1 else -1)
        return len(sizes) > 5 and sizes[-1] > 0 and len(set(sizes[-5:])) == 1

    deadline = time.monotonic() + 120
    while not settled():
        assert time.monotonic() < deadline, f"no archive written in {folder}: {sizes[-5:]}"
        time.sleep(0.5)
    (pending,) = folder.glob("*.pending")
    old = time.time() - 3600
    os.utime(pending, (old, old))  # as if written an hour ago: settled for the next start
    second = driver(tmp_path / "second.log")
    assert [p.suffix for p in folder.iterdir()] == [".jsa"]
    assert re.search(
        r"org\.apache\.spark\.SparkContext source: shared objects file \(top\)", second
    )


@pytest.mark.skipif(
    not choose_backend(SparkConfig(), None).uses_raydp, reason="RayDP's executors only"
)
def test_the_first_executor_is_asked_for_its_archive_and_later_executors_map_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two RayDP sessions in turn: the first one's executor records its classes and is
    asked for its archive as Spark stops (Ray kills it, so it never exits by itself);
    the second one's executor loads Spark's classes from that archive."""
    own_ray()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    folder = tmp_path / "cache" / "hybrid-shuffle" / "jvm"
    logs = tmp_path / "logs"
    logs.mkdir()

    def session(log: str) -> None:
        options = f"{JVM_OPTIONS} -Xlog:class+load=info:file={logs}/{log}-%p.log"
        configs = {**JVM_CONFIGS, EXECUTOR: options}
        config = {**CONFIG, "spark": {**CONFIG["spark"], "configs": configs}}
        with hs.Session(config, slots=2) as s:
            assert s.spark.range(0, 10, numPartitions=1).count() == 10  # on the executor

    session("first")
    # the workers' archive (the driver's JVM is the process's and outlives both sessions)
    assert [is_whole(p) for p in folder.glob("*.jsa")] == [True], sorted(folder.iterdir())
    assert not list(folder.glob("*.pending"))
    session("second")
    shared = r"org\.apache\.spark\.executor\.\w+ source: shared objects file \(top\)"
    assert any(re.search(shared, p.read_text()) for p in logs.glob("second-*.log"))
    assert not any(re.search(shared, p.read_text()) for p in logs.glob("first-*.log"))
