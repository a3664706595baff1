"""The YAML reference (``docs/guide/config.md``), generated from the config dataclasses.

Why generated: a hand-written reference drifts from ``hybrid_shuffle.config`` the day a
key is added.  Here every key, its type and its default come from the frozen dataclasses
themselves, and what it does from the field's ``#:`` doc comment (the comment lines right
above the field, as Sphinx reads them).  A field with no ``#:`` comment cannot be
rendered: ``render`` raises ``UndocumentedFieldError`` naming its key path, so
``tests/unit/test_config_reference.py`` fails until the new key is documented and the
file regenerated with::

    python -m hybrid_shuffle.config_reference > docs/guide/config.md

Types are the YAML a user writes: a size (``4 MiB``) or a duration (``0.5 s``) where
the loader accepts one.  Which keys accept those is not listed by hand either: the
renderer asks ``load_config`` (a key is a size if ``1 GiB`` or ``1 MiB`` validates
there, a duration if ``1 s`` does), so the reference cannot promise what the loader
refuses.  A default made by a function at run time (the per-user spill directory) is
shown as that function, not as this machine's value.  Pure Python, no Ray.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import sys
import textwrap
import typing
from collections.abc import Iterator, Mapping
from typing import Any

from hybrid_shuffle.config import Config, load_config
from hybrid_shuffle.errors import ConfigError
from hybrid_shuffle.sizes import format_size

__all__ = ["UndocumentedFieldError", "field_docs", "main", "render", "yaml_keys"]

_COMMAND = "python -m hybrid_shuffle.config_reference > docs/guide/config.md"


class UndocumentedFieldError(ValueError):
    """A config dataclass field has no ``#:`` doc comment, so the reference cannot say
    what it does."""


def field_docs(cls: type) -> dict[str, str]:
    """Field name -> its ``#:`` doc comment (joined into one paragraph), for the fields of
    the dataclass ``cls`` that have one, read from ``cls``'s source."""
    source = textwrap.dedent(inspect.getsource(cls))
    lines = source.splitlines()
    tree = ast.parse(source)
    node = tree.body[0]
    assert isinstance(node, ast.ClassDef)
    docs: dict[str, str] = {}
    for stmt in node.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        comment: list[str] = []
        row = stmt.lineno - 2  # the line above the field (lineno is 1-based)
        while row >= 0 and lines[row].strip().startswith("#:"):
            comment.insert(0, lines[row].strip()[2:].strip())
            row -= 1
        if comment:
            docs[stmt.target.id] = _markdown(" ".join(comment))
    return docs


def _markdown(text: str) -> str:
    """reST literals (````x````) as Markdown code (```x```), whitespace collapsed."""
    return " ".join(text.replace("``", "`").split())


@dataclasses.dataclass(frozen=True)
class _Key:
    """One row of the reference."""

    path: str
    yaml_type: str
    default: str
    doc: str


@dataclasses.dataclass(frozen=True)
class _Section:
    path: str
    #: the section's class docstring, else the doc comment of the field holding it
    doc: str
    keys: tuple[_Key, ...]


def _fields(cls: type) -> list[dataclasses.Field[Any]]:
    """The fields a YAML file can set (``init=False`` ones are bookkeeping)."""
    return [f for f in dataclasses.fields(cls) if f.init]


def _documented(cls: type, prefix: str) -> dict[str, str]:
    docs = field_docs(cls)
    missing = [f"{prefix}{f.name}" for f in _fields(cls) if f.name not in docs]
    if missing:
        raise UndocumentedFieldError(
            f"{', '.join(missing)}: no '#:' doc comment on the field in {cls.__qualname__}; "
            f"add one saying what it does, then run: {_COMMAND}"
        )
    return docs


def _section_class(hint: Any) -> tuple[type, str] | None:
    """(the dataclass, what follows the field's name in its keys' paths) for a section
    field: a dataclass (``.``), a ``Mapping[str, <dataclass>]`` (``edges``, ``vertices``:
    ``.NAME.``) or a ``tuple[<dataclass>, ...]`` (``edge_rules``: ``[i].``); else None."""
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return hint, "."
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Mapping and len(args) == 2 and _is_class(args[1]):
        return args[1], ".NAME."
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis and _is_class(args[0]):
        return args[0], "[i]."
    return None


def _is_class(hint: Any) -> bool:
    return dataclasses.is_dataclass(hint) and isinstance(hint, type)


def _probe(path: str, value: Any) -> bool:
    """``value`` validates at the key ``path`` (``shuffle.buffer_size``, ``edges.*.mode``)."""
    raw: Any = value
    for part in reversed(path.split(".")):
        raw = {"_" if part == "NAME" else part: raw}
    try:
        load_config(raw)
    except ConfigError:
        return False
    return True


_SCALARS = {
    "int": "integer",
    "float": "number",
    "str": "string",
    "bool": "boolean",
    "None": "null",
    "Mapping[str, str]": "mapping of strings",
    "Mapping[str, Any]": "mapping (Ray's `runtime_env` fields)",
    "tuple[str, ...]": "list of strings",
}


def _docstring(cls: type) -> str | None:
    """``cls``'s own docstring (not the signature ``dataclass`` makes up without one)."""
    doc = cls.__doc__
    if not doc or doc.startswith(f"{cls.__name__}("):
        return None
    return inspect.cleandoc(doc)


