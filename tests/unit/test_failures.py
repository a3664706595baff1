"""A task's failure becomes one named error on the driver, with the remote traceback."""

from __future__ import annotations

import pickle

from hybrid_shuffle.errors import (
    JobCancelledError,
    JobFailedError,
    ProducerFailedError,
    SchemaMismatchError,
)
from hybrid_shuffle.runtime.failures import (
    RemoteTraceback,
    describe_failure,
    root_cause,
    to_error,
)


def failure_of(error: Exception):  # type: ignore[no-untyped-def]
    try:
        raise error
    except Exception as e:
        return describe_failure(e)


def test_a_users_exception_becomes_job_failed_naming_the_task_type_and_first_line() -> None:
    failure = failure_of(ValueError("no such thing\nsecond line"))
    error = to_error(pickle.loads(pickle.dumps(failure)), "clean[3]")
    assert isinstance(error, JobFailedError)
    assert str(error) == "task 'clean[3]' failed: ValueError: no such thing"
    assert isinstance(error.__cause__, RemoteTraceback)
    assert "raise error" in str(error.__cause__)


def test_the_librarys_own_errors_keep_their_class() -> None:
    failure = failure_of(SchemaMismatchError("operator 'x': column 'v' is double ... string"))
    error = to_error(failure, "x[0]")
    assert isinstance(error, SchemaMismatchError)
    assert str(error).startswith("task 'x[0]': operator 'x'")


def test_a_missing_module_says_where_to_install_it() -> None:
    error = to_error(failure_of(ModuleNotFoundError("No module named 'mylib'")), "m[0]")
    assert "install that module where Ray runs" in str(error)


def test_the_root_cause_is_the_users_error_not_what_it_caused_downstream() -> None:
    user = JobFailedError("task 'a[0]' failed: ValueError: x")
    errors = [JobCancelledError("c"), ProducerFailedError("p"), user]
    assert root_cause(errors) is user
