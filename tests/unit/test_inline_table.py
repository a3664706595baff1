"""An inline buffer's table travels as Arrow IPC bytes: every Arrow shape a stage can
emit comes back equal through the pickler Ray uses, and a process that only relays it
never decodes it."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest
from ray import cloudpickle

from hybrid_shuffle.shuffle.api import BufferRef, HandedOver
from hybrid_shuffle.shuffle.inline_table import InlineTable

SHAPES = {
    "no rows": pa.table({"k": pa.array([], pa.int64()), "s": pa.array([], pa.string())}),
    "no columns, three rows": pa.table({"a": [1, 2, 3]}).drop_columns(["a"]),
    "chunks with different dictionaries": pa.concat_tables(
        [
            pa.table({"d": pa.array(["a", "b"]).dictionary_encode()}),
            pa.table({"d": pa.array(["c", "a"]).dictionary_encode()}),
        ]
    ),
    "a slice of a larger batch": pa.table({"s": [str(i) * 3 for i in range(1000)]}).slice(500, 3),
    "schema metadata": pa.table({"a": [1]}).replace_schema_metadata({"spark": "x"}),
    "nested and maps": pa.table(
        {
            "l": [[1, 2], None],
            "st": [{"x": 1}, {"x": None}],
            "m": pa.array([[("a", 1)], []], pa.map_(pa.string(), pa.int64())),
        }
    ),
    "decimal, zoned timestamp, nulls": pa.table(
        {
            "d": pa.array([1, None], pa.decimal128(38, 4)),
            "t": pa.array([1, None], pa.timestamp("us", tz="UTC")),
            "n": pa.array([None, None], pa.null()),
        }
    ),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_every_arrow_shape_comes_back_equal_through_rays_pickler(shape: str) -> None:
    table = SHAPES[shape]
    back = pickle.loads(cloudpickle.dumps(InlineTable.of(table))).table
    assert back.num_rows == table.num_rows
    assert back.schema.equals(table.schema, check_metadata=True)
    assert back.equals(table)


def test_a_relayed_inline_buffer_is_never_decoded() -> None:
    """The driver unpickles a report's handed-over buffers and pickles them into the
    consumers' deployments: the bytes go through as they are, no table is built."""
    table = pa.table({"k": list(range(100)), "v": [1.5] * 100})
    handed = HandedOver([[BufferRef(0, InlineTable.of(table), 100, table.nbytes)]], None, 1.0)
    relayed = pickle.loads(cloudpickle.dumps(handed))  # on the driver
    buffer = relayed.buffers[0][0]
    assert buffer.inline and buffer.ref._table is None
    again = pickle.loads(cloudpickle.dumps(relayed))  # in the consumer
    assert again.buffers[0][0].ref._ipc == InlineTable.of(table)._ipc
    assert again.buffers[0][0].ref.table.equals(table)


def test_an_object_ref_or_a_placeholder_is_not_inline() -> None:
    assert not BufferRef(0, "ref", 1, 8).inline
    assert BufferRef(0, InlineTable.of(pa.table({"a": [1]})), 1, 8).inline
