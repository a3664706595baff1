"""Pipeline files: what ``hybrid-shuffle run``, ``explain`` and ``validate --pipeline`` load.

A pipeline file is a Python file that builds one job.  It declares its inputs, so
that the job can be planned without them::

    import pyarrow as pa
    import hybrid_shuffle as hs

    SCHEMAS = {  # each input's name and columns
        "orders": pa.schema([("o_custkey", pa.int64()), ("o_totalprice", pa.float64())]),
        "customers": pa.schema([("c_custkey", pa.int64()), ("c_name", pa.string())]),
    }

    def sources(job: hs.Job) -> dict[str, hs.Stream]:
        # the real inputs, one stream of `job` per SCHEMAS name; only `run` calls this
        spark = job.session.spark
        return {
            "orders": job.from_spark(spark.read.parquet("data/orders"), name="orders"),
            "customers": job.from_spark(spark.read.parquet("data/customers"), name="customers"),
        }

    def build(session: hs.Session, orders: hs.Stream, customers: hs.Stream) -> hs.Stream:
        # the pipeline, from the inputs; returns the stream to run
        return orders.join(customers.rename({"c_custkey": "o_custkey"}), on="o_custkey", ...)

The job is ``session.job(config.job or the file's stem)``; ``sources`` and ``build`` get
its streams.

- ``run`` plans the job on stand-ins first (below), without Ray or Spark, so a wrong
  name in the config's ``edges:`` or ``vertices:`` (or a missing key column) fails in
  about a second instead of after start-up.  Then it opens the session, calls
  ``sources(job)``, checks what came back against ``SCHEMAS``, and calls
  ``build(session, **inputs)``.  ``build`` is thus called twice: it should only wire
  streams (no side effects); data work belongs in ``sources``.
- ``explain`` and ``validate --pipeline`` never call ``sources``: ``build`` gets one
  stand-in per input, ``job.from_schema(SCHEMAS[name], name=name)`` (no rows, config
  ``parallelism``), in a ``hybrid_shuffle.planning.PlanningSession`` -- no Ray, no
  Spark, no data.  Anything in ``build`` that would start or run something
  (``session.spark``, ``collect``) is refused there with one sentence.  ``explain
  --address`` plans on the stand-ins in a session on that cluster (its slots), still
  starting no Spark.
- What ``sources`` returns must match ``SCHEMAS``, so that explain's plan is the run's:
  the same names; each an ``hs.Stream`` of the job it was given; a plain source named
  after its key (``name="orders"``, as its stand-in is); and the declared columns
  with the declared types (order, nullability and string width aside: ``string`` and
  ``large_string`` match).  Give the real sources config ``parallelism`` too
  (``from_spark`` defaults to the DataFrame's partitions), or explain's subtask
  counts differ from the run's.
- ``SCHEMAS = {}`` declares no inputs: ``sources`` may be left out, and ``build(session)``
  makes its own job and sources -- planned without Ray as long as it needs none
  (``from_parquet`` reads only footers at plan time; ``from_arrow`` of a table in hand).

The old form, ``build(session) -> Stream`` alone, still works: ``run`` and ``explain``
open the session (Ray, and Spark if ``build`` uses it) as before, and ``validate
--pipeline`` plans it without Ray if ``build`` needs neither.

Each mistake in the file is one ``UsageError`` sentence naming what to add or change
(exit code 2 on the command line): ``SCHEMAS`` without ``sources`` or the reverse, a
``build`` whose parameters do not match the ``SCHEMAS`` names, a ``SCHEMAS`` entry that
is not a ``pyarrow.Schema``, ``sources`` returning other names, another job's streams
or other columns.
"""

from __future__ import annotations

import importlib.util
import inspect
import keyword
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from hybrid_shuffle.api.stream import Stream
from hybrid_shuffle.config import Config
from hybrid_shuffle.planning import PlanningOnlyError

if TYPE_CHECKING:
    from hybrid_shuffle.api.job import Job
    from hybrid_shuffle.plan.logical import LogicalNode
    from hybrid_shuffle.planning import PlanningSession
    from hybrid_shuffle.session import Session

