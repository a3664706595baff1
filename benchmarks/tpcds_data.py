"""TPC-DS data and query texts for ``benchmarks.tpcds_sql`` (issue 33).

``ensure(scale)`` returns ``benchmarks/.data/tpcds-sf<scale>/`` (git-ignored) holding one
Parquet file per TPC-DS table, generated first if any is missing by ``tpcgen-cli tpcds
parquet`` (the ``tpcgen-cli`` PyPI package, a Rust port of dsdgen) into a scratch folder
renamed into place whole, so that an interrupted generation is never taken as complete.

``query(con, n)`` is TPC-DS query ``n``'s text from the ``tpcds`` DuckDB extension
(``tpcds_queries()``, the ``duckdb-extension-tpcds`` wheel, loaded from its file: no
download), made Spark SQL by ``spark_dialect``.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path
from typing import Any

from benchmarks.tpch_data import generate_tables

__all__ = [
    "CACHE",
    "TABLES",
    "duckdb_connection",
    "ensure",
    "query",
    "spark_dialect",
    "table_paths",
]

CACHE = Path(__file__).resolve().parent / ".data"
#: the 24 tables of TPC-DS (tpcgen-cli also writes ``dbgen_version``, which no query reads)
TABLES = (
    "call_center", "catalog_page", "catalog_returns", "catalog_sales", "customer",
    "customer_address", "customer_demographics", "date_dim", "household_demographics",
    "income_band", "inventory", "item", "promotion", "reason", "ship_mode", "store",
    "store_returns", "store_sales", "time_dim", "warehouse", "web_page", "web_returns",
    "web_sales", "web_site",
)  # fmt: skip


def directory(scale: float, root: Path = CACHE) -> Path:
    return root / f"tpcds-sf{scale:g}"


def table_paths(scale: float, root: Path = CACHE) -> dict[str, str]:
    """Table name -> Parquet file of the cache at ``scale`` (which must exist)."""
    return {t: str(directory(scale, root) / f"{t}.parquet") for t in TABLES}


def ensure(scale: float, root: Path = CACHE) -> Path:
    """The cache directory at ``scale``, generated with ``tpcgen-cli`` if a table is missing."""
    target = directory(scale, root)
    if all((target / f"{t}.parquet").is_file() for t in TABLES):
        return target
    generate_tables(
        lambda scratch: [
            _tool(),
            "tpcds",
            "parquet",
            "--scale-factor",
            f"{scale:g}",
            "--output-dir",
            str(scratch),
        ],
        target,
        TABLES,
        f"TPC-DS SF{scale:g}",
    )
    return target


def _tool() -> str:
    """``tpcgen-cli`` next to this interpreter, else on the ``PATH``."""
    here = Path(sys.executable).with_name("tpcgen-cli")
    if here.is_file():
        return str(here)
    found = shutil.which("tpcgen-cli")
    if found is None:
        raise RuntimeError("tpcgen-cli is not installed: pip install tpcgen-cli")
    return found


def duckdb_connection() -> Any:
    """A one-thread DuckDB connection with the ``tpcds`` extension loaded from its wheel."""
    import duckdb
    import duckdb_extension_tpcds

    folder = Path(duckdb_extension_tpcds.__file__).parent / "extensions"
    wanted = folder / f"v{duckdb.__version__}" / "tpcds.duckdb_extension"
    found = [wanted] if wanted.is_file() else sorted(folder.glob("*/tpcds.duckdb_extension"))
    if not found:
        raise RuntimeError(f"no tpcds.duckdb_extension under {folder}")
    config = {"threads": 1, "autoinstall_known_extensions": False,
              "autoload_known_extensions": False}  # fmt: skip
    con = duckdb.connect(config=config)
    con.execute(f"LOAD '{found[-1]}'")
    return con


def spark_dialect(text: str) -> str:
    """DuckDB's TPC-DS text as Spark SQL.  The one fix needed: column aliases written
    as double-quoted identifiers (``AS "order count"``, q16, q32, q50, q62, q92, q94,
    q95, q99), which Spark reads as string literals, become back-quoted."""
    return re.sub(r'\bAS\s+"([^"]+)"', r"AS `\1`", text, flags=re.IGNORECASE)


def query(con: Any, number: int, dialect: str = "spark") -> str:
    """TPC-DS query ``number`` as Spark SQL (or, ``dialect="duckdb"``, the extension's
    own text), without the ``;``."""
    row = con.execute("SELECT query FROM tpcds_queries() WHERE query_nr = ?", [number]).fetchone()
    if row is None:
        raise ValueError(f"the tpcds extension has no query {number}")
    text = str(row[0]).strip().rstrip(";")
    return text if dialect == "duckdb" else spark_dialect(text)
