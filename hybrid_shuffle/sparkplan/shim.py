"""What differs between the Spark versions the translation reads, and which applies.

A ``Shim`` holds names only: the JVM class that plans a logical plan afresh and the
attribute of PySpark's exceptions that holds Spark's message.  ``spark35`` and
``spark4`` each fill one; ``shim_for`` picks it by the major version (``spark.version``
for the JVM, ``pyspark.__version__`` for an exception), so no other module of the
translation asks which Spark it runs on.  Everything else the translation reads (the
plan's ``toJSON``, the formatted explain, the operators' methods) is the same in both.
A difference in the plan's content (a class one version has and the other has not) is
handled where that class is translated, keyed on the class, not here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hybrid_shuffle.errors import PlanError

__all__ = ["Shim", "shim_for"]


@dataclass(frozen=True)
class Shim:
    """The names one Spark version gives what the translation calls."""

    #: the versions it covers, for messages: ``3.5``, ``4.x``
    versions: str
    #: the JVM class whose static ``ofRows(session, logicalPlan)`` makes a Dataset of a
    #: logical plan (Spark 4 moved the classic Dataset into ``sql.classic``)
    dataset: str
    #: the attribute of a PySpark ``CapturedException`` holding Spark's message alone
    #: (without the JVM stack trace ``str()`` may append)
    error_description: str

    def dataset_of_rows(self, jvm: Any, session: Any, logical: Any) -> Any:
        """A fresh JVM Dataset of the logical plan ``logical`` in the JVM session
        ``session`` (through the py4j view ``jvm``), so it is planned again under that
        session's settings at this moment."""
        found: Any = jvm
        for part in self.dataset.split("."):
            found = getattr(found, part)
        return found.ofRows(session, logical)


def shim_for(version: str) -> Shim:
    """The shim of Spark ``version`` (``3.5.7``, ``4.0.1``); a ``PlanError`` naming the
    versions there are shims for when there is none."""
    from hybrid_shuffle.sparkplan import spark4, spark35

    parts = version.split(".")
    try:
        major, minor = int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        major, minor = -1, -1
    if major == 3 and minor >= 5:
        return spark35.SHIM
    if major == 4:
        return spark4.SHIM
    raise PlanError(
        f"Spark {version} has no plan translation: Session.sql and from_dataframe read "
        f"the plans of Spark {spark35.SHIM.versions} and {spark4.SHIM.versions}; run one "
        "of those, or build the pipeline with the engine's own Stream API"
    )
