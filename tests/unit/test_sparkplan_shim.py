"""Which Spark version's names the translation uses (``sparkplan.shim``), and the columns
of types the engine carries without reading (``sparkplan.types.column_type``).  No Ray,
no Spark."""

from __future__ import annotations

import pytest

from hybrid_shuffle.errors import PlanError
from hybrid_shuffle.sparkplan import spark4, spark35
from hybrid_shuffle.sparkplan.expressions import Scope, Sql, Unsupported
from hybrid_shuffle.sparkplan.shim import shim_for
from hybrid_shuffle.sparkplan.tree import Node
from hybrid_shuffle.sparkplan.types import UnsupportedType, column_type, spark_type


@pytest.mark.parametrize(
    ("version", "dataset"),
    [
        ("3.5.0", "org.apache.spark.sql.Dataset"),
        ("3.5.7", "org.apache.spark.sql.Dataset"),
        ("4.0.1", "org.apache.spark.sql.classic.Dataset"),
        ("4.3.0", "org.apache.spark.sql.classic.Dataset"),
        ("4.1.0.dev1", "org.apache.spark.sql.classic.Dataset"),
    ],
)
def test_the_major_version_chooses_the_shim(version: str, dataset: str) -> None:
    assert shim_for(version).dataset == dataset
    assert shim_for(version) in (spark35.SHIM, spark4.SHIM)


@pytest.mark.parametrize("version", ["3.4.1", "2.4.8", "5.0.0", "unknown"])
def test_a_version_without_a_shim_names_the_ones_there_are(version: str) -> None:
    with pytest.raises(PlanError, match=r"Spark 3\.5 and 4\.x"):
        shim_for(version)


def _reference(key: int, name: str) -> Node:
    return Node("AttributeReference", {"exprId": {"id": key}, "name": name})


def test_a_column_of_a_type_without_a_twin_is_carried_but_never_read() -> None:
    collated = column_type("string collate UTF8_LCASE")
    assert collated.opaque and collated.simple == "string collate UTF8_LCASE"
    assert column_type({"type": "array", "elementType": "long"}).name == "array"
    assert not column_type("string").opaque
    with pytest.raises(UnsupportedType):
        spark_type("string collate UTF8_LCASE")
    with pytest.raises(UnsupportedType):
        _ = collated.duck
    scope = Scope(columns={1: Sql("c1", collated), 2: Sql("c2", column_type("long"))})
    # a comparison under a collation is Spark's: the column cannot be read...
    with pytest.raises(Unsupported, match="string collate UTF8_LCASE"):
        scope.attribute(_reference(1, "c"))
    # ...but it can be passed through
    assert scope.carried(_reference(1, "c")).text == "c1"
    assert scope.carried(_reference(2, "n")).text == "c2"
