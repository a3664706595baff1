"""Binary (``BinaryType``, DuckDB ``BLOB``) functions: ``hex``, ``base64``.

``hex`` of a string or a binary is its bytes (a string's UTF-8 ones) in uppercase hex,
of an integral value the upper-case hex of the value as a ``bigint`` with no leading
zero (a negative one's 64-bit two's complement): DuckDB's ``hex`` gives exactly these.
``base64`` is Spark 3.5's ``StaticInvoke`` of ``Base64.encode``; under
``spark.sql.legacy.chunkBase64String.enabled`` (its second argument, true by default in
3.5) Java's MIME encoder breaks the text into lines of 76 characters joined by CRLF,
with none at the end: the same chunks are cut from DuckDB's ``to_base64``.
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


@register(
    "StaticInvoke",
    support=Support.PARTIAL,
    note="Base64.encode (base64, chunked into MIME lines as Spark 3.5 does by default); "
    "any other static method falls back",
)
def _static_invoke(node: Node, scope: Scope) -> Sql:
    target = f"{node.get('staticObject')}.{node.get('functionName')}"
    if target != "org.apache.spark.sql.catalyst.expressions.Base64.encode":
        raise Unsupported(f"the static method {target}")
    value, chunked = node.children
    if chunked.cls != "Literal" or chunked.get("dataType") != "boolean":
        raise Unsupported("base64 with a chunking flag that is not a literal")
    a = compile_expression(value, scope)
    if a.type.name != "binary":
        raise Unsupported(f"base64 of {a.type}")
    text = f"to_base64({a.text})"
    if str(chunked.get("value")).lower() == "true":
        text = (
            f"(SELECT array_to_string([substr(e, i * 76 + 1, 76) FOR i IN "
            f"range(CAST(ceil(length(e) / 76) AS BIGINT))], chr(13) || chr(10)) "
            f"FROM (SELECT {text} AS e))"
        )
    return Sql(text, STRING, a.nullable)
