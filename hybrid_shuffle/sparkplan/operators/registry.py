"""The operator table: Spark class -> the handler that translates it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from hybrid_shuffle.sparkplan.relation import Rel
from hybrid_shuffle.sparkplan.stage import Stage
from hybrid_shuffle.sparkplan.tree import Node

if TYPE_CHECKING:
    from hybrid_shuffle.sparkplan.translate import Translator

__all__ = ["OPERATORS", "Handler", "register_operator"]

Handler = Callable[["Translator", Node, Stage], Rel]

OPERATORS: dict[str, Handler] = {}


def register_operator(*classes: str) -> Callable[[Handler], Handler]:
    def add(fn: Handler) -> Handler:
        for cls in classes:
            OPERATORS[cls] = fn
        return fn

    return add
