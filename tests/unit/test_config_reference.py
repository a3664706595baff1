"""The YAML reference in ``docs/guide/config.md`` is generated from the config dataclasses
and kept in sync: it fails when a field is added without a ``#:`` doc comment, or added
(or changed) without regenerating the file.  No Ray."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hybrid_shuffle import config as config_module
from hybrid_shuffle.config import Config
from hybrid_shuffle.config_reference import (
    UndocumentedFieldError,
    field_docs,
    render,
    yaml_keys,
)

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "guide" / "config.md"
REGENERATE = "python -m hybrid_shuffle.config_reference > docs/guide/config.md"


def test_the_committed_reference_is_what_the_config_dataclasses_render() -> None:
    assert REFERENCE.read_text(encoding="utf-8") == render(), (
        f"docs/guide/config.md is out of date with hybrid_shuffle/config.py; run: {REGENERATE}"
    )


def test_every_key_the_loader_accepts_is_in_the_reference() -> None:
    keys = yaml_keys()
    top = {k for k in keys if "." not in k}
    assert top == set(config_module._TOP)
    for section in config_module._SECTIONS:
        allowed = set(getattr(config_module, f"_{section.upper()}"))
        assert {k.split(".")[1] for k in keys if k.startswith(f"{section}.")} == allowed
    assert {k.split(".")[-1] for k in keys if k.startswith("edges.")} == set(config_module._EDGE)
    assert {k.split(".")[-1] for k in keys if k.startswith("vertices.")} == set(
        config_module._VERTEX
    )


def test_sizes_and_durations_are_typed_as_the_loader_reads_them() -> None:
    text = render()
    assert "| `shuffle.buffer_size` | size (`4 MiB`, `1 GB` or bytes) | `4 MiB` |" in text
    assert "| `failover.backoff` | duration (seconds, or `500 ms`, `2 min`) | `0.5` |" in text
    assert "| `shuffle.wait_timeout` | number | `300.0` |" in text  # seconds only
    # a default computed per machine is named, not this machine's value
    assert "per machine: `hybrid_shuffle.spill_dirs.default_spill_dir()`" in text


@dataclasses.dataclass(frozen=True)
class _Section:
    #: documented
    documented: int = 1
    forgotten: int = 2


@dataclasses.dataclass(frozen=True)
class _Root:
    #: a documented top-level key
    parallelism: int = 2
    #: a section whose second field has no doc comment
    section: _Section = dataclasses.field(default_factory=_Section)


def test_a_field_without_a_doc_comment_fails_the_render_naming_its_key() -> None:
    assert field_docs(_Section) == {"documented": "documented"}
    with pytest.raises(UndocumentedFieldError) as err:
        render(_Root)
    message = str(err.value)
    assert message.startswith("section.forgotten: no '#:' doc comment on the field in _Section")
    assert REGENERATE in message


def test_every_field_of_every_config_dataclass_has_a_doc_comment() -> None:
    render(Config)  # raises UndocumentedFieldError naming the key otherwise
    assert "parallelism" in field_docs(Config)