def _yaml_type(path: str, annotation: str) -> str:
    parts = [p.strip() for p in annotation.split("|")]
    nullable = " or null" if "None" in parts else ""
    if "int" in parts and (_probe(path, "1 GiB") or _probe(path, "1 MiB")):
        return f"size (`4 MiB`, `1 GB` or bytes){nullable}"
    if "float" in parts and _probe(path, "1 s"):
        return f"duration (seconds, or `500 ms`, `2 min`){nullable}"
    return " or ".join(_SCALARS.get(p, f"`{p}`") for p in parts)


def _default(f: dataclasses.Field[Any], yaml_type: str) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        factory = f.default_factory
        name = getattr(factory, "__name__", "")
        value = factory()
        if not isinstance(value, Mapping) and name != "<lambda>":
            return f"per machine: `{factory.__module__}.{name}()`"
    else:
        return "required"
    if value is None:
        return "null"
    if isinstance(value, Mapping):
        return "`{}`" if not value else f"`{dict(value)}`"
    if yaml_type.startswith("size") and isinstance(value, int):
        return f"`{format_size(value)}`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def _keys(cls: type, prefix: str) -> tuple[_Key, ...]:
    docs = _documented(cls, prefix)
    out = []
    hints = typing.get_type_hints(cls)
    for f in _fields(cls):
        path = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(hints[f.name]):  # a section of its own, below
            out.append(_Key(path, "mapping", "see below", docs[f.name]))
            continue
        annotation = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
        yaml_type = _yaml_type(path, annotation)
        out.append(_Key(path, yaml_type, _default(f, yaml_type), docs[f.name]))
    return tuple(out)


def _sections(root: type = Config) -> Iterator[_Section]:
    """The top-level keys first, then one section per nested dataclass, in field order."""
    docs = _documented(root, "")
    hints = typing.get_type_hints(root)
    top: list[_Key] = []
    nested: list[_Section] = []
    for f in _fields(root):
        section = _section_class(hints[f.name])
        if section is None:
            annotation = f.type if isinstance(f.type, str) else str(f.type)
            yaml_type = _yaml_type(f.name, annotation)
            top.append(_Key(f.name, yaml_type, _default(f, yaml_type), docs[f.name]))
            continue
        cls, after = section
        prefix = f"{f.name}{after}"
        doc = _markdown(_docstring(cls) or docs[f.name])
        kind = "list of mappings" if after == "[i]." else "mapping"
        top.append(_Key(f.name, kind, "see below", docs[f.name]))
        nested.extend(_nested(cls, prefix, doc))
    yield _Section("", "", tuple(top))
    yield from nested


def _nested(cls: type, prefix: str, doc: str) -> list[_Section]:
    """A section, then one per dataclass field inside it (``failover.speculation``)."""
    hints = typing.get_type_hints(cls)
    docs = _documented(cls, prefix)
    inner = [
        (f, hints[f.name])
        for f in _fields(cls)
        if dataclasses.is_dataclass(hints[f.name]) and isinstance(hints[f.name], type)
    ]
    below: list[_Section] = []
    for f, hint in inner:
        inner_doc = _markdown(_docstring(hint) or docs[f.name])
        below.extend(_nested(hint, f"{prefix}{f.name}.", inner_doc))
    return [_Section(prefix.rstrip("."), doc, _keys(cls, prefix)), *below]


def yaml_keys(root: type = Config) -> list[str]:
    """Every key path the reference documents (``shuffle.buffer_size``, ``edges.NAME.mode``)."""
    return [key.path for section in _sections(root) for key in section.keys]


def _table(keys: tuple[_Key, ...]) -> list[str]:
    rows = ["| key | type | default | what it does |", "|---|---|---|---|"]
    for k in keys:
        doc = k.doc.replace("|", "\\|")  # a pipe in a doc comment would end the cell
        rows.append(f"| `{k.path}` | {k.yaml_type} | {k.default} | {doc} |")
    return rows


def render(root: type = Config) -> str:
    """The whole reference as Markdown (what ``docs/guide/config.md`` holds)."""
    out = [
        "# YAML reference",
        "",
        "<!-- Generated from hybrid_shuffle/config.py; do not edit by hand. Regenerate:",
        f"     {_COMMAND}",
        "     tests/unit/test_config_reference.py fails when this file and the config",
        "     dataclasses differ. -->",
        "",
        "Every key a job config file may hold, its type, its default and what it does.",
        "The file is validated once, at load (`hybrid-shuffle validate FILE`); a mistake",
        "is one sentence naming the key path. Sizes are bytes or a string with a unit",
        "(`4 MiB`, `512MiB`, `1 GB`). YAML wins over code for `edges:` and `vertices:`.",
        "Back to the [user guide](README.md).",
    ]
    for section in _sections(root):
        out.append("")
        if section.path:
            out += [f"## `{section.path}`", "", section.doc, ""]
        else:
            out += ["## Top level", ""]
        out += _table(section.keys)
    return "\n".join(out) + "\n"


def main() -> int:
    """Print the reference (``python -m hybrid_shuffle.config_reference``)."""
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
