"""A module only ``ray.runtime_env`` (``py_modules``) ships to the executors, for
``tests/spark/test_python_udfs.py``: a UDF pickled by reference to it loads only there."""


def tripled(x: int) -> int:
    return x * 3
