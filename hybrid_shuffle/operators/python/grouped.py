"""Python functions that see each group whole: ``applyInPandas`` (Spark's
``FlatMapGroupsInPandasExec``), ``cogroup().applyInPandas``
(``FlatMapCoGroupsInPandasExec``) and grouped-aggregate pandas UDFs
(``AggregateInPandasExec``, and ``WindowInPandasExec`` over an unordered, unbounded
window).

The hash exchange before the step has put every row of a group in one subtask
(an ordinary ``exchange_<id>`` edge with its mode); the step keeps its input
until the end (output-on-EOF, as Spark's sort before the function is), groups it
(``groups.group_runs``) and calls the function once per group, in key order,
with the group's rows as PySpark's worker would receive them: the key columns
first, then the value columns, under Spark's names.  The subtask's rows are
held in memory while its groups are called, outside ``operators.memory``; Spark
sorts (spilling) and holds one group at a time, so a subtask's rows that do not
fit in memory fail here where Spark would run.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from hybrid_shuffle.operators.base import Columns, Operator
from hybrid_shuffle.operators.context import OperatorContext
from hybrid_shuffle.operators.python.function import LoadedCall, PythonCall, user_failure
from hybrid_shuffle.operators.python.groups import group_runs
from hybrid_shuffle.operators.python.iterator import conform
from hybrid_shuffle.operators.python.scalar import appended

__all__ = [
    "GroupSide",
    "PythonCoGroupedMap",
    "PythonGroupedAgg",
    "PythonGroupedMap",
    "PythonWindowAgg",
]

#: output rows gathered before a grouped step emits them as one table
_OUTPUT_ROWS = 65536


def coalesced(tables: Iterable[pa.Table], rows: int = _OUTPUT_ROWS) -> Iterator[pa.Table]:
    """``tables`` (one per group: often a few rows) joined into tables of at least
    ``rows`` rows, the last one smaller: the next operator pays per batch it reads."""
    pending: list[pa.Table] = []
    held = 0
    for table in tables:
        pending.append(table)
        held += table.num_rows
        if held >= rows:
            yield pa.concat_tables(pending)
            pending, held = [], 0
    if pending:
        yield pa.concat_tables(pending)


def _sliceable(column: pa.ChunkedArray) -> bool:
    """Whether converting ``column`` to pandas once and slicing the result gives what
    converting each slice gives.  Not for an integer or boolean column with nulls: a
    slice without a null converts to ``int64``/``bool``, the whole to ``float64``/object,
    and a function sees its group's own dtype in Spark."""
    kind = column.type
    return column.null_count == 0 or not (pa.types.is_integer(kind) or pa.types.is_boolean(kind))


class Converted:
    """A grouped table's columns as the function receives them: converted to pandas once
    (PySpark's converter over the whole column), each group a slice of that with its own
    index from 0, as its own conversion would be (``_sliceable``); a column where that
    does not hold is converted group by group."""

    def __init__(self, loaded: LoadedCall, table: pa.Table) -> None:
        self._loaded = loaded
        self._table = table
        self._whole = [loaded.pandas(c) if _sliceable(c) else None for c in table.itercolumns()]

    def group(self, start: int, end: int) -> list[Any]:
        out: list[Any] = []
        part: pa.Table | None = None
        for index, whole in enumerate(self._whole):
            if whole is not None:
                out.append(whole.iloc[start:end].reset_index(drop=True))
                continue
            if part is None:
                part = self._table.slice(start, end - start)
            out.append(self._loaded.pandas(part.column(index)))
        return out


class GroupSide:
    """One grouped input: its key columns and value columns, each with the name the
    function sees (Spark's attribute name)."""

    def __init__(self, keys: Sequence[tuple[str, str]], values: Sequence[tuple[str, str]]) -> None:
        self.keys = list(keys)
        self.values = list(values)

    @property
    def columns(self) -> list[str]:
        return [c for c, _ in self.keys] + [c for c, _ in self.values]

    def offsets(self) -> list[int]:
        """Spark's argument offsets of a grouped function's side: its length, the key
        count, the keys' positions, the values' (``BasePandasGroupExec``)."""
        keys, values = len(self.keys), len(self.values)
        return [1 + keys + values, keys, *range(keys), *range(keys, keys + values)]

    def named(self, table: pa.Table) -> pa.Table:
        """``table``'s keys then values, under the names the function sees."""
        pairs = self.keys + self.values
        return pa.Table.from_arrays(
            [table.column(c) for c, _ in pairs], names=[n for _, n in pairs]
        )


