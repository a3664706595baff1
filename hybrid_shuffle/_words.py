"""Counted nouns in messages: ``1 slot``, ``2 slots``, never ``1 slots``."""

from __future__ import annotations

__all__ = ["plural"]


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    """``singular`` when ``count`` is 1, else ``plural_form`` (default: ``singular + "s"``).
    Only the noun: the caller formats the number (``f"{n:,} {plural(n, 'row')}"``)."""
    if count == 1:
        return singular
    return plural_form if plural_form is not None else singular + "s"
