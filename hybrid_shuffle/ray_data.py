"""The Ray Data bridge: a Dataset's blocks in (``Job.from_ray_data``) and out
(``Stream.to_ray_data``), as ObjectRefs, without a copy where ownership allows.

In: ``Dataset.to_arrow_refs()`` runs the dataset when the job runs (a lazy
source, counted in ``JobResult.sources_seconds``); its blocks stay where Ray
Data's tasks put them, owned by the driver that submitted those tasks (so they
live as long as the job holds their refs), and each source subtask fetches its
own blocks: zero-copy on the same node.  Columns are not pruned here (a
``select_columns`` would be one more copy of every block); the first exchange
drops what nothing reads.

Out: the sink's result partitions are handed to the driver as refs
(``HandedOver``), never fetched, and ``ray.data.from_arrow_refs`` wraps them.
The blocks stay owned by the process that ``put`` them: an executor (the
default ``executor-local`` service) or a partition store (``external``).  The
driver borrows them, so releasing the job's partitions frees nothing while the
Dataset is alive; but they die with their owner: consume (or ``materialize``
elsewhere) the Dataset before the session closes.  Where the result cannot be
handed over as refs (a partition that spilled to the service's files), it is
read as ``collect`` reads it and put back: one copy through the driver.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from hybrid_shuffle.errors import PlanError

__all__ = ["arrow_schema", "block_refs", "dataset_of"]

#: Ray Data's extension type for Python objects it could not make Arrow types of
_PICKLED_OBJECTS = "ray.data.arrow_pickled_object"


def arrow_schema(ds: Any, what: str) -> pa.Schema:
    """The Dataset's schema as Arrow; a ``PlanError`` for what is not a Dataset or has
    columns that are not Arrow types (Python objects, a pandas-only schema)."""
    import ray.data

    if not isinstance(ds, ray.data.Dataset):
        raise PlanError(f"{what}: got a {type(ds).__name__}; pass a ray.data.Dataset")
    schema = ds.schema()
    if schema is None:
        raise PlanError(f"{what}: the Dataset has no schema (no block); pass one with rows")
    base = getattr(schema, "base_schema", schema)
    if not isinstance(base, pa.Schema):
        try:
            base = pa.schema(list(zip(schema.names, schema.types, strict=True)))
        except (TypeError, pa.ArrowInvalid) as e:
            raise PlanError(
                f"{what}: the Dataset's columns are not Arrow types ({e}); convert them "
                "with ds.map_batches(..., batch_format='pyarrow') first"
            ) from e
    for field in base:
        if isinstance(field.type, pa.ExtensionType) and field.type.extension_name == (
            _PICKLED_OBJECTS
        ):
            raise PlanError(
                f"{what}: column '{field.name}' holds Python objects Ray Data could not "
                "convert to Arrow; make it a number, string or list column first"
            )
    return base


def block_refs(ds: Any) -> list[Any]:
    """The Dataset's blocks as ObjectRefs of Arrow tables (runs the Dataset)."""
    return list(ds.to_arrow_refs())


def dataset_of(blocks: list[Any], schema: pa.Schema) -> Any:
    """A Ray Dataset over ``blocks`` (refs of tables); an empty one of ``schema``."""
    import ray
    import ray.data

    if not blocks:
        empty: Any = ray.put(schema.empty_table())
        return ray.data.from_arrow_refs([empty])
    return ray.data.from_arrow_refs(blocks)