class _Grouped(Operator):
    """Keeps every input batch; ``finish`` groups them."""

    operator_kind = "udf"
    output_on_eof = True

    def __init__(
        self, call: PythonCall, name: str, outputs: Sequence[tuple[str, pa.DataType]]
    ) -> None:
        self.call = call
        self.name = name
        self.outputs = list(outputs)
        self._loaded: LoadedCall | None = None

    def describe(self) -> str:
        return f"{self.name} (python {self.call.names}, per group)"

    def output_schema(self, input_schemas: Sequence[pa.Schema | None]) -> pa.Schema | None:
        return pa.schema([pa.field(n, t) for n, t in self.outputs])

    def open(self, context: OperatorContext | None = None) -> None:
        self._loaded = self.call.load()
        self._tables: list[list[pa.Table]] = [[] for _ in range(self.num_inputs)]

    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        if table.num_rows:
            self._tables[input_index].append(table)
        return ()

    def _input(self, index: int, schema_of: GroupSide) -> pa.Table | None:
        tables = self._tables[index]
        if not tables:
            return None
        wanted = list(dict.fromkeys(schema_of.columns))  # a key that is a value too: once
        return pa.concat_tables([t.select(wanted) for t in tables])

    def _series(self, table: pa.Table) -> list[Any]:
        assert self._loaded is not None
        return [self._loaded.pandas(c) for c in table.itercolumns()]

    def close(self) -> None:
        self._loaded = None
        self._tables = []


class _OneSide(_Grouped):
    """A grouped step of one input, its keys and values named by ``side``."""

    def __init__(
        self,
        call: PythonCall,
        name: str,
        side: GroupSide,
        outputs: Sequence[tuple[str, pa.DataType]],
    ) -> None:
        super().__init__(call, name, outputs)
        self.side = side

    def input_columns(self, wanted: Columns) -> list[Columns]:
        return [frozenset(self.side.columns)]

    def finish(self) -> Iterable[pa.Table]:
        assert self._loaded is not None, "open() first"
        table = self._input(0, self.side)
        if table is None:
            return ()
        return self._called(self.side.named(table))

    def _called(self, named: pa.Table) -> Iterator[pa.Table]:
        raise NotImplementedError


class PythonGroupedMap(_OneSide):
    """``applyInPandas``: the function's DataFrames, in its declared columns."""

    def _called(self, named: pa.Table) -> Iterator[pa.Table]:
        assert self._loaded is not None
        order, starts = group_runs(named.select(list(range(len(self.side.keys)))))
        converted = Converted(self._loaded, named.take(order))
        items = (converted.group(start, end) for start, end in itertools.pairwise(starts))
        with user_failure(self.call):
            yield from coalesced(conform(b, self.outputs) for b in self._loaded.run(items))


class PythonCoGroupedMap(_Grouped):
    """``cogroup().applyInPandas``: per key of either side, both sides' rows (one of
    them possibly empty)."""

    num_inputs = 2

    def __init__(
        self,
        call: PythonCall,
        name: str,
        sides: tuple[GroupSide, GroupSide],
        outputs: Sequence[tuple[str, pa.DataType]],
        key_types: Sequence[pa.DataType],
        schemas: tuple[pa.Schema, pa.Schema],
    ) -> None:
        super().__init__(call, name, outputs)
        self.sides = sides
        #: the type both sides' keys are compared in
        self.key_types = list(key_types)
        #: each side's columns: a side with no row here is an empty table of them
        self.schemas = schemas

    def input_columns(self, wanted: Columns) -> list[Columns]:
        return [frozenset(s.columns) for s in self.sides]

    def finish(self) -> Iterable[pa.Table]:
        assert self._loaded is not None, "open() first"
        named: list[pa.Table] = []
        for index, side in enumerate(self.sides):
            table = self._input(index, side)
            if table is None:  # a key of the other side still meets an empty frame here
                table = self.schemas[index].empty_table()
            named.append(side.named(table))
        if not any(t.num_rows for t in named):
            return ()
        return self._called(named[0], named[1])

    def _called(self, left: pa.Table, right: pa.Table) -> Iterator[pa.Table]:
        assert self._loaded is not None
        count = len(self.key_types)
        keys = pa.concat_tables(
            [
                pa.Table.from_arrays(
                    [t.column(i).cast(k) for i, k in enumerate(self.key_types)],
                    names=[f"k{i}" for i in range(count)],
                )
                for t in (left, right)
            ]
        )
        order, starts = group_runs(keys)
        split = left.num_rows
        order_np = order.to_numpy()

        def items() -> Iterator[tuple[list[Any], list[Any]]]:
            for start, end in itertools.pairwise(starts):
                rows = order_np[start:end]
                on_left, on_right = rows[rows < split], rows[rows >= split] - split
                yield self._series(left.take(on_left)), self._series(right.take(on_right))

        with user_failure(self.call):
            yield from coalesced(conform(b, self.outputs) for b in self._loaded.run(items()))


