"""Spark's ``BatchEvalPythonExec`` and ``ArrowEvalPythonExec``: scalar Python functions,
one more step of a stage's chain.

Each batch the step receives holds the columns it passes on and, computed by the
stage's query before it, each function's arguments; it calls the functions on
slices of at most ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows (what
Spark hands a Python worker at once) and appends one column per function.  A
pandas UDF and an Arrow-optimized ``@udf`` get pandas Series through PySpark's
serializer; a plain ``@udf`` gets Python values, row by row, as Spark's pickled
rows give them (``values``).  It emits as it reads: not output-on-EOF.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from hybrid_shuffle.operators.base import Columns, Operator
from hybrid_shuffle.operators.context import OperatorContext
from hybrid_shuffle.operators.python.function import EvalType, LoadedCall, PythonCall
from hybrid_shuffle.operators.python.values import python_values, spark_array

__all__ = ["PythonEval", "appended", "slices"]


def slices(table: pa.Table, rows: int) -> Iterator[pa.Table]:
    """``table`` in slices of at most ``rows`` rows; none for an empty table (Spark calls
    no function for an empty batch)."""
    if table.num_rows == 0:
        return
    for start in range(0, table.num_rows, max(rows, 1)):
        yield table.slice(start, rows)


def appended(
    schema: pa.Schema | None, keep: Sequence[str], outputs: Sequence[tuple[str, pa.DataType]]
) -> pa.Schema | None:
    """The schema of a step that passes ``keep`` of its input on and appends ``outputs``
    (their declared types); None while the input's is unknown."""
    if schema is None:
        return None
    kept = [schema.field(name) for name in keep]
    return pa.schema(kept + [pa.field(n, t) for n, t in outputs])


class PythonEval(Operator):
    """Appends ``outputs`` (one column per function of ``call``) to the ``keep`` columns."""

    operator_kind = "udf"

    def __init__(
        self,
        call: PythonCall,
        name: str,
        keep: Sequence[str],
        args: Sequence[str],
        arg_types: Sequence[str],
        outputs: Sequence[tuple[str, pa.DataType]],
    ) -> None:
        self.call = call
        self.name = name
        self.keep = list(keep)
        #: the input columns holding the arguments, in the order the functions' offsets use
        self.args = list(args)
        #: their Spark types as JSON (a row-at-a-time function's values are made from them)
        self.arg_types = list(arg_types)
        self.outputs = list(outputs)
        self._loaded: LoadedCall | None = None

    def describe(self) -> str:
        return f"{self.name} (python {self.call.names}, per batch)"

    def output_schema(self, input_schemas: Sequence[pa.Schema | None]) -> pa.Schema | None:
        return appended(input_schemas[0], self.keep, self.outputs)

    def input_columns(self, wanted: Columns) -> list[Columns]:
        return [frozenset(self.keep) | frozenset(self.args)]

    def open(self, context: OperatorContext | None = None) -> None:
        self._loaded = self.call.load()
        self._types: list[Any] = []
        if self.call.eval_type == EvalType.BATCHED:
            from pyspark.sql.types import _parse_datatype_json_string

            self._types = [_parse_datatype_json_string(t) for t in self.arg_types]

    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        assert self._loaded is not None, "open() first"
        out = []
        for part in slices(table, self.call.batch_rows):
            results = self._results(self._loaded, part)
            kept = part.select(self.keep)
            for (name, _), column in zip(self.outputs, results, strict=True):
                kept = kept.append_column(name, column)
            out.append(kept)
        return out

    def _results(self, loaded: LoadedCall, part: pa.Table) -> list[pa.Array]:
        if self.call.eval_type == EvalType.BATCHED:
            columns = [
                python_values(part.column(a), t)
                for a, t in zip(self.args, self._types, strict=True)
            ]
            results = loaded.run_rows(columns, part.num_rows)
            return [spark_array(v, t) for v, t in zip(results, loaded.return_types, strict=True)]
        named = pa.Table.from_arrays(
            [part.column(a) for a in self.args], names=[f"_{i}" for i in range(len(self.args))]
        )  # Spark names a function's arguments _0, _1..: the Series' names
        series = [loaded.pandas(c) for c in named.itercolumns()]
        batches = list(loaded.run([series]))
        return [batches[0].column(i) for i in range(len(self.outputs))]

    def close(self) -> None:
        self._loaded = None
