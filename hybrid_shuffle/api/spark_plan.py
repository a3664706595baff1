"""What a job translated from a Spark plan (``Session.sql``, ``from_dataframe``) keeps of
that plan: for ``explain()`` and the run's profile.  The translation fills it
(``sparkplan.translate``); the ``Job`` only holds and reads it."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["SparkPlanInfo"]


@dataclass
class SparkPlanInfo:
    """What a translated job keeps of its Spark plan, for ``explain()``."""

    #: edge name -> the Spark exchange it replaces (``Exchange (11) hashpartitioning(..)``)
    edges: dict[str, str] = field(default_factory=dict)
    #: what ran in Spark and why: ``{"operator": "Generate (4)", "reason": ...}``
    spark_subtrees: list[dict[str, str]] = field(default_factory=list)
    formatted: str = ""
    #: seconds Spark took to plan the query (AQE off), and the translation after it
    spark_seconds: float = 0.0
    translate_seconds: float = 0.0
