"""``import hybrid_shuffle`` is lazy: the runtime, Ray and pandas load on first use."""

from __future__ import annotations

import subprocess
import sys


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
