"""``like``, ``startswith``/``endswith``/``contains``, ``substring``, ``concat``, ``replace``,
``instr``, ``lpad``/``rpad``, and the case, trim and length functions."""

from __future__ import annotations

from hybrid_shuffle.sparkplan.expressions import _exact
from hybrid_shuffle.sparkplan.expressions.core import (
    Scope,
    Sql,
    Unsupported,
    children,
    int_literal,
    register,
)
from hybrid_shuffle.sparkplan.tree import Node
from hybrid_shuffle.sparkplan.types import BOOLEAN, INT, STRING

__all__ = ["ESCAPE_FIELD"]

#: the field a ``Like`` of the plan's JSON gets its escape character in
#: (``physical.mark_like_escapes``: Spark writes ``escapeChar``, a Scala ``Char``, as null)
ESCAPE_FIELD = "_escape"


@register("Like")
def _like(node: Node, scope: Scope) -> Sql:
    """``a LIKE b ESCAPE 'c'``: the escape character is the one ``physical`` read from
    the JVM (the JSON writes it as null); a ``Like`` it could not read falls back.

    A literal pattern without the escape character is matched without ``ESCAPE``: the
    same rows (DuckDB's plain ``LIKE`` has no escape character, and the pattern uses
    none), but DuckDB optimizes only a plain ``LIKE`` (into substring searches): TPC-H
    Q13's ``NOT LIKE '%special%requests%'`` over ``orders`` costs 2.4 times as much with
    ``ESCAPE``."""
    a, pattern = children(node, scope)[:2]
    escape = node.get(ESCAPE_FIELD)
    if not isinstance(escape, str) or len(escape) != 1:
        raise Unsupported("a LIKE whose escape character the plan does not give")
    text = node.children[1].get("value") if node.children[1].cls == "Literal" else None
    if isinstance(text, str) and escape not in text:
        return Sql(f"({a.text} LIKE {pattern.text})", BOOLEAN)
    quoted = escape.replace("'", "''")
    return Sql(f"({a.text} LIKE {pattern.text} ESCAPE '{quoted}')", BOOLEAN)


@register("StartsWith")
def _starts_with(node: Node, scope: Scope) -> Sql:
    a, b = children(node, scope)[:2]
    return Sql(f"starts_with({a.text}, {b.text})", BOOLEAN)


@register("EndsWith")
def _ends_with(node: Node, scope: Scope) -> Sql:
    a, b = children(node, scope)[:2]
    return Sql(f"suffix({a.text}, {b.text})", BOOLEAN)


@register("Contains")
def _contains(node: Node, scope: Scope) -> Sql:
    a, b = children(node, scope)[:2]
    return Sql(f"contains({a.text}, {b.text})", BOOLEAN)


@register("Substring")
def _substring(node: Node, scope: Scope) -> Sql:
    """``UTF8String.substringSQL``: a 0-based start (``pos - 1``; from the end when
    negative; 0 counts as 1), the end ``start + len`` taken before the start is clamped
    to 0, so ``substring('abc', -5, 3)`` is empty; a null ``pos`` or ``len`` is null."""
    s, pos, length = children(node, scope)[:3]
    if s.type.name != "string":
        raise Unsupported(f"substring of {s.type}")
    first = int_literal(node.children[1])
    if first is not None and first >= 0:
        return _substring_from(s, first, length)
    body = (
        "CASE WHEN @.p IS NULL OR @.n IS NULL THEN NULL ELSE "
        "substring(@.s, greatest(@.b, 0) + 1, greatest(@.b + @.n - greatest(@.b, 0), 0)) END"
    )
    start = "CASE WHEN @.p > 0 THEN @.p - 1 WHEN @.p < 0 THEN length(@.s) + @.p ELSE 0 END"
    inner = _exact.let({"s": "@.s", "p": "@.p", "n": "@.n", "b": start}, body)
    bindings = {
        "s": s.text,
        "p": f"CAST({pos.text} AS BIGINT)",
        "n": f"CAST({length.text} AS BIGINT)",
    }
    return Sql(_exact.let(bindings, inner), STRING)


