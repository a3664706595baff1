"""The user guide in ``docs/guide`` stays whole: every named error has a troubleshooting
entry, and every link of the guide and the README stays inside the repository and
points at a file that exists.  No Ray."""

from __future__ import annotations

import re
from pathlib import Path

import hybrid_shuffle as hs
from hybrid_shuffle import errors

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guide"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def exported_errors() -> list[str]:
    names = [n for n in errors.__all__ if isinstance(getattr(errors, n), type)]
    assert all(issubclass(getattr(errors, n), BaseException) for n in names)
    return names


def test_every_exported_error_has_a_troubleshooting_entry() -> None:
    text = (GUIDE / "troubleshooting.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## (\w+)$", text, flags=re.MULTILINE)
    names = exported_errors()
    assert set(names) <= set(hs.__all__)  # the errors the package exports
    missing = [n for n in names if n not in headings]
    assert not missing, f"docs/guide/troubleshooting.md has no '## {missing[0]}' entry"
    assert len(headings) == len(set(headings))
    for name in names:  # each entry says what it means, a typical message and the fix
        entry = text.split(f"## {name}\n", 1)[1].split("\n## ", 1)[0]
        assert "**Means:**" in entry and "**Fix:**" in entry, name
        if name != "HybridShuffleError":
            assert "**Typical message:**" in entry, name


def test_guide_and_readme_link_only_to_files_inside_the_repository() -> None:
    pages = [*sorted(GUIDE.glob("*.md")), ROOT / "README.md"]
    for page in pages:
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            where = f"{page.relative_to(ROOT)} links to {target}"
            assert "://" not in target and not target.startswith("/"), where
            path = target.split("#", 1)[0]
            if path:
                assert (page.parent / path).resolve().is_relative_to(ROOT), where
                assert (page.parent / path).exists(), where


def test_readme_links_into_every_page_of_the_guide() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for page in ("README.md", "modes.md", "config.md", "troubleshooting.md", "cluster.md"):
        assert f"(docs/guide/{page}" in readme, page
