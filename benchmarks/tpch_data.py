"""TPC-H data for the benchmarks: Parquet made once by ``tpchgen-cli``, kept in a cache.

``ensure(scale)`` returns ``benchmarks/.data/tpch-sf<scale>/`` (git-ignored) holding one
Parquet file per table of ``TABLES`` (``ensure(scale, tables=ALL_TABLES)``: all eight),
generating the missing ones first: ``tpchgen-cli parquet`` (the PyPI package of the same
name, a Rust port of dbgen) with its defaults (Snappy, row groups of about 7 MiB: 53 of
them in SF1's ``lineitem``).  It writes into a scratch directory next to the cache and
renames each finished file into place, so an interrupted generation never leaves a
partial file that a later run would take as complete.  Decimal columns are
``decimal128(15, 2)``, dates ``date32``, strings ``string_view``.

``duckdb_connection(threads)`` is a DuckDB connection with ``threads`` threads and the
``tpch`` extension of the ``duckdb-extension-tpch`` wheel loaded from its file (no
download: extension autoinstall is off), and ``query(n)`` the text of TPC-H query
``n`` from that extension's ``tpch_queries()``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "ALL_TABLES",
    "CACHE",
    "TABLES",
    "duckdb_connection",
    "ensure",
    "generate_tables",
    "query",
    "table_paths",
]

CACHE = Path(__file__).resolve().parent / ".data"
#: the tables Q1, Q3 and Q6 read
TABLES = ("lineitem", "orders", "customer")
#: the eight tables of TPC-H, which its 22 queries read
ALL_TABLES = ("lineitem", "orders", "customer", "part", "partsupp", "supplier", "nation", "region")


def directory(scale: float, root: Path = CACHE) -> Path:
    return root / f"tpch-sf{scale:g}"


def table_paths(
    scale: float, root: Path = CACHE, tables: tuple[str, ...] = TABLES
) -> dict[str, str]:
    """Table name -> Parquet file of the cache at ``scale`` (which must exist)."""
    return {t: str(directory(scale, root) / f"{t}.parquet") for t in tables}


def generate_tables(
    command: Callable[[Path], list[str]], target: Path, tables: Sequence[str], what: str
) -> None:
    """Run a generator (``command(scratch)``, writing ``<table>.parquet`` files into
    ``scratch``) in a scratch folder beside ``target``, then move ``tables`` into
    ``target`` one rename each, so each file is in place whole or not at all (a killed
    run leaves only the scratch folder, removed by the next)."""
    scratch = target.with_name(target.name + ".partial")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    cmd = command(scratch)
    print(f"[bench] generating {what}: {' '.join(cmd)}", file=sys.stderr, flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        shutil.rmtree(scratch, ignore_errors=True)
        raise RuntimeError(
            f"{Path(cmd[0]).name} failed (exit {done.returncode}): {done.stderr.strip()[-500:]}"
        )
    target.mkdir(parents=True, exist_ok=True)
    for t in tables:
        if not (target / f"{t}.parquet").is_file():
            (scratch / f"{t}.parquet").rename(target / f"{t}.parquet")
    shutil.rmtree(scratch, ignore_errors=True)


def ensure(scale: float, root: Path = CACHE, tables: tuple[str, ...] = TABLES) -> Path:
    """The cache directory at ``scale``, its missing ``tables`` generated with
    ``tpchgen-cli`` first (the tables already there are kept as they are)."""
    target = directory(scale, root)
    missing = [t for t in tables if not (target / f"{t}.parquet").is_file()]
    if not missing:
        return target
    generate_tables(
        lambda scratch: [
            _tpchgen(),
            "parquet",
            "--scale-factor",
            f"{scale:g}",
            "--tables",
            ",".join(missing),
            "--output-dir",
            str(scratch),
            "--quiet",
        ],
        target,
        missing,
        f"TPC-H SF{scale:g}",
    )
    return target


def _tpchgen() -> str:
    """``tpchgen-cli`` next to this interpreter (a venv's ``bin``), in the ``bin`` of a
    ``site-packages`` on ``sys.path`` (a venv layered on another), else on the ``PATH``."""
    places = [Path(sys.executable).with_name("tpchgen-cli")]
    places += [Path(p).parents[2] / "bin" / "tpchgen-cli"
               for p in sys.path if p.endswith("site-packages")]  # fmt: skip
    for place in places:
        if place.is_file():
            return str(place)
    found = shutil.which("tpchgen-cli")
    if found is None:
        raise RuntimeError("tpchgen-cli is not installed: pip install tpchgen-cli")
    return found


def duckdb_connection(threads: int) -> Any:
    """A DuckDB connection of ``threads`` threads with the ``tpch`` extension loaded."""
    import duckdb

    config = {
        "threads": threads,
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
    }
    con = duckdb.connect(config=config)
    con.execute(f"LOAD '{_tpch_extension()}'")
    return con


def _tpch_extension() -> Path:
    import duckdb
    import duckdb_extension_tpch

    folder = Path(duckdb_extension_tpch.__file__).parent / "extensions"
    wanted = folder / f"v{duckdb.__version__}" / "tpch.duckdb_extension"
    if wanted.is_file():
        return wanted
    found = sorted(folder.glob("*/tpch.duckdb_extension"))
    if not found:
        raise RuntimeError(f"no tpch.duckdb_extension under {folder}")
    return found[-1]


def query(con: Any, number: int) -> str:
    """TPC-H query ``number``'s text as the ``tpch`` extension has it, without the ``;``."""
    row = con.execute("SELECT query FROM tpch_queries() WHERE query_nr = ?", [number]).fetchone()
    if row is None:
        raise ValueError(f"the tpch extension has no query {number}")
    return str(row[0]).strip().rstrip(";")
