"""``hybrid-shuffle run|explain|sql|validate``: the way spark-submit runs an application.

A pipeline file (``hybrid_shuffle.pipeline_file``) declares its inputs (``SCHEMAS``),
makes them (``sources(job)``) and builds the job on them (``build(session, **inputs)``);
the old form is ``build(session) -> Stream`` alone.  ``run`` plans the job on
schema-only stand-ins first (a wrong edge name fails in a second), then opens the
session (embedded Ray, or ``--address``), makes the inputs and runs the job.
``explain`` and ``validate --pipeline`` plan a file with ``SCHEMAS`` on the stand-ins
in a ``hybrid_shuffle.planning.PlanningSession``: no Ray, no Spark, no data.  ``sql``
runs a Spark SQL query (text or a ``.sql`` file) in the engine (``Session.sql``) over
Parquet registered as temp views with ``--view NAME=PATH``; with ``--analyze`` it
prints, after the result, where the query's time went (``JobResult.profile()``).
Errors are one sentence and a non-zero exit: 2 for a bad command line,
pipeline file or config (checked before Ray starts), and for anything ``validate``
finds, 1 for a failed job.
``--debug`` (given once, before the command: ``hybrid-shuffle --debug run ...``)
shows the traceback and lets Ray, RayDP and Spark print their start-up notices
(``log_level: debug``, see ``hybrid_shuffle.quiet``); ``-v`` shows the engine's
own logging at INFO.  A plain run prints the result, the tables and little else.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import traceback
from pathlib import Path

import hybrid_shuffle as hs
from hybrid_shuffle._words import plural
from hybrid_shuffle.config import Config, load_config
from hybrid_shuffle.errors import summary
from hybrid_shuffle.pipeline_file import PipelineFile, UsageError, load_pipeline
from hybrid_shuffle.planning import PlanningOnlyError, PlanningSession
from hybrid_shuffle.spill_dirs import check_spill_root
from hybrid_shuffle.timeline import check_timeline_path

__all__ = ["UsageError", "main"]


def _load(args: argparse.Namespace) -> Config:
    """The config file, with ``--debug`` (``log_level: debug``) or ``-v`` (at least
    ``info``) applied over its ``log_level``."""
    config = load_config(args.config)
    if args.debug:
        return config.with_overrides(log_level="debug")
    if args.verbose and config.log_level != "debug":
        return config.with_overrides(log_level="info")
    return config


def _run(args: argparse.Namespace) -> int:
    config = _load(args)  # a bad config exits 2 before the pipeline or Ray
    pipeline = load_pipeline(args.pipeline)
    if pipeline.declares_inputs:
        _check_before_start(pipeline, config, args.address)
    with hs.Session(config, address=args.address) as session:
        stream = pipeline.stream(session)
        started = time.perf_counter()
        progress = sys.stderr.isatty() if args.progress is None else args.progress
        result = stream.collect(timeout=args.timeout, progress=progress)
        elapsed = time.perf_counter() - started
        print(result.table.slice(0, args.show).to_pandas().to_string(index=False))
        rows = result.table.num_rows
        print(f"\n{rows} {plural(rows, 'row')} in {elapsed:.2f} s")
        print(result.edge_summary())
        print(result.vertex_summary())
        if args.timeline is not None:
            print(f"timeline written to {result.timeline(args.timeline)}")
    return 0


def _check_before_start(pipeline: PipelineFile, config: Config, address: str | None) -> None:
    """Plan the job on its stand-ins before Ray or Spark starts, so that a wrong name in
    the config's ``edges:`` or ``vertices:``, a missing key column or a bad ``build``
    fails in a second rather than after start-up.  With ``--address`` the slots are the
    cluster's, known only once joined: the run's own plan checks those."""
    stream = pipeline.plan_stream(PlanningSession(config))
    try:
        stream.job.plan(stream)
    except hs.SlotsExceededError:
        if address is None:  # an embedded Ray has the slots the planning session assumed
            raise


def _explain(args: argparse.Namespace) -> int:
    config = _load(args)
    pipeline = load_pipeline(args.pipeline)
    if pipeline.declares_inputs and args.address is None:  # plans only: no Ray, no Spark
        _print_explain(pipeline.plan_stream(PlanningSession(config)), args.format)
        return 0
    # the old form needs the session its build uses; with --address, the cluster's slots
    with hs.Session(config, address=args.address) as session:
        _print_explain(pipeline.plan_stream(session), args.format)
    return 0


def _print_explain(stream: hs.Stream, output: str) -> None:
    if output == "json":  # the same facts as the text (one Explanation)
        print(json.dumps(stream.explain_data(), indent=2))
    else:
        print(stream.explain())


def _query_text(text: str) -> str:
    """``QUERY_OR_FILE``: the text of a ``.sql`` file (or of any existing file), else the
    argument itself as the query."""
    path = Path(text)
    looks_like_file = text.strip().lower().endswith(".sql") and "\n" not in text
    if looks_like_file or (len(text) < 4096 and "\n" not in text and path.is_file()):
        if not path.is_file():
            raise UsageError(f"SQL file '{text}' does not exist; check the path")
        return path.read_text(encoding="utf-8")
    return text


def _sql(args: argparse.Namespace) -> int:
    config = _load(args)  # a bad config, query file or view exits 2 before Ray starts
    query = _query_text(args.query)
    for name, path in args.view:
        if not Path(path).exists():
            raise UsageError(f"--view {name}={path}: '{path}' does not exist; check the path")
    # the query needs Spark in every form (--explain too): its start overlaps Ray's
    with hs.Session(config, address=args.address, start_spark=True) as session:
        for name, path in args.view:
            session.spark.read.parquet(str(Path(path).resolve())).createOrReplaceTempView(name)
        stream = session.sql(query, name=config.job, fallback=args.fallback)
        if args.explain:
            print(stream.explain())
            return 0
        started = time.perf_counter()
        progress = sys.stderr.isatty() if args.progress is None else args.progress
        if args.out is not None:
            mode = "overwrite" if args.overwrite else "error"
            result = stream.write_parquet(args.out, mode=mode)
            rows = sum(int(r) for r in result.table.column("rows").to_pylist())
            elapsed = time.perf_counter() - started
            files = result.table.num_rows
            print(
                f"{rows} {plural(rows, 'row')} written to {args.out} ({files} "
                f"{plural(files, 'file')}) in {elapsed:.2f} s"
            )
        else:
            result = stream.collect(progress=progress)
            elapsed = time.perf_counter() - started
            shown = result.table.slice(0, args.limit)
            print(shown.to_pandas().to_string(index=False))
            more = (
                f", the first {shown.num_rows} shown"
                if shown.num_rows < result.table.num_rows
                else ""
            )
            rows = result.table.num_rows
            print(f"\n{rows} {plural(rows, 'row')} in {elapsed:.2f} s{more}")
        if args.analyze:
            print()
            print(result.profile().render())
    return 0


_VIEW_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _view(text: str) -> tuple[str, str]:
    """``--view NAME=PATH``: the syntax is checked here (exit 2, one sentence); the path
    when the command starts."""
    name, sep, path = text.partition("=")
    if not sep or not _VIEW_NAME.match(name.strip()) or not path.strip():
        raise argparse.ArgumentTypeError(
            f"expected NAME=PATH (a view name, '=', a Parquet file or folder), got {text!r}"
        )
    return name.strip(), path.strip()


def _validate(args: argparse.Namespace) -> int:
    """The config alone (its ``edge_rules:`` too); with ``--pipeline``, also against the
    file's job, planned on its stand-ins without Ray (``Config.check_job`` /
    ``check_vertices`` name what is not the job's; a rule that sets none is a note)."""
    config: Config = load_config(args.config)
    check_spill_root(config.shuffle.spill_dir, create=False)  # as Session() would, creating none
    if args.pipeline is None:
        edges = ", ".join(f"{k}={v.mode or '-'}" for k, v in config.edges.items()) or "none"
        rules = f", edge_rules: {len(config.edge_rules)}" if config.edge_rules else ""
        print(f"{args.config}: valid (job {config.job or 'any'}, edges: {edges}{rules})")
        return 0
    pipeline = load_pipeline(args.pipeline)
    data = pipeline.plan_stream(PlanningSession(config)).explain_data()
    edges = (
        ", ".join(f"{e['name']}={e['mode']} ({e['mode_origin']})" for e in data["edges"]) or "none"
    )
    print(f"{args.config}: valid for {args.pipeline} (job {data['job']}, edges: {edges})")
    for note in data["notes"]:  # a rule that sets no edge of this job
        if note.startswith("edge_rules["):
            print(f"note: {note}")
    for warning in data["warnings"]:
        print(f"warning: {warning}")
    return 0


