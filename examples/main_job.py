"""The main job: TPC-H-like revenue per market segment and nation, PySpark in and out.

Two inputs at ``--scale`` (1.0 = 1.5M orders, 150k customers; default 0.1): the
``orders``, Parquet that the first run at a scale writes under ``.data/main/`` (NumPy,
in a second; a ``STAMP`` file names the scale and ``DATA_VERSION``, so later runs only
check it), which Spark plans as a file scan and the engine's executors read; and the
``customers``, which Spark generates and hands over to the engine (RayDP's executors
compute them, Arrow into Ray's object store).  With ``--data DIR`` (``orders/`` and
``customers/`` Parquet) Spark reads both, and the customers, cached by Spark, are
handed over.  The pipeline is written once, as a plain PySpark DataFrame
(``spark_pipeline``): join, aggregate per (segment, nation), sort by revenue.  The
engine runs its physical plan (``session.from_dataframe``), each Spark exchange an edge
whose mode ``configs/main.yaml`` sets by what the edge is (``edge_rules:``), so the
same config holds for every plan Spark makes of it: a broadcast join at scale 0.1 and
1, a sort-merge join at scale 5, Spark 3.5's and Spark 4's numbering.  The result
comes back as a Spark DataFrame, is shown, and written as Parquet.  The tests run the
same DataFrame on Spark alone and compare.

Spark starts in the background as the session opens (``start_spark=True``): its start
overlaps Ray's and the data check.  The last line gives the wall time of each phase.
"""

from __future__ import annotations

import time

_STARTED = time.perf_counter()

import argparse  # noqa: E402 -- after the clock starts: the imports are a phase
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import hybrid_shuffle as hs  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SEGMENTS = ["AUTOMOBILE", "BUILDING", "FURNITURE", "HOUSEHOLD", "MACHINERY"]


def default_config() -> Path:
    """``configs/main.yaml``: its ``edge_rules:`` match the job's edges by what they are,
    whatever Spark version planned it and whatever join the data size made it choose."""
    return ROOT / "configs" / "main.yaml"


#: what the orders generator writes; a change of it (or of ``orders_table``) bumps this,
#: so that every cached copy is written again
DATA_VERSION = 2
#: the cached inputs, by scale (not committed: ``.gitignore`` lists ``.data/``)
DATA_ROOT = ROOT / ".data" / "main"
#: the orders' schema, given to Spark's reader, so that it plans the scan without a
#: job of its own to read a file's footer (what inferring the schema costs)
ORDERS_COLUMNS = [
    ("o_orderkey", "bigint"),
    ("o_custkey", "bigint"),
    ("o_totalprice", "decimal(12,2)"),
    ("o_orderdate", "date"),
    ("o_orderstatus", "string"),
]
#: rows per Parquet row group: the engine's source subtasks split the file by them
_ROW_GROUP = 1 << 16


def customer_count(scale: float) -> int:
    return max(int(150_000 * scale), 10)


def orders_table(scale: float) -> Any:
    """The ``orders`` table at ``scale`` as Arrow, made with NumPy (deterministic): ten
    orders per customer, a few of them pointing at customers that do not exist (the
    inner join drops them)."""
    import numpy as np
    import pyarrow as pa

    customers_n = customer_count(scale)
    ids = np.arange(1, customers_n * 10 + 1, dtype=np.int64)
    custkey = (ids * 2654435761) % int(customers_n * 1.02) + 1
    # the price's cents, 900.00 to 5899.99, as decimal(12,2)'s 128-bit unscaled integers
    cents = np.zeros((len(ids), 2), dtype=np.int64)
    cents[:, 0] = (ids * 40503) % 500_000 + 90_000
    price = pa.Array.from_buffers(pa.decimal128(12, 2), len(ids), [None, pa.py_buffer(cents)])
    epoch_days = (np.datetime64("1992-01-01") - np.datetime64("1970-01-01")).astype(int)
    dates = pa.array((epoch_days + ids % 2400).astype(np.int32), pa.int32()).cast(pa.date32())
    status = pa.DictionaryArray.from_arrays(
        pa.array((ids % 3).astype(np.int8)), pa.array(["F", "O", "P"])
    ).cast(pa.string())
    return pa.table(
        {
            "o_orderkey": ids,
            "o_custkey": custkey,
            "o_totalprice": price,
            "o_orderdate": dates,
            "o_orderstatus": status,
        }
    )


def cached_orders(scale: float, root: Path = DATA_ROOT) -> tuple[Path, bool]:
    """The folder of the ``orders`` Parquet at ``scale`` under ``root``, written now if no
    copy of this ``DATA_VERSION`` is there (a ``STAMP`` file says which is); and whether
    it was written now.  A copy is written beside and renamed into place, so that a run
    stopped half-way, or two at once, never leave a partial one."""
    import shutil
    import tempfile

    import pyarrow.parquet as pq

    folder = root / f"scale-{scale:g}"
    stamp = f"orders version {DATA_VERSION}, scale {scale:g}\n"
    if (folder / "STAMP").is_file() and (folder / "STAMP").read_text() == stamp:
        return folder / "orders", False
    root.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix=f".scale-{scale:g}-", dir=root))
    (fresh / "orders").mkdir()
    pq.write_table(orders_table(scale), fresh / "orders" / "part-0.parquet", _ROW_GROUP)
    (fresh / "STAMP").write_text(stamp)
    old = root / f".old-{fresh.name}"
    if folder.exists():
        folder.rename(old)
    try:
        fresh.rename(folder)
    except OSError:  # another run put its copy there first: the same data
        shutil.rmtree(fresh, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)
    return folder / "orders", True


