"""A Python function of a Spark plan, as Spark ships it, loaded with PySpark's own worker.

Spark sends a Python worker its functions as a byte protocol: per function the
offsets of its arguments, then its chained commands, each a pickle of ``(function,
return type)`` (``PythonUDFRunner.writeUDFs``), after the runner's settings
(session time zone, ``assignColumnsByName``) for the Arrow-based kinds.
``PythonCall.load`` writes that protocol into a buffer and reads it back with
``pyspark.worker.read_udfs``, the function Spark's own workers call: so the
engine runs each function through exactly PySpark's wrappers (the return-type
checks, ``StopIteration`` handling, a grouped map's key/value split) and converts
Arrow to pandas and back with PySpark's own serializer (``arrow_to_pandas``,
``_create_batch``), never with a copy of their rules.  Two parts are left out:
the serializer's Arrow stream framing (batches are handed over in memory), and
for a row-at-a-time ``@udf`` the worker's per-row loop, whose few lines
(``wrap_udf``: the function, then ``toInternal``) ``LoadedCall.run_rows`` does
with ``map`` at an eighth of the cost.

The protocol is PySpark 3.5's (``SUPPORTED``); another PySpark's worker reads
another protocol, and the translation leaves these operators to Spark there.

An exception the user's function raises is a ``PythonFunctionError`` naming the
function (its ``__qualname__``), the Python exception's type and message, with
only the traceback's frames in the user's own file: fatal, since the same rows
fail the same way (attempts 1).
"""

from __future__ import annotations

import contextlib
import io
import pickle
import struct
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from hybrid_shuffle.errors import PythonFunctionError

__all__ = [
    "SUPPORTED",
    "EvalType",
    "LoadedCall",
    "PythonCall",
    "PythonUdf",
    "supported_pyspark",
    "user_failure",
]

#: the PySpark releases whose worker protocol ``PythonCall.load`` writes
SUPPORTED = ("3.5.",)


class EvalType:
    """``PythonEvalType``'s numbers (Spark's wire values, the same in every release)."""

    BATCHED = 100  # @udf, row at a time (BatchEvalPythonExec)
    ARROW_BATCHED = 101  # @udf with Arrow optimization (ArrowEvalPythonExec)
    SCALAR_PANDAS = 200  # @pandas_udf Series -> Series
    GROUPED_MAP_PANDAS = 201  # groupBy().applyInPandas
    GROUPED_AGG_PANDAS = 202  # @pandas_udf Series -> scalar, in groupBy().agg()
    SCALAR_PANDAS_ITER = 204  # @pandas_udf Iterator[Series] -> Iterator[Series]
    MAP_PANDAS_ITER = 205  # mapInPandas
    COGROUPED_MAP_PANDAS = 206  # groupBy().cogroup().applyInPandas
    MAP_ARROW_ITER = 207  # mapInArrow

    #: the kinds whose runner sends its settings first (``read_udfs``)
    ARROW = frozenset({101, 200, 201, 202, 204, 205, 206, 207})


def supported_pyspark() -> str | None:
    """``None`` if this PySpark's worker protocol is the one ``load`` writes, else why not."""
    import pyspark

    version = str(pyspark.__version__)
    if version.startswith(SUPPORTED):
        return None
    return (
        f"PySpark {version}'s Python workers read another protocol than PySpark 3.5's, the "
        "one the engine runs functions with"
    )


@dataclass(frozen=True)
class PythonUdf:
    """One function of a Python operator: its chained commands (innermost first, as
    Spark chains ``f(g(x))``) and its arguments' positions in the batch it reads."""

    #: the function's ``__qualname__`` (of the outermost of a chain), for messages
    name: str
    commands: tuple[bytes, ...]
    arg_offsets: tuple[int, ...]


@dataclass(frozen=True)
class PythonCall:
    """What a Python operator runs: picklable, built on the driver from Spark's plan."""

    eval_type: int
    udfs: tuple[PythonUdf, ...]
    #: the Arrow runner's settings, as Spark sends them (``ArrowUtils.getPythonRunnerConfMap``)
    runner_conf: tuple[tuple[str, str], ...]
    #: ``spark.sql.execution.arrow.maxRecordsPerBatch``: the most rows a function sees at once
    batch_rows: int

    @property
    def names(self) -> str:
        return ", ".join(f"'{u.name}'" for u in self.udfs)

    def load(self) -> LoadedCall:
        """The call as PySpark's worker sets it up (inside the executor)."""
        from pyspark import worker
        from pyspark.serializers import CPickleSerializer

        out = io.BytesIO()
        if self.eval_type in EvalType.ARROW:
            _int(out, len(self.runner_conf))
            for key, value in self.runner_conf:
                _text(out, key)
                _text(out, value)
        _int(out, len(self.udfs))
        for udf in self.udfs:
            _int(out, len(udf.arg_offsets))
            for offset in udf.arg_offsets:
                _int(out, offset)
            _int(out, len(udf.commands))
            for command in udf.commands:
                _int(out, len(command))
                out.write(command)
        out.seek(0)
        with user_failure(self):
            func, _, _, serializer = worker.read_udfs(  # type: ignore[no-untyped-call]
                CPickleSerializer(), out, self.eval_type
            )
        chains = [[pickle.loads(c) for c in u.commands] for u in self.udfs]
        return LoadedCall(
            self,
            func,
            serializer,
            [chain[-1][1] for chain in chains],  # the outermost function's type is the result's
            [_composed([f for f, _ in chain]) for chain in chains],
        )