def _parser() -> argparse.ArgumentParser:
    """The command line; ``--debug`` is declared once, on the top-level parser."""
    parser = argparse.ArgumentParser(
        prog="hybrid-shuffle", description=__doc__.splitlines()[0].replace("``", "")
    )
    # -- logging: --debug and -v (hybrid_shuffle.quiet) --
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show tracebacks and Ray's, RayDP's and Spark's own logs (give it before the command)",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="show the engine's logging at INFO"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, fn, helptext in (
        ("run", _run, "run a pipeline file"),
        ("explain", _explain, "print edges, modes, partitions and regions without running"),
    ):
        p = sub.add_parser(name, help=helptext)
        p.add_argument(
            "pipeline",
            help="a Python file defining SCHEMAS, sources(job) and build(session, **inputs) "
            "(or build(session) alone) -> Stream",
        )
        p.add_argument("--config", required=True, help="the job's YAML config")
        p.add_argument(
            "--address",
            help="join this Ray cluster instead of an embedded one"
            + (
                " (a file with SCHEMAS is planned without Ray unless given: then with the "
                "cluster's slots, still without Spark)"
                if name == "explain"
                else ""
            ),
        )
        if name == "explain":
            p.add_argument(
                "--format",
                choices=("text", "json"),
                default="text",
                help="text for people, json for scripts (the same vertices, edges, notes)",
            )
        if name == "run":
            p.add_argument("--show", type=int, default=10, help="rows of the result to print")
            p.add_argument(
                "--timeout",
                type=_seconds,
                help="seconds the job may run (default: failover.job_timeout, else no limit)",
            )
            p.add_argument(
                "--timeline",
                type=_timeline_path,
                metavar="FILE",
                help="after the run, write where time went: FILE.png a chart, FILE.json a "
                "Chrome trace (Perfetto)",
            )
            p.add_argument(
                "--progress",
                action=argparse.BooleanOptionalAction,
                help="one bar per vertex on stderr while the job runs (default: on when "
                "stderr is a terminal)",
            )
        p.set_defaults(fn=fn)
    q = sub.add_parser(
        "sql",
        help="run a Spark SQL query in the engine over Parquet views",
        description="Run a Spark SQL query in the engine: Spark plans it (adaptive execution "
        "off) and its physical plan runs here, each Spark exchange an edge exchange_<id>.",
    )
    q.add_argument("query", metavar="QUERY_OR_FILE", help="Spark SQL text, or a .sql file")
    q.add_argument(
        "--view",
        type=_view,
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="register the Parquet file or folder PATH as the temp view NAME (repeatable)",
    )
    q.add_argument("--config", help="the job's YAML config (edges: exchange_<id>: {mode: ...})")
    q.add_argument("--address", help="join this Ray cluster instead of an embedded one")
    shown = q.add_mutually_exclusive_group()  # the plan without running, or with the run's
    shown.add_argument(
        "--explain",
        action="store_true",
        help="print the engine's plan and the Spark exchanges its edges replace; run nothing",
    )
    shown.add_argument(
        "--analyze",
        action="store_true",
        help="run the query, print its rows, then where its time went: the phases outside "
        "the tasks and, per vertex and edge, wall, CPU, rows, bytes and spills",
    )
    q.add_argument(
        "--limit", type=_count, default=20, metavar="N", help="rows to print (default 20)"
    )
    q.add_argument("--out", metavar="DIR", help="write the result as Parquet into DIR instead")
    q.add_argument(
        "--overwrite",
        action="store_true",
        help="with --out: replace the part-*.parquet files already in DIR",
    )
    q.add_argument(
        "--fallback",
        choices=("spark", "error"),
        default="spark",
        help="what the engine cannot translate: run it in Spark (default) or fail",
    )
    q.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        help="one bar per vertex on stderr while the job runs (default: on when "
        "stderr is a terminal)",
    )
    q.set_defaults(fn=_sql)
    v = sub.add_parser(
        "validate",
        help="check a config file; with --pipeline, also against the file's job (without Ray)",
    )
    v.add_argument("config")
    v.add_argument(
        "--pipeline",
        metavar="FILE",
        help="plan FILE's job on schema-only stand-ins and check the config's edges: and "
        "vertices: names against it",
    )
    v.set_defaults(fn=_validate)
    return parser


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a count of rows (0 or more), got {text!r}")
    return value


