"""The operator table: Spark class -> the handler that translates it, and how fully.

``OPERATORS`` maps a Spark operator class to its handler; ``SUPPORT`` says, for the
classes translated only in some cases, which (``"partial"`` and a one-sentence note,
as ``expressions.register`` does for expressions): the generated support table of
``docs/guide/spark-plans.md`` prints it.  A class registered without ``support`` is
translated whole (any input it meets falls back only through its expressions).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from hybrid_shuffle.sparkplan.relation import Rel
from hybrid_shuffle.sparkplan.stage import Stage
from hybrid_shuffle.sparkplan.tree import Node

if TYPE_CHECKING:
    from hybrid_shuffle.sparkplan.translate import Translator

__all__ = ["OPERATORS", "SUPPORT", "Handler", "OperatorSupport", "register_operator"]

Handler = Callable[["Translator", Node, Stage], Rel]

OPERATORS: dict[str, Handler] = {}


@dataclass(frozen=True)
class OperatorSupport:
    """How fully an operator class is translated: ``full`` or ``partial`` (``note``
    says which cases are translated and which fall back)."""

    support: Literal["full", "partial"]
    note: str = ""


#: Spark class -> its support level (every class in ``OPERATORS`` has one)
SUPPORT: dict[str, OperatorSupport] = {}


def register_operator(
    *classes: str, support: Literal["full", "partial"] = "full", note: str = ""
) -> Callable[[Handler], Handler]:
    """Register ``fn`` as the handler of ``classes``; ``support="partial"`` with a
    ``note`` when only some cases are translated (the rest fall back to Spark)."""

    def add(fn: Handler) -> Handler:
        for cls in classes:
            OPERATORS[cls] = fn
            SUPPORT[cls] = OperatorSupport(support, note)
        return fn

    return add