def _composed(functions: list[Callable[..., Any]]) -> Callable[..., Any]:
    """Chained functions (innermost first) as one function."""
    if len(functions) == 1:
        return functions[0]

    def chained(*args: Any) -> Any:
        value = functions[0](*args)
        for function in functions[1:]:
            value = function(value)
        return value

    return chained


def _int(out: io.BytesIO, value: int) -> None:
    out.write(struct.pack("!i", value))


def _text(out: io.BytesIO, value: str) -> None:
    data = value.encode("utf-8")
    _int(out, len(data))
    out.write(data)


class LoadedCall:
    """A loaded call: ``run`` feeds it items (what PySpark's serializer would have read
    off Spark's stream) and yields its results as Arrow batches."""

    def __init__(
        self,
        call: PythonCall,
        func: Callable[..., Any],
        serializer: Any,
        return_types: list[Any],
        functions: list[Callable[..., Any]],
    ) -> None:
        self.call = call
        self._func = func
        self._serializer = serializer
        #: each function of the call, its chain composed (what ``run_rows`` maps)
        self._functions = functions
        #: each function's declared return type (``pyspark.sql.types``)
        self.return_types = return_types

    def pandas(self, column: pa.ChunkedArray | pa.Array) -> Any:
        """An Arrow column as the function receives it (a Series, or a DataFrame for a
        struct where PySpark gives one), named as the column is."""
        if isinstance(column, pa.Array):
            column = pa.chunked_array([column])
        return self._serializer.arrow_to_pandas(column)

    def run(self, items: Iterable[Any]) -> Iterator[pa.RecordBatch]:
        """The function over ``items``, each result as Spark's worker would send it."""
        with user_failure(self.call):
            for result in self._func(None, iter(items)):
                yield self.to_arrow(result)

    def run_rows(self, arguments: list[list[Any]], rows: int) -> list[list[Any]]:
        """Row-at-a-time functions (``@udf``) over ``arguments`` (one list of values per
        argument column): per function its results, in Spark's internal form.

        PySpark's worker wraps each function in per-row Python of its own (``mapper``,
        ``wrap_udf``, ``fail_on_stopiteration``: 2 us a row, eight times the call of a
        small function); here each function is mapped over its argument columns
        directly, and its results made internal with ``toInternal`` as ``wrap_udf`` does.
        A ``StopIteration`` the function raises ends ``map`` early: then the rows go
        through PySpark's own loop, which raises its error for it."""
        out: list[list[Any]] = []
        with user_failure(self.call):
            for udf, function, return_type in zip(
                self.call.udfs, self._functions, self.return_types, strict=True
            ):
                columns = [arguments[o] for o in udf.arg_offsets]
                values = (
                    list(map(function, *columns))
                    if columns
                    else [function() for _ in range(rows)]  # a function of no argument
                )
                if len(values) != rows:  # a StopIteration: PySpark's loop names it
                    list(
                        self._func(None, zip(*arguments, strict=True) if arguments else [()] * rows)
                    )
                    raise RuntimeError("the function stopped iterating before its last row")
                if return_type.needConversion():
                    values = list(map(return_type.toInternal, values))
                out.append(values)
        return out

    def to_arrow(self, result: Any) -> pa.RecordBatch:
        if self.call.eval_type == EvalType.MAP_ARROW_ITER:  # wrapped as PySpark sends it
            batch, _ = result
            struct = pa.StructArray.from_arrays(batch.columns, fields=list(batch.schema))
            return pa.RecordBatch.from_arrays([struct], ["_0"])
        return self._serializer._create_batch(result)


@contextlib.contextmanager
def user_failure(call: PythonCall) -> Iterator[None]:
    """Inside: an exception the user's function raises (or PySpark raises on what it
    returned) becomes a ``PythonFunctionError`` naming the function."""
    try:
        yield
    except PythonFunctionError:
        raise
    except Exception as e:
        raise _failure(call, e) from None


def _failure(call: PythonCall, error: Exception) -> PythonFunctionError:
    files = _user_files(call)
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename in files]
    lines = traceback.format_list(frames) if frames else []
    lines += traceback.format_exception_only(type(error), error)
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    kind = type(error).__name__
    if isinstance(error, ModuleNotFoundError):
        text = (
            f"the Python function {call.names} needs a module the executor cannot import "
            f"({message}); ship it with ray.runtime_env (py_modules, working_dir or pip)"
        )
    else:
        text = (
            f"the Python function {call.names} raised {kind}"
            + (f": {message}" if message else "")
            + "; the same rows fail the same way, so the job is not retried"
        )
    return PythonFunctionError(
        text,
        function=call.udfs[0].name if call.udfs else "?",
        error_type=kind,
        user_traceback="Traceback (the frames in the function's own file):\n" + "".join(lines),
    )


def _user_files(call: PythonCall) -> set[str]:
    files: set[str] = set()
    for udf in call.udfs:
        for command in udf.commands:
            try:
                func = pickle.loads(command)[0]
            except Exception:
                continue
            code = getattr(getattr(func, "__wrapped__", func), "__code__", None)
            if code is not None:
                files.add(code.co_filename)
    return files