def _timeline_path(text: str) -> Path:
    """``--timeline``'s suffix is checked before the job runs (exit 2, one sentence)."""
    try:
        return check_timeline_path(text)
    except hs.ConfigError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("timeline: ")) from e


def _parse(argv: list[str] | None) -> argparse.Namespace:
    """Parse ``argv``; ``--debug`` after the command is a usage error that says where it goes."""
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    for flag in ("--debug", "-v", "--verbose"):
        if flag in extra:
            parser.error(
                f"{flag} goes before the command: hybrid-shuffle {flag} {args.command} ..."
            )
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the command line in ``argv`` (default ``sys.argv[1:]``); return the exit code.

    Returns rather than exits, also for usage errors and ``--help`` (argparse's
    ``SystemExit`` becomes the code), so tests can call it in-process.
    """
    try:
        args = _parse(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    try:
        code: int = args.fn(args)
        return code
    except (hs.HybridShuffleError, UsageError) as e:
        if args.debug:
            traceback.print_exc()
        print(f"hybrid-shuffle: {e}", file=sys.stderr)
        usage = isinstance(e, (UsageError, hs.ConfigError, PlanningOnlyError))
        return 2 if usage or args.command == "validate" else 1
    except KeyboardInterrupt:
        return 130
    except Exception as e:
        if args.debug:
            raise
        print(
            f"hybrid-shuffle: {type(e).__name__}: {summary(e)} (rerun with --debug for the "
            "traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