def customers_frame(spark: Any, scale: float, partitions: int = 2) -> Any:
    """The ``customers`` table at ``scale``, generated by Spark itself: the engine gets
    it handed over from Spark (RayDP's executors compute it, Arrow to the object store)."""
    segments = ", ".join(f"'{s}'" for s in SEGMENTS)
    return spark.range(1, customer_count(scale) + 1, numPartitions=partitions).selectExpr(
        "id as c_custkey",
        "concat('Customer#', lpad(cast(id as string), 9, '0')) as c_name",
        f"element_at(array({segments}), cast(id / 25 % 5 as int) + 1) as c_mktsegment",
        "cast(id % 25 as int) as c_nationkey",
    )


def orders_frame(spark: Any, folder: Path) -> Any:
    """The ``orders`` Parquet as a Spark DataFrame: Spark plans a file scan (given the
    schema, it reads no file), which the engine's executors read."""
    schema = ", ".join(f"{name} {kind}" for name, kind in ORDERS_COLUMNS)
    return spark.read.schema(schema).parquet(str(folder))


def generate(
    spark: Any, scale: float, partitions: int = 2, root: Path = DATA_ROOT
) -> tuple[Any, Any]:
    """The job's two inputs at ``scale``: the cached ``orders`` Parquet (written first if
    need be) and the ``customers`` Spark generates in ``partitions``."""
    folder, _ = cached_orders(scale, root)
    return orders_frame(spark, folder), customers_frame(spark, scale, partitions)


def spark_pipeline(orders: Any, customers: Any) -> Any:
    """The main job as a PySpark DataFrame (what ``session.from_dataframe`` runs)."""
    from pyspark.sql import functions as F

    joined = orders.withColumnRenamed("o_custkey", "c_custkey").join(customers, "c_custkey")
    return (
        joined.groupBy("c_mktsegment", "c_nationkey")
        .agg(
            F.sum("o_totalprice").alias("o_totalprice_sum"),
            F.count("o_totalprice").alias("o_totalprice_count"),
            F.max("o_totalprice").alias("o_totalprice_max"),
            F.min("o_orderdate").alias("o_orderdate_min"),
        )
        .orderBy(F.desc("o_totalprice_sum"))
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.1)
    parser.add_argument("--config", default=str(default_config()))
    parser.add_argument("--data", help="a folder with orders/ and customers/ Parquet to read")
    parser.add_argument("--out", default=str(ROOT / "out" / "revenue.parquet"))
    parser.add_argument("--address", help="join this Ray cluster instead of an embedded one")
    args = parser.parse_args(argv)
    phases = Phases()
    try:
        # Spark starts in the background at once: the driver's JVM launches while Ray
        # starts, RayDP's app master and executor (Ray actors) once Ray is up, while this
        # thread makes (or finds) the data
        with hs.Session(args.config, address=args.address, start_spark=True) as session:
            phases.mark("Ray and the executors")
            folder: Path | None = None
            written = False
            if not args.data:
                folder, written = cached_orders(args.scale)
            found = "written" if written else "found" if folder else "given (--data)"
            phases.mark(f"orders Parquet {found}")
            spark = session.spark
            phases.mark("Spark start (what is left of it)")
            if args.data:  # the customers cached by Spark: handed over all the same
                orders = spark.read.parquet(str(Path(args.data) / "orders"))
                customers = spark.read.parquet(str(Path(args.data) / "customers")).cache()
            else:
                orders, customers = orders_frame(spark, folder), customers_frame(spark, args.scale)
            df = spark_pipeline(orders, customers)
            ranked = session.from_dataframe(df, "tpch-revenue")
            phases.mark("plan (Spark's, then the engine's)")
            print(ranked.explain())
            # bars while it runs, in a terminal only (CI's logs stay as they were)
            result = ranked.collect(progress=sys.stderr.isatty())
            phases.split("customers handed over (Spark -> Ray)", result.sources_seconds, "engine")
            out = session.bridge.to_dataframe(result.table, df.schema)
            out.show(10, truncate=False)
            phases.mark("result handed back (Ray -> Spark), shown")
            out.coalesce(1).write.mode("overwrite").parquet(args.out)
            phases.mark("result written")
        phases.mark("close")
    except hs.HybridShuffleError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{result.table.num_rows} groups, written to {args.out}")
    print(result.edge_summary())
    print(result.vertex_summary())
    print(phases.line())
    return 0


class Phases:
    """Wall-clock seconds per phase of the run, from the first import on."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = _STARTED
        self.mark("imports")

    def mark(self, name: str) -> None:
        """End the phase ``name``: the time since the last mark."""
        now = time.perf_counter()
        self.seconds[name] = now - self._last
        self._last = now

    def split(self, first: str, seconds: float, rest: str) -> None:
        """End two phases: ``first`` took ``seconds`` (measured inside), ``rest`` the rest."""
        now = time.perf_counter()
        self.seconds[first] = seconds
        self.seconds[rest] = now - self._last - seconds
        self._last = now

    def line(self) -> str:
        parts = ", ".join(f"{k} {v:.2f} s" for k, v in self.seconds.items())
        return f"wall time {time.perf_counter() - _STARTED:.2f} s: {parts}"


if __name__ == "__main__":
    sys.exit(main())
