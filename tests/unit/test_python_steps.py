"""The pieces of the Python steps that need no Spark (issue 35): grouping as Spark groups,
a row-at-a-time ``@udf``'s values as Spark keeps them, loading a function through
PySpark's worker, the bridge that feeds an iterating function, the error a function's
exception becomes, and ``ray.runtime_env`` in YAML."""

from __future__ import annotations

import decimal
import itertools
import math
import pickle
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from pyspark.serializers import CloudPickleSerializer
from pyspark.sql import types as T

import hybrid_shuffle as hs
from hybrid_shuffle.config import load_config
from hybrid_shuffle.operators.python.function import EvalType, PythonCall, PythonUdf
from hybrid_shuffle.operators.python.grouped import GroupSide, PythonGroupedMap
from hybrid_shuffle.operators.python.groups import group_runs
from hybrid_shuffle.operators.python.iterator import IteratorBridge, PythonMapIter
from hybrid_shuffle.operators.python.scalar import PythonEval
from hybrid_shuffle.operators.python.values import java_string, spark_array
from hybrid_shuffle.runtime.failures import describe_failure, to_error

RUNNER = (
    ("spark.sql.session.timeZone", "UTC"),
    ("spark.sql.legacy.execution.pandas.groupedMap.assignColumnsByName", "true"),
    ("spark.sql.execution.pandas.convertToArrowArraySafely", "false"),
)


def _call(
    eval_type: int, func: Any, return_type: Any, offsets: list[int], rows: int = 4
) -> PythonCall:
    command = CloudPickleSerializer().dumps((func, return_type))
    udf = PythonUdf(func.__qualname__, (command,), tuple(offsets))
    return PythonCall(eval_type, (udf,), RUNNER, rows)


# -- grouping ------------------------------------------------------------------------------


def _groups(keys: pa.Table) -> list[list[int]]:
    order, starts = group_runs(keys)
    rows = order.to_pylist()
    return sorted(sorted(rows[a:b]) for a, b in itertools.pairwise(starts))


def test_nulls_group_together_and_nans_group_together() -> None:
    keys = pa.table({"k": pa.array([1.0, None, math.nan, 1.0, None, math.nan, -0.0, 0.0])})
    assert _groups(keys) == [[0, 3], [1, 4], [2, 5], [6, 7]]


def test_groups_of_two_keys_and_of_no_key() -> None:
    keys = pa.table({"a": [1, 1, 2, 2, 1], "b": ["x", "y", "x", "x", "x"]})
    assert _groups(keys) == [[0, 4], [1], [2, 3]]
    assert _groups(pa.table({"a": [1, 2, 3]}).select([])) == [[0, 1, 2]]
    order, starts = group_runs(pa.table({"a": pa.array([], pa.int64())}))
    assert len(order) == 0 and starts.tolist() == [0]


# -- a row-at-a-time @udf's values ---------------------------------------------------------


def test_a_value_of_another_type_is_null_and_ints_narrow_as_java_does() -> None:
    assert spark_array([1, 2.5, True, None], T.LongType()).to_pylist() == [1, None, None, None]
    assert spark_array([1.5, 3, None], T.DoubleType()).to_pylist() == [1.5, None, None]
    assert spark_array([2**31, -1, 300], T.IntegerType()).to_pylist() == [-(2**31), -1, 300]
    assert spark_array([300], T.ByteType()).to_pylist() == [44]
    assert spark_array([True, 1], T.BooleanType()).to_pylist() == [True, None]
    assert spark_array([[1, "a", None], "no"], T.ArrayType(T.LongType())).to_pylist() == [
        [1, None, None],
        None,
    ]


def test_a_string_result_is_javas_to_string_of_the_value() -> None:
    got = spark_array(["s", 7, 1.0, 1e20, True, [1, 2]], T.StringType()).to_pylist()
    assert got == ["s", "7", "1.0", "1.0E20", "true", "[1, 2]"]
    assert java_string(-2.5e-7) == "-2.5E-7" and java_string(math.inf) == "Infinity"


def test_a_decimal_result_rounds_half_up_to_its_scale() -> None:
    got = spark_array([decimal.Decimal("1.005"), decimal.Decimal("2")], T.DecimalType(5, 2))
    assert got.to_pylist() == [decimal.Decimal("1.01"), decimal.Decimal("2.00")]
    with pytest.raises(ArithmeticError, match="needs more than 5 digits"):
        spark_array([decimal.Decimal("12345.6")], T.DecimalType(5, 2))


# -- steps over PySpark's worker -------------------------------------------------------------


def _doubled(v: pd.Series) -> pd.Series:
    return v * 2


def _sizes(v: pd.Series) -> pd.Series:
    return pd.Series([len(v)] * len(v))


def test_a_scalar_pandas_udf_sees_batches_of_at_most_its_batch_rows() -> None:
    call = _call(EvalType.SCALAR_PANDAS, _sizes, T.LongType(), [0], rows=4)
    step = PythonEval(call, "p", ["k"], ["v"], ['"long"'], [("out", pa.int64())])
    step.open()
    out = pa.concat_tables(step.process(pa.table({"k": list("abcdefghij"), "v": range(10)})))
    assert out.column("out").to_pylist() == [4] * 8 + [2] * 2
    assert out.column("k").to_pylist() == list("abcdefghij")