__all__ = ["PipelineFile", "UsageError", "load_pipeline"]

_GUIDE = "docs/guide/pipelines.md"


class UsageError(Exception):
    """A mistake in the command line or the pipeline file (exit code 2)."""


@dataclass(frozen=True)
class PipelineFile:
    """A loaded pipeline file: its ``build``, and its declared inputs if it has them."""

    path: str
    build: Callable[..., Any]
    #: input name -> its columns; None for the old form (``build(session)`` alone)
    schemas: Mapping[str, pa.Schema] | None = None
    #: makes the real inputs (None for the old form, or when ``SCHEMAS`` is empty)
    sources: Callable[[Job], Any] | None = None

    @property
    def declares_inputs(self) -> bool:
        """The file has ``SCHEMAS``: it can be planned without its data."""
        return self.schemas is not None

    def job_name(self, config: Config) -> str:
        """``config.job``, else the file's stem: the name of the job its inputs are in."""
        return config.job or Path(self.path).stem

    def plan_stream(self, session: Session | PlanningSession) -> Stream:
        """The job as ``explain`` and ``validate`` plan it: ``build`` on one stand-in per
        input (``Job.from_schema``), ``sources`` never called.  For the old form
        ``build(session)``, which a ``PlanningSession`` can plan only if it needs neither
        Spark nor data (else a ``UsageError`` saying to declare the inputs)."""
        if self.schemas is None:
            try:
                return self._built(session, {})
            except PlanningOnlyError as e:
                raise UsageError(
                    f"pipeline file '{self.path}' cannot be planned without running it, as "
                    f"its build(session) needs {e.what}; declare its inputs with SCHEMAS and "
                    f"sources(job) (see {_GUIDE})"
                ) from e
        job = session.job(self.job_name(session.config))
        stand_ins = {
            name: job.from_schema(schema, name=name) for name, schema in self.schemas.items()
        }
        return self._built(session, stand_ins)

    def stream(self, session: Session | PlanningSession) -> Stream:
        """The stream ``run`` runs: ``build`` on the inputs ``sources(job)`` makes, once
        they are checked against ``SCHEMAS``; ``build(session)`` for the old form."""
        if self.schemas is None:
            return self._built(session, {})
        job = session.job(self.job_name(session.config))
        return self._built(session, self._inputs(job, self.schemas))

    def _built(self, session: Any, inputs: Mapping[str, Stream]) -> Stream:
        stream = self.build(session, **inputs)
        if not isinstance(stream, Stream):
            raise UsageError(
                f"build() in '{self.path}' returned a {type(stream).__name__}; return the "
                "hs.Stream to run"
            )
        return stream

    def _inputs(self, job: Job, schemas: Mapping[str, pa.Schema]) -> dict[str, Stream]:
        """``sources(job)``, checked: see the module docstring."""
        got = self.sources(job) if self.sources is not None else {}
        what = f"sources(job) in '{self.path}'"
        names = ", ".join(schemas)
        if not isinstance(got, Mapping):
            raise UsageError(
                f"{what} returned a {type(got).__name__}; return a dict with one stream for "
                f"each name in SCHEMAS ({names})"
            )
        missing = [name for name in schemas if name not in got]
        if missing:
            raise UsageError(
                f"{what} returned no stream for {_quoted(missing)}; return one for each "
                f"name in SCHEMAS ({names})"
            )
        extra = [str(name) for name in got if name not in schemas]
        if extra:
            raise UsageError(
                f"{what} returned {_quoted(extra)}, which SCHEMAS does not declare; declare "
                "it in SCHEMAS and as a parameter of build(), or leave it out"
            )
        for name, declared in schemas.items():
            self._check_input(job, name, got[name], declared)
        return {name: got[name] for name in schemas}

    def _check_input(self, job: Job, name: str, stream: Any, declared: pa.Schema) -> None:
        what = f"sources(job)['{name}'] in '{self.path}'"
        if not isinstance(stream, Stream):
            raise UsageError(
                f"{what} is a {type(stream).__name__}; make it a stream of the job, like "
                f"job.from_spark(df, name='{name}') or job.from_arrow(table, name='{name}')"
            )
        if stream.job is not job:
            raise UsageError(
                f"{what} belongs to job '{stream.job.name}', not to the job sources() was "
                f"given ('{job.name}'); make it with that job"
            )
        node = stream.node
        if node.is_source and node.name != name:
            raise UsageError(
                f"{what} is a source named '{node.name}'; name it '{name}' (name='{name}'), "
                "as explain names its stand-in"
            )
        actual = _schema_of(node, {})
        difference = None if actual is None else _difference(actual, declared, name)
        if difference is not None:
            raise UsageError(
                f"{what} {difference}; make SCHEMAS['{name}'] the input's columns, or "
                "select and cast them in sources()"
            )