class PythonGroupedAgg(_OneSide):
    """Grouped-aggregate pandas UDFs: per group, the key values and one value per
    function (``outputs``: the keys' columns, then the functions'; ``side``'s values are
    the functions' arguments, ``_0``, ``_1``..)."""

    def _called(self, named: pa.Table) -> Iterator[pa.Table]:
        assert self._loaded is not None
        count = len(self.side.keys)
        keys = named.select(list(range(count)))
        values = named.select(list(range(count, named.num_columns)))
        order, starts = group_runs(keys)
        keys, values = keys.take(order), values.take(order)
        firsts = pa.array(starts[:-1])
        converted = Converted(self._loaded, values)
        items = (converted.group(start, end) for start, end in itertools.pairwise(starts))
        names = [n for n, _ in self.outputs]
        done = 0
        pending: list[pa.RecordBatch] = []
        with user_failure(self.call):
            for batch in self._loaded.run(items):
                pending.append(batch)
                if len(pending) >= _OUTPUT_ROWS:
                    yield self._rows(keys, firsts[done : done + len(pending)], pending, names)
                    done, pending = done + len(pending), []
            if pending:
                yield self._rows(keys, firsts[done:], pending, names)

    def _rows(
        self, keys: pa.Table, firsts: pa.Array, batches: list[pa.RecordBatch], names: list[str]
    ) -> pa.Table:
        results = pa.Table.from_batches(batches)
        columns = [keys.column(i).take(firsts) for i in range(keys.num_columns)]
        columns += list(results.columns)
        table = pa.Table.from_arrays(columns, names=names)
        return table.cast(pa.schema([pa.field(n, t) for n, t in self.outputs]))


class PythonWindowAgg(_OneSide):
    """Grouped-aggregate pandas UDFs over a window partitioned by the keys, with no order
    and an unbounded frame (Spark's ``WindowInPandasExec`` of such a window): each row
    keeps its ``keep`` columns and gets its group's value of each function, as Spark's
    unbounded window repeats the function's one result over the group's rows."""

    def __init__(
        self,
        call: PythonCall,
        name: str,
        side: GroupSide,
        keep: Sequence[str],
        results: Sequence[tuple[str, pa.DataType]],
    ) -> None:
        # side's keys: the window's partition columns; its values: the functions' arguments
        super().__init__(call, name, side, results)
        self.keep = list(keep)

    def output_schema(self, input_schemas: Sequence[pa.Schema | None]) -> pa.Schema | None:
        return appended(input_schemas[0], self.keep, self.outputs)

    def input_columns(self, wanted: Columns) -> list[Columns]:
        return [frozenset(self.side.columns) | frozenset(self.keep)]

    def finish(self) -> Iterable[pa.Table]:
        assert self._loaded is not None, "open() first"
        if not self._tables[0]:
            return ()
        wanted = list(dict.fromkeys([*self.keep, *self.side.columns]))
        table = pa.concat_tables([t.select(wanted) for t in self._tables[0]])
        return self._called(table)

    def _called(self, table: pa.Table) -> Iterator[pa.Table]:
        assert self._loaded is not None
        named = self.side.named(table)
        count = len(self.side.keys)
        order, starts = group_runs(named.select(list(range(count))))
        values = named.select(list(range(count, named.num_columns))).take(order)
        converted = Converted(self._loaded, values)
        items = (converted.group(start, end) for start, end in itertools.pairwise(starts))
        with user_failure(self.call):
            results = pa.Table.from_batches(list(self._loaded.run(items)))
        # group g's value on each of its rows, the rows in group order
        per_row = pa.array(np.repeat(np.arange(len(starts) - 1), np.diff(starts)))
        for start in range(0, table.num_rows, _OUTPUT_ROWS):
            rows = order.slice(start, _OUTPUT_ROWS)
            groups = per_row.slice(start, _OUTPUT_ROWS)
            out = table.take(rows).select(self.keep)
            for (name, data_type), column in zip(self.outputs, results.columns, strict=True):
                out = out.append_column(name, column.take(groups).cast(data_type))
            yield out
