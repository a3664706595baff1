"""Layers that point one way (issue 37): no module imports a module of a layer above its own.

Every import counts, read from the source with ``ast``: at the top of a module, inside
a function (a lazy import is still a dependency) and under ``TYPE_CHECKING`` (a type
names what the module works with).  A module of the package that no layer claims fails
the test too, so a new module is placed on purpose.  No Ray.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "hybrid_shuffle"

#: lowest first; a module may import its own layer and those below it.  A module
#: belongs to the layer of its longest prefix (on dotted boundaries); the package's
#: ``__init__`` is named on its own.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # leaves: named errors, words, sizes, spill directories, logging, how actors start
    (
        "foundation",
        (
            "hybrid_shuffle.errors",
            "hybrid_shuffle._words",
            "hybrid_shuffle.sizes",
            "hybrid_shuffle.spill_dirs",
            "hybrid_shuffle.empty_column",
            "hybrid_shuffle.config_file",
            "hybrid_shuffle.quiet",
            "hybrid_shuffle.actor_process",
        ),
    ),
    # FLIP-31's service, its partition types and buffers, the partition store actor
    ("shuffle", ("hybrid_shuffle.shuffle", "hybrid_shuffle.actors.partition_store")),
    # the typed YAML (it names the shuffle's modes)
    ("config", ("hybrid_shuffle.config", "hybrid_shuffle.config_reference")),
    ("operators", ("hybrid_shuffle.operators",)),
    # what reads the inputs: Parquet, DuckDB scans, a Ray Dataset's blocks
    ("sources", ("hybrid_shuffle.sources", "hybrid_shuffle.ray_data")),
    # logical nodes -> JobGraph, regions, explain: plain Python
    ("plan", ("hybrid_shuffle.plan",)),
    # the bridges to Spark (starting it, moving its data), below the cluster that owns one
    ("spark", ("hybrid_shuffle.spark",)),
    # the cluster (Ray, slots, shuffle service), the scheduler, the executor actor
    ("runtime", ("hybrid_shuffle.runtime", "hybrid_shuffle.actors")),
    # what a run hands back: results, profiles, timelines, progress bars
    (
        "results",
        (
            "hybrid_shuffle.result",
            "hybrid_shuffle.query_profile",
            "hybrid_shuffle._profile_text",
            "hybrid_shuffle.timeline",
            "hybrid_shuffle.progress",
        ),
    ),
    # the hand-built front door: Job and Stream, given a cluster to run on
    ("api", ("hybrid_shuffle.api",)),
    # the Spark front door: a physical plan translated into Streams
    ("sparkplan", ("hybrid_shuffle.sparkplan",)),
    # what a user opens: the session (a facade over the cluster), its planning stand-in,
    # pipeline files
    (
        "session",
        ("hybrid_shuffle.session", "hybrid_shuffle.planning", "hybrid_shuffle.pipeline_file"),
    ),
    # the entry points: ``import hybrid_shuffle as hs`` and the command line
    ("entry", ("hybrid_shuffle", "hybrid_shuffle.cli")),
)

#: (importer, imported) pairs allowed to point up, each with its reason.  Keep it tiny.
EXCEPTIONS: dict[tuple[str, str], str] = {}

RANK = {name: n for n, (name, _) in enumerate(LAYERS)}


def layer_of(module: str) -> str | None:
    """The layer claiming ``module``, by its longest prefix; None if none does."""
    best: tuple[int, str] | None = None
    for name, prefixes in LAYERS:
        for prefix in prefixes:
            exact = module == prefix
            under = prefix != PACKAGE and module.startswith(prefix + ".")
            if (exact or under) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), name)
    return None if best is None else best[1]


def package_modules() -> dict[str, Path]:
    """Module name -> file: the package, and the top-level ``actors/`` folder installed
    as ``hybrid_shuffle.actors``."""
    modules: dict[str, Path] = {}
    for folder, name in ((ROOT / PACKAGE, PACKAGE), (ROOT / "actors", f"{PACKAGE}.actors")):
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join([name, *parts])] = path
    return modules


def imports_of(module: str, path: Path, known: set[str]) -> list[tuple[str, int]]:
    """The package's modules ``module`` imports, anywhere in it, with their lines; ``from
    X import Y`` names ``X.Y`` when that is a module, else ``X``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            for alias in node.names:
                name = f"{base}.{alias.name}"
                found.append((name if name in known else base, node.lineno))
    return [(name, line) for name, line in found if name.split(".")[0] == PACKAGE]


def test_every_module_of_the_package_has_a_layer() -> None:
    unplaced = [m for m in package_modules() if layer_of(m) is None]
    assert not unplaced, f"no layer claims {', '.join(unplaced)}: add them to LAYERS"


def test_no_module_imports_a_module_of_a_layer_above_its_own() -> None:
    modules = package_modules()
    known = set(modules)
    upward = []
    for module, path in modules.items():
        own = layer_of(module)
        assert own is not None
        for imported, line in imports_of(module, path, known):
            theirs = layer_of(imported)
            assert theirs is not None, f"{module}:{line} imports {imported}, which no layer claims"
            if RANK[theirs] > RANK[own] and (module, imported) not in EXCEPTIONS:
                upward.append(f"{module} -> {imported} (line {line}: {own} imports {theirs})")
    assert not upward, "imports of a higher layer:\n" + "\n".join(sorted(set(upward)))


def test_the_exceptions_are_still_needed() -> None:
    """An exception whose import is gone is dropped from the list, not kept as a licence."""
    modules = package_modules()
    known = set(modules)
    for importer, imported in EXCEPTIONS:
        names = {name for name, _ in imports_of(importer, modules[importer], known)}
        assert imported in names, f"{importer} no longer imports {imported}: drop the exception"


def test_the_reader_finds_lazy_and_type_only_imports() -> None:
    """The check sees what it claims to: a function's import and a ``TYPE_CHECKING`` one."""
    modules = package_modules()
    known = set(modules)
    job = {
        name
        for name, _ in imports_of(
            "hybrid_shuffle.api.job", modules["hybrid_shuffle.api.job"], known
        )
    }
    assert "hybrid_shuffle.runtime.execution" in job  # imported inside Job._run
    assert "hybrid_shuffle.runtime.cluster" in job  # under TYPE_CHECKING
    assert layer_of("hybrid_shuffle.config_file") == "foundation"  # not "config"
    assert layer_of("hybrid_shuffle.sparkplan.translate") == "sparkplan"  # not "spark"
    assert layer_of("hybrid_shuffle.actors.partition_store") == "shuffle"
