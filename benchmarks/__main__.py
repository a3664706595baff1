"""One benchmark runner.

    python -m benchmarks list
    python -m benchmarks run SUITE [--systems engine,spark,duckdb] [--scale N] [--runs N]
                                   [--label NAME] [--out DIR] [--data DIR]
    python -m benchmarks compare A.json B.json

``run`` prepares the suite's data, runs its cases on the systems asked for (default:
the suite's), checks every answer against the suite's oracle, prints one table and
writes ``benchmarks/results/<suite>/<label>.json`` (and ``.png``); the label defaults
to the UTC time.  ``compare`` prints B over A per shared case and their geomean.  The
history of each suite (which issue, which figures) is in BENCHMARKS.md.  Not part of
the test suite: absolute times drift on a shared machine; the ratios (each system
against the engine, same run, same data) are the claim.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from benchmarks import report
from benchmarks.suite import Context, Suite
from benchmarks.suites import SUITES

RESULTS = Path(__file__).resolve().parent / "results"
DATA = Path(__file__).resolve().parent / ".data"


def _scale(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return value


def _list() -> int:
    for suite in SUITES.values():
        print(f"{suite.name:<16} {suite.issue:<10} {suite.description}")
        print(f"{'':<16} {'':<10} scale: {suite.scale_unit} (default {suite.default_scale:g}, "
              f"tiny {suite.tiny_scale:g}); systems: {', '.join(suite.systems)}; "
              f"oracle: {suite.oracle}")  # fmt: skip
    return 0


def _run(args: argparse.Namespace) -> int:
    suite: Suite = SUITES[args.suite]
    try:
        systems = suite.pick([s.strip() for s in args.systems.split(",")] if args.systems else None)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    scale = args.scale if args.scale is not None else suite.default_scale
    label = args.label or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = Path(args.out) if args.out else RESULTS / suite.name
    started = time.time()
    data = suite.data(scale, Path(args.data)) if suite.data is not None else None
    runs = args.runs if args.runs is not None else suite.runs
    ctx = Context(scale, systems, runs, out, label, data)
    outcome = suite.run(ctx)
    written = report.payload(suite, ctx, outcome, started)
    path = report.write(written, outcome.cases, out)
    report.print_report(suite, written, outcome)
    print(f"\nwrote {path}")
    return 1 if any(m.checked is False for m in outcome.cases) else 0


def _compare(args: argparse.Namespace) -> int:
    a, b = (json.loads(Path(p).read_text()) for p in (args.a, args.b))
    print(f"A: {args.a}\nB: {args.b}")
    print("\n".join(report.compare(a, b)))
    return 0


def main(argv: list[str] | None = None) -> int:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        "python -m benchmarks", description=__doc__, formatter_class=raw
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the suites, their scales, systems and oracles")
    run = sub.add_parser("run", help="run one suite")
    run.add_argument("suite", choices=sorted(SUITES))
    run.add_argument("--systems", help="comma-separated, of the suite's (default: its own)")
    run.add_argument("--scale", type=_scale, help="in the suite's unit (see list)")
    run.add_argument("--runs", type=int, help="timed runs per case (default: the suite's)")
    run.add_argument("--label", help="the results' file name (default: the UTC time)")
    run.add_argument("--out", help="folder of the results (default: benchmarks/results/SUITE)")
    run.add_argument("--data", default=str(DATA), help="folder of prepared inputs (git-ignored)")
    cmp = sub.add_parser("compare", help="B over A per shared case, and the geomean")
    cmp.add_argument("a")
    cmp.add_argument("b")
    args = parser.parse_args(argv)
    if args.command == "list":
        return _list()
    return _run(args) if args.command == "run" else _compare(args)


if __name__ == "__main__":
    sys.exit(main())
