"""Spark's datetime patterns (``date_format``, ``from_unixtime``, a timestamp cast to a
string) as DuckDB SQL over a local time.

Spark formats with ``DateTimeFormatter`` in the US locale.  The pattern is
translated letter run by letter run into SQL pieces concatenated in order; only
the runs whose output is known exactly are translated (``yyyy``, ``yy``, ``MM``,
``MMM``, ``MMMM``, ``dd``, ``HH``, ``hh``, ``mm``, ``ss``, ``S`` to ``SSSSSS``, ``a``,
``E``..``EEEE``, ``D``, their one-letter forms, quoted text and punctuation); any
other letter (a zone, a week-based field, an era) makes the expression fall back.
A year outside 1..9999 is printed as ``DateTimeFormatter`` prints it only for
``yyyy`` (a sign beyond four digits); the other year runs fall back when the plan
cannot tell the year is in range, so they are used for literal-free columns only
after that check (``format_local`` raises for them).
"""

from __future__ import annotations

from hybrid_shuffle.sparkplan.expressions import _exact
from hybrid_shuffle.sparkplan.expressions.core import Unsupported

__all__ = ["format_local", "pattern_runs", "timestamp_text"]


def pattern_runs(pattern: str) -> list[tuple[str, str]]:
    """The pattern as (kind, text) runs: ``("letter", "yyyy")``, ``("text", "-")``."""
    runs: list[tuple[str, str]] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "'":
            end = pattern.find("'", i + 1)
            if end == i + 1:  # '' is a quote
                runs.append(("text", "'"))
                i += 2
                continue
            if end < 0:
                raise Unsupported(f"the datetime pattern {pattern!r} (an unclosed quote)")
            runs.append(("text", pattern[i + 1 : end].replace("''", "'")))
            i = end + 1
            continue
        if c.isalpha():
            j = i
            while j < len(pattern) and pattern[j] == c:
                j += 1
            runs.append(("letter", pattern[i:j]))
            i = j
            continue
        if c in "[]{}#":
            raise Unsupported(f"the datetime pattern {pattern!r} (optional sections)")
        runs.append(("text", c))
        i += 1
    return runs


def _pad(value: str, width: int) -> str:
    """An integer's digits, zero-padded to ``width`` (DuckDB's ``lpad`` would cut a longer
    one short)."""
    text = f"CAST({value} AS VARCHAR)"
    if width <= 1:
        return text
    return f"(CASE WHEN length({text}) >= {width} THEN {text} ELSE lpad({text}, {width}, '0') END)"


def _year(run: str) -> str:
    """The proleptic year (Spark turns ``y`` into ``u``): 1 BC is 0; ``yyyy`` signs a year
    beyond four digits or before 0 (``SignStyle.EXCEEDS_PAD``), ``y`` and ``yyy`` only
    one before 0 (``NORMAL``), ``yy`` is the last two digits (``ReducedPrinterParser``)."""
    magnitude = _pad("abs(year(@.t))", 2 if run == "yy" else len(run))
    if run == "yyyy":
        return (
            "(CASE WHEN year(@.t) > 9999 THEN '+' WHEN year(@.t) < 0 THEN '-' ELSE '' END"
            f" || {magnitude})"
        )
    if run in ("y", "yyy"):
        return f"(CASE WHEN year(@.t) < 0 THEN '-' ELSE '' END || {magnitude})"
    if run == "yy":
        return _pad("abs(year(@.t)) % 100", 2)
    raise Unsupported(f"the year pattern {run!r}")


def _micros() -> str:
    return "((epoch_us(@.t) % 1000000 + 1000000) % 1000000)"


def _piece(run: str) -> str:
    c, n = run[0], len(run)
    if c in "yu" and c == "y":
        return _year(run)
    simple = {
        "M": "month(@.t)",
        "d": "day(@.t)",
        "H": "hour(@.t)",
        "m": "minute(@.t)",
        "s": "second(@.t)",
        "h": "((hour(@.t) + 11) % 12 + 1)",
        "D": "dayofyear(@.t)",
    }
    if c == "M" and n == 3:
        return "strftime(@.t, '%b')"
    if c == "M" and n == 4:
        return "strftime(@.t, '%B')"
    if c in simple and (n <= 2 or (c == "D" and n == 3)):
        return _pad(simple[c], n)
    if c == "S" and n <= 6:
        return f"left(lpad(CAST({_micros()} AS VARCHAR), 6, '0'), {n})"
    if c == "a" and n == 1:
        return "(CASE WHEN hour(@.t) < 12 THEN 'AM' ELSE 'PM' END)"
    if c == "E" and n <= 3:
        return "strftime(@.t, '%a')"
    if c == "E" and n == 4:
        return "strftime(@.t, '%A')"
    raise Unsupported(f"the datetime pattern letters {run!r}")


def format_local(local_sql: str, pattern: object) -> str:
    """SQL formatting a local time (``TIMESTAMP``) with a Spark pattern (a literal)."""
    if not isinstance(pattern, str):
        raise Unsupported("a datetime pattern that is not a literal")
    pieces = []
    for kind, text in pattern_runs(pattern):
        if kind == "text":
            pieces.append("'" + text.replace("'", "''") + "'")
        else:
            pieces.append(_piece(text))
    if not pieces:
        return "''"
    body = "(" + " || ".join(pieces) + ")"
    return _exact.let({"t": local_sql}, body)


def timestamp_text(local_sql: str) -> str:
    """A local time as Spark casts a timestamp to a string: ``yyyy-MM-dd HH:mm:ss`` and
    the fraction of a second without its trailing zeros (none when it is zero)."""
    fraction = (
        f"(CASE WHEN {_micros()} = 0 THEN '' ELSE "
        f"'.' || rtrim(lpad(CAST({_micros()} AS VARCHAR), 6, '0'), '0') END)"
    )
    body = f"({_year('yyyy')} || strftime(@.t, '-%m-%d %H:%M:%S') || {fraction})"
    return _exact.let({"t": local_sql}, body)
