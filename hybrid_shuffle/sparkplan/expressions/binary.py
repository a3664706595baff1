"""Binary (``BinaryType``, DuckDB ``BLOB``) functions: ``hex``.

``hex`` of a string or a binary is its bytes (a string's UTF-8 ones) in uppercase hex,
of an integral value the upper-case hex of the value as a ``bigint`` with no leading
zero (a negative one's 64-bit two's complement): DuckDB's ``hex`` gives exactly these.
A binary *literal* is not translated (the plan's JSON prints a Java array's identity,
not its bytes; ``misc.literal``), nor ``unhex``/``unbase64`` (Spark gives null or
skips characters where DuckDB raises an error on malformed input).
"""

from __future__ import annotations

from hybrid_shuffle.sparkplan.expressions.core import (
    Scope,
    Sql,
    Support,
    Unsupported,
    compile_expression,
    register,
)
from hybrid_shuffle.sparkplan.tree import Node
from hybrid_shuffle.sparkplan.types import STRING

__all__: list[str] = []


@register(
    "Hex",
    support=Support.PARTIAL,
    note="of a string, a binary or an integral value; of anything else falls back",
)
def _hex(node: Node, scope: Scope) -> Sql:
    a = compile_expression(node.children[0], scope)
    if a.type.name in ("string", "binary"):
        return Sql(f"hex({a.text})", STRING, a.nullable)
    if a.type.is_integral:
        return Sql(f"hex(CAST({a.text} AS BIGINT))", STRING, a.nullable)
    raise Unsupported(f"hex of {a.type}")