def test_an_iterating_function_is_called_once_and_fed_batch_by_batch() -> None:
    def running(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        total = 0  # one call: its total runs on over both pushes
        for frame in batches:
            total += len(frame)
            yield pd.DataFrame({"rows": [total]})
        yield pd.DataFrame({"rows": [-1]})  # after its input ended

    schema = T.StructType([T.StructField("rows", T.LongType())])
    step = PythonMapIter(
        _call(EvalType.MAP_PANDAS_ITER, running, schema, [0], rows=3),
        "m",
        [("c1", "v")],
        [("c9", pa.int64())],
    )
    step.open()
    first = step.process(pa.table({"c1": range(5)}))  # two batches: 3 and 2 rows
    second = step.process(pa.table({"c1": range(4)}))
    last = list(step.finish())
    step.close()
    assert [t.column("c9").to_pylist() for t in first] == [[3], [5]]
    assert [t.column("c9").to_pylist() for t in second] == [[8], [9]]
    assert [t.column("c9").to_pylist() for t in last] == [[-1]]


def test_a_bridge_carries_the_functions_error_and_stops_when_aborted() -> None:
    def failing(items: Iterator[int]) -> Iterator[int]:
        for item in items:
            if item == 2:
                raise KeyError("two")
            yield item * 10

    bridge = IteratorBridge(failing, "t")
    assert bridge.push(1) == [10]
    with pytest.raises(KeyError, match="two"):
        bridge.push(2)
    waiting = IteratorBridge(lambda items: (i for i in items), "w")
    waiting.abort()  # the function waits for input: it ends, and nothing hangs
    waiting.abort()


def _by_group(key: tuple[Any, ...], frame: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"k": [key[0]], "n": [len(frame)], "dtype": [str(frame["v"].dtype)]})


def test_a_grouped_map_sees_each_group_whole_with_its_own_dtype() -> None:
    side = GroupSide([("c1", "k")], [("c1", "k"), ("c2", "v")])
    schema = T.StructType(
        [
            T.StructField("k", T.LongType()),
            T.StructField("n", T.LongType()),
            T.StructField("dtype", T.StringType()),
        ]
    )
    call = _call(EvalType.GROUPED_MAP_PANDAS, _by_group, schema, side.offsets())
    step = PythonGroupedMap(
        call, "g", side, [("o1", pa.int64()), ("o2", pa.int64()), ("o3", pa.string())]
    )
    step.open()
    step.process(pa.table({"c1": [1, 2, 1], "c2": pa.array([5, None, 6], pa.int64())}))
    step.process(pa.table({"c1": [2, 3], "c2": pa.array([7, 8], pa.int64())}))
    out = pa.concat_tables(step.finish())
    got = sorted(zip(*(c.to_pylist() for c in out.columns), strict=True))
    # group 2 holds a null: float64 in pandas, as its own Arrow batch converts in Spark
    assert got == [(1, 2, "int64"), (2, 2, "float64"), (3, 1, "int64")]


def _broken(v: pd.Series) -> pd.Series:
    raise ValueError(f"cannot take {len(v)} rows")


def test_a_functions_exception_is_one_sentence_with_its_own_frames() -> None:
    call = _call(EvalType.SCALAR_PANDAS, _broken, T.LongType(), [0])
    step = PythonEval(call, "p", [], ["v"], ['"long"'], [("out", pa.int64())])
    step.open()
    with pytest.raises(hs.PythonFunctionError) as caught:
        step.process(pa.table({"v": [1, 2]}))
    failure = describe_failure(caught.value)
    assert pickle.loads(pickle.dumps(caught.value)).function == "_broken"
    error = to_error(failure, "stage_1->python_3[0]")
    assert isinstance(error, hs.JobFailedError)
    assert str(error) == (
        "task 'stage_1->python_3[0]': the Python function '_broken' raised ValueError: "
        "cannot take 2 rows; the same rows fail the same way, so the job is not retried"
    )
    cause = str(error.__cause__)
    assert "raise ValueError" in cause and "pyspark" not in cause and "hybrid_shuffle" not in cause


# -- ray.runtime_env -------------------------------------------------------------------------


def test_runtime_env_is_a_mapping_of_rays_fields() -> None:
    config = load_config(
        {"ray": {"runtime_env": {"py_modules": ["./udfs"], "env_vars": {"A": "1"}}}}
    )
    assert dict(config.ray.runtime_env or {}) == {"py_modules": ["./udfs"], "env_vars": {"A": "1"}}
    with pytest.raises(hs.ConfigError, match=r"ray\.runtime_env\.pip_packages: .*pip"):
        load_config({"ray": {"runtime_env": {"pip_packages": ["x"]}}})
    with pytest.raises(hs.ConfigError, match=r"ray\.runtime_env: must be a mapping"):
        load_config({"ray": {"runtime_env": ["py_modules"]}})