def _substring_from(s: Sql, pos: int, length: Sql) -> Sql:
    """``substring`` at a literal position that is not from the end (``substr(c_phone, 1,
    2)``, the usual form): the start computed here, so DuckDB runs its plain
    ``substring`` per row rather than the general form's start bound per row (a start
    from the end depends on the string's length)."""
    first = max(pos, 1)  # 0 counts as 1; the end is the start plus the length either way
    body = f"CASE WHEN @.n IS NULL THEN NULL ELSE substring(@.s, {first}, greatest(@.n, 0)) END"
    return Sql(_exact.let({"s": s.text, "n": f"CAST({length.text} AS BIGINT)"}, body), STRING)


@register("Concat")
def _concat(node: Node, scope: Scope) -> Sql:
    args = children(node, scope)
    if any(a.type.name != "string" for a in args):
        raise Unsupported("concat of non-strings")
    # ``||`` is null if any side is, as Spark's concat; DuckDB's concat() skips nulls
    return Sql("(" + " || ".join(a.text for a in args) + ")", STRING)


@register("Upper")
def _upper(node: Node, scope: Scope) -> Sql:
    return Sql(f"upper({children(node, scope)[0].text})", STRING)


@register("Lower")
def _lower(node: Node, scope: Scope) -> Sql:
    return Sql(f"lower({children(node, scope)[0].text})", STRING)


@register("Length")
def _length(node: Node, scope: Scope) -> Sql:
    return Sql(f"CAST(length({children(node, scope)[0].text}) AS INTEGER)", INT)


@register("StringTrim")
def _trim(node: Node, scope: Scope) -> Sql:
    args = children(node, scope)
    if len(args) != 1:
        raise Unsupported("trim with characters")
    return Sql(f"trim({args[0].text}, ' ')", STRING)


@register("StringTrimLeft")
def _ltrim(node: Node, scope: Scope) -> Sql:
    args = children(node, scope)
    if len(args) != 1:
        raise Unsupported("ltrim with characters")
    return Sql(f"ltrim({args[0].text}, ' ')", STRING)


@register("StringTrimRight")
def _rtrim(node: Node, scope: Scope) -> Sql:
    args = children(node, scope)
    if len(args) != 1:
        raise Unsupported("rtrim with characters")
    return Sql(f"rtrim({args[0].text}, ' ')", STRING)


@register("StringReplace")
def _replace(node: Node, scope: Scope) -> Sql:
    s, search, by = children(node, scope)[:3]
    # Spark leaves the string as it is for an empty search string
    body = "CASE WHEN @.f = '' THEN @.s ELSE replace(@.s, @.f, @.r) END"
    return Sql(_exact.let({"s": s.text, "f": search.text, "r": by.text}, body), STRING)


@register("StringInstr")
def _instr(node: Node, scope: Scope) -> Sql:
    s, sub = children(node, scope)[:2]
    return Sql(f"CAST(instr({s.text}, {sub.text}) AS INTEGER)", INT)


def _pad(fn: str) -> object:
    def translate(node: Node, scope: Scope) -> Sql:
        s, n, pad = children(node, scope)[:3]
        if s.type.name != "string":
            raise Unsupported(f"{fn} of {s.type}")
        # UTF8String.lpad: nothing for len <= 0; an empty pad only truncates
        body = (
            f"CASE WHEN @.n <= 0 THEN '' WHEN @.p = '' THEN substring(@.s, 1, @.n) "
            f"ELSE {fn}(@.s, @.n, @.p) END"
        )
        return Sql(_exact.let({"s": s.text, "n": n.text, "p": pad.text}, body), STRING)

    return translate


register("StringLPad")(_pad("lpad"))  # type: ignore[arg-type]
register("StringRPad")(_pad("rpad"))  # type: ignore[arg-type]
