"""The README's first script runs as written: from another directory, as a script of its
own, printing the result pyarrow gives and each exchange's mode, and no warning.

The script starts its own small Ray (its config's ``ray:``) in a subprocess, so this
module needs no ``local_ray``.  The expected result is computed here with pyarrow alone,
from the script's own data: its lines up to the session (the tables and ``clean``) are
run in this process.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa

ROOT = Path(__file__).resolve().parents[2]
#: the README's first ```python block
FIRST_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def first_script() -> str:
    found = FIRST_BLOCK.search((ROOT / "README.md").read_text(encoding="utf-8"))
    assert found, "README.md has no ```python block"
    return found.group(1)


def the_scripts_data(script: str) -> dict[str, Any]:
    """The script's names before its session: the tables, ``clean`` and ``config``."""
    before, session, _ = script.partition("\nwith hs.Session(")
    assert session, "the README's first script opens no `with hs.Session(...)` block"
    names: dict[str, Any] = {"__name__": "readme_prelude"}
    exec(compile(before, "README.md", "exec"), names)
    return names


def expected_output(names: dict[str, Any]) -> list[str]:
    """The lines the script prints before its edge summary, from pyarrow alone."""
    orders: pa.Table = names["orders"]
    large = names["clean"](orders).join(names["customers"], keys="customer", join_type="inner")
    top = large.sort_by([("amount", "descending"), ("order_id", "ascending")])
    assert 0 < top.num_rows < orders.num_rows
    table = top.slice(0, 3).to_pandas().to_string(index=False)
    return [f"{top.num_rows} large orders; the largest:", *table.splitlines()]


def test_the_readme_first_script_runs_from_another_directory(tmp_path: Path) -> None:
    script = first_script()
    names = the_scripts_data(script)
    ray = names["config"].get("ray", {})
    assert ray.get("num_cpus") == 2 and "object_store_memory" in ray  # a small Ray
    (tmp_path / "first.py").write_text(script, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.pop("PYTHONPATH", None)  # the installed package, not the repository's folder
    # a Ray of the script's own even when another process on the machine runs a `ray
    # start` cluster, which ray.init() would join otherwise (refusing num_cpus)
    env["RAY_ADDRESS"] = "local"
    done = subprocess.run(
        [sys.executable, "first.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    want = expected_output(names)
    assert lines[: len(want)] == want, done.stdout
    # then one line per exchange, with the mode the script set on it
    modes = {name: edge["mode"] for name, edge in names["config"]["edges"].items()}
    summary = {line.split()[1]: line.split()[2] for line in lines[len(want) :]}
    assert summary == modes, done.stdout
    for output in (done.stdout, done.stderr):
        assert "warning" not in output.lower(), output
