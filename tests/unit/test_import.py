"""``import hybrid_shuffle`` is lazy: the runtime, Ray and pandas load on first use."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path


def test_importing_the_package_loads_neither_ray_nor_pandas_nor_pyarrow() -> None:
    code = (
        "import sys, hybrid_shuffle as hs\n"
        "heavy = [m for m in ('ray', 'pandas', 'pyarrow', 'pyspark') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "assert hs.ConfigError.__name__ == 'ConfigError'\n"
        "hs.Session  # the runtime loads on first use\n"
        "assert 'ray' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_an_executor_process_starts_without_pandas() -> None:
    """Every session starts fresh executor processes; pandas (imported by
    ``pyarrow.dataset`` too) is a third of a second of CPU each, paid only by a job that
    reads Parquet through pyarrow or returns a pandas frame."""
    code = (
        "import sys, hybrid_shuffle.actors.executor\n"
        "assert 'pandas' not in sys.modules and 'pyarrow.dataset' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_every_package_is_in_the_wheel() -> None:
    """pyproject lists the packages one by one: a new folder must be added there, or a
    wheel (not an editable install) ships without it."""
    root = Path(__file__).resolve().parents[2]
    with open(root / "pyproject.toml", "rb") as f:
        listed = set(tomllib.load(f)["tool"]["setuptools"]["packages"])
    found = {
        ".".join(init.parent.relative_to(root).parts)
        for init in (root / "hybrid_shuffle").rglob("__init__.py")
    }
    assert found - listed == set()
