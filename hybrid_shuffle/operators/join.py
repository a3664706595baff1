"""Hash join of two co-partitioned inputs: input 1 builds, input 0 probes.

Inputs arrive interleaved, in whatever order their producers deliver: probe
batches that come before the build side is complete are kept, then joined
once it is.  Reading both sides as they arrive (rather than the build side
first) is what keeps a diamond-shaped job from deadlocking on pipelined
credits.  Joins use pyarrow's ``Table.join``; key columns appear once (from the
left side), null keys never match, and the output row order is not defined.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pyarrow as pa

from hybrid_shuffle.errors import PlanError
from hybrid_shuffle.operators.base import Operator

__all__ = ["HashJoin"]

_JOIN_TYPES = {"inner": "inner", "left": "left outer"}


class HashJoin(Operator):
    num_inputs = 2

    def __init__(
        self, on: Sequence[str], how: str, name: str, right_suffix: str = "_right"
    ) -> None:
        if how not in _JOIN_TYPES:
            raise PlanError(f"join '{name}': how='{how}' is not supported; use inner or left")
        self.on = list(on)
        self.how = how
        self.name = name
        self.right_suffix = right_suffix

    def open(self) -> None:
        self._build: list[pa.Table] = []
        self._waiting: list[pa.Table] = []
        self._right: pa.Table | None = None
        self._schemas: list[pa.Schema | None] = [None, None]

    def _check(self, schemas: Sequence[pa.Schema | None]) -> None:
        for side, schema in zip(("left", "right"), schemas, strict=True):
            if schema is None:
                continue
            for key in self.on:
                if key not in schema.names:
                    raise PlanError(
                        f"join '{self.name}': key column '{key}' not in the {side} input; "
                        f"columns are: {', '.join(schema.names)}"
                    )
        left, right = schemas
        if left is None or right is None:
            return
        for key in self.on:
            lt, rt = left.field(key).type, right.field(key).type
            if lt != rt:
                raise PlanError(
                    f"join '{self.name}': key column '{key}' is {lt} on the left but {rt} on "
                    "the right; cast one side so both have the same type"
                )

    def process(self, table: pa.Table, input_index: int = 0) -> Iterable[pa.Table]:
        if self._schemas[input_index] is None:
            self._schemas[input_index] = table.schema
            self._check(self._schemas)
        if input_index == 1:
            self._build.append(table)
            return ()
        if self._right is None:
            self._waiting.append(table)
            return ()
        return self._probe(table)

    def end_input(self, input_index: int) -> Iterable[pa.Table]:
        if input_index != 1:
            return ()
        schema = self._schemas[1]
        if self._build:
            self._right = pa.concat_tables(self._build).combine_chunks()
        elif schema is not None:
            self._right = schema.empty_table()
        else:
            self._right = None
        self._build = []
        waiting, self._waiting = self._waiting, []
        out: list[pa.Table] = []
        for table in waiting:
            out.extend(self._probe(table))
        return out

    def _probe(self, table: pa.Table) -> list[pa.Table]:
        if self._right is None:  # the right side produced nothing at all, not even a schema
            return [table] if self.how == "left" else []
        joined = table.join(
            self._right,
            keys=self.on,
            join_type=_JOIN_TYPES[self.how],
            right_suffix=self.right_suffix,
            use_threads=False,
        )
        return [joined]

    def finish(self) -> Iterable[pa.Table]:
        # a left side that arrived entirely after the right one ended was probed already
        return ()

    def output_schema(self, input_schemas: Sequence[pa.Schema | None]) -> pa.Schema | None:
        self._check(input_schemas)
        left, right = input_schemas
        if left is None or right is None:
            return None
        self.open()
        try:
            self._right = right.empty_table()
            return self._probe(left.empty_table())[0].schema
        finally:
            self.open()