def load_pipeline(path: str) -> PipelineFile:
    """Run the file at ``path`` as a module and check its protocol (the module
    docstring); a mistake is one ``UsageError`` sentence."""
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"pipeline file '{path}' does not exist; check the path")
    spec = importlib.util.spec_from_file_location(f"_pipeline_{file.stem}", file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # so its functions can be shipped to executors by value
    spec.loader.exec_module(module)
    build = getattr(module, "build", None)
    schemas = getattr(module, "SCHEMAS", None)
    sources = getattr(module, "sources", None)
    if schemas is None and sources is None:  # the old form
        if not callable(build):
            raise UsageError(
                f"pipeline file '{path}' has no build(session) function; define one that "
                "returns the stream to run"
            )
        _check_old_build(build, path)
        return PipelineFile(path, build)
    checked = _check_schemas(schemas, sources, path)
    if not callable(build):
        raise UsageError(
            f"pipeline file '{path}' declares SCHEMAS but no build function; define "
            f"{_signature(checked)} returning the stream to run"
        )
    if sources is not None:
        _check_sources(sources, path)
    _check_build(build, checked, path)
    return PipelineFile(path, build, checked, sources)


# -- checks of the file ----------------------------------------------------------------------


def _check_schemas(schemas: Any, sources: Any, path: str) -> dict[str, pa.Schema]:
    """``SCHEMAS``, as a dict of input name -> ``pyarrow.Schema``."""
    if schemas is None:
        raise UsageError(
            f"pipeline file '{path}' defines sources(job) but no SCHEMAS; add SCHEMAS = "
            "{'name': pa.schema([...])} with the columns of each input sources() returns"
        )
    if not isinstance(schemas, Mapping):
        raise UsageError(
            f"SCHEMAS in '{path}' is a {type(schemas).__name__}; make it a dict of input "
            "name to pyarrow schema, like {'orders': pa.schema([('id', pa.int64())])}"
        )
    checked: dict[str, pa.Schema] = {}
    for name, schema in schemas.items():
        if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
            raise UsageError(
                f"SCHEMAS key {name!r} in '{path}' is not a Python name; use one that "
                "build() can take as a parameter, like 'orders'"
            )
        if not isinstance(schema, pa.Schema):
            raise UsageError(
                f"SCHEMAS['{name}'] in '{path}' is a {type(schema).__name__}; make it a "
                "pyarrow schema, like pa.schema([('id', pa.int64())])"
            )
        if not schema.names:
            raise UsageError(
                f"SCHEMAS['{name}'] in '{path}' has no columns; list the input's columns"
            )
        checked[name] = schema
    if checked and sources is None:
        raise UsageError(
            f"pipeline file '{path}' declares SCHEMAS but no sources(job); add def "
            "sources(job) returning the real inputs, one stream per SCHEMAS name (only "
            "run calls it)"
        )
    return checked


def _check_sources(sources: Any, path: str) -> None:
    if not callable(sources):
        raise UsageError(
            f"sources in '{path}' is a {type(sources).__name__}; define it as a function, "
            "def sources(job)"
        )
    signature = _signature_of(sources)
    if signature is not None:
        try:
            signature.bind(None)
        except TypeError:
            raise UsageError(
                f"sources() in '{path}' must take one argument, the job: def sources(job)"
            ) from None


def _check_build(build: Callable[..., Any], schemas: Mapping[str, pa.Schema], path: str) -> None:
    """``build`` takes the session, then every ``SCHEMAS`` name as a keyword; any other
    parameter it has must have a default."""
    signature = _signature_of(build)
    if signature is None:
        return
    wanted = _signature(schemas)
    params = list(signature.parameters.values())
    if not params or params[0].kind in (
        inspect.Parameter.KEYWORD_ONLY,
        inspect.Parameter.VAR_KEYWORD,
    ):
        raise UsageError(f"build() in '{path}' takes no session first; define {wanted}")
    rest = params[1:] if params[0].kind is not inspect.Parameter.VAR_POSITIONAL else params
    by_keyword = {
        p.name
        for p in rest
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    any_keyword = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in rest)
    missing = [] if any_keyword else [name for name in schemas if name not in by_keyword]
    if missing:
        noun = "parameter" if len(missing) == 1 else "parameters"
        raise UsageError(
            f"build() in '{path}' has no {noun} {_quoted(missing)} for the inputs SCHEMAS "
            f"declares; define {wanted}"
        )
    undeclared = [
        p.name
        for p in rest
        if p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        and p.name not in schemas
    ]
    if undeclared:
        raise UsageError(
            f"build() in '{path}' takes {_quoted(undeclared)}, which SCHEMAS does not "
            "declare; declare it in SCHEMAS and sources(job), or give it a default"
        )


def _check_old_build(build: Callable[..., Any], path: str) -> None:
    """The old form's ``build`` is called with the session alone."""
    signature = _signature_of(build)
    if signature is None:
        return
    try:
        signature.bind(None)
    except TypeError:
        params = [p.name for p in signature.parameters.values()]
        if not params:
            raise UsageError(
                f"build() in '{path}' takes no session; define build(session)"
            ) from None
        raise UsageError(
            f"build() in '{path}' takes {_quoted(params[1:])} besides the session; declare "
            f"its inputs with SCHEMAS and sources(job) (see {_GUIDE}), or give them defaults"
        ) from None


def _signature_of(fn: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or C function: left to the call
        return None


def _signature(schemas: Mapping[str, pa.Schema]) -> str:
    return f"build({', '.join(['session', *schemas])})"


def _quoted(names: list[str]) -> str:
    return ", ".join(f"'{name}'" for name in names)


# -- checks of the inputs ----------------------------------------------------------------


def _schema_of(node: LogicalNode, known: dict[int, pa.Schema | None]) -> pa.Schema | None:
    """The columns a stream has, as the planner derives them (None where unknown)."""
    if node.id not in known:
        if node.is_source:
            known[node.id] = node.source_schema
        else:
            assert node.operator is not None
            inputs = [_schema_of(up, known) for up, _ in node.inputs]
            known[node.id] = node.operator.output_schema(inputs)
    return known[node.id]


def _difference(actual: pa.Schema, declared: pa.Schema, name: str) -> str | None:
    """The first way ``actual``'s columns differ from ``SCHEMAS[name]`` (``declared``), as
    a phrase; None if they match."""
    have = {f.name: f.type for f in actual}
    for field in declared:
        got = have.get(field.name)
        if got is None:
            return f"has no column '{field.name}' ({field.type}), which SCHEMAS['{name}'] declares"
        if not _same_type(got, field.type):
            return (
                f"has column '{field.name}' as {got}, where SCHEMAS['{name}'] declares {field.type}"
            )
    wanted = set(declared.names)
    for field in actual:
        if field.name not in wanted:
            return (
                f"has column '{field.name}' ({field.type}), which SCHEMAS['{name}'] does not "
                "declare"
            )
    return None


def _same_type(a: pa.DataType, b: pa.DataType) -> bool:
    if a.equals(b):
        return True
    strings = (pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view)
    return any(s(a) for s in strings) and any(s(b) for s in strings)
