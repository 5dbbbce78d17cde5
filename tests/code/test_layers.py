"""Imports only go down the layers (docs/STYLE.md, issue 12 "Done when").

The order, bottom to top:

    base       walctl, errors, defaults, sizes, failpoints, percentile: leaves everything may use
    format     pure bytes <-> dataclasses          device   I/O             (neither imports the other)
    wal        the engine over a device            store    object stores   (neither imports the other)
    compaction the compaction plan and the levels without Spark (over store)
    spark      the executor of an SSO compaction plan (over compaction)
    bench      the `walctl bench` engine (over wal and device)
    pipeline   joins wal and store: upload, read, check, status, metrics, bounds
    selftest   runs the layers below on scratch files
    commands   parse, call one engine function, render
    cli        the app and the one error -> exit boundary

A module is placed by where it lives (walctl/pipeline/upload.py is pipeline/, so it may
import wal/ and store/). The parse is static (ast over walctl/**.py), so an import
inside a function counts as well.

ALLOWED names each import that breaks the rule today and the item of issue 12 that removes
it (ALLOWED_CYCLE_EDGES likewise for the imports that close a cycle inside one layer). The list can only shrink: an entry whose import is gone fails the test until it is
deleted, and a new violation fails until it is fixed (or, knowingly, listed).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "walctl"

# What each layer may import (besides itself).
MAY_IMPORT = {
    "base": set(),
    "format": {"base"},
    "device": {"base"},
    "wal": {"base", "format", "device"},
    "store": {"base", "format", "device"},
    "compaction": {"base", "format", "device", "store"},
    "spark": {"base", "format", "device", "store", "compaction"},
    "bench": {"base", "format", "device", "wal"},
    "pipeline": {"base", "format", "device", "wal", "store", "compaction", "spark"},
    "selftest": {"base", "format", "device", "wal", "store", "compaction", "spark", "pipeline"},
    "commands": {"base", "format", "device", "wal", "store", "compaction", "spark", "bench", "pipeline",
                 "selftest"},
    "cli": {"base", "format", "device", "wal", "store", "compaction", "spark", "bench", "pipeline", "selftest",
            "commands"},
}
# By walctl's sub-package, or by module for the top-level files.
LAYER_OF = {
    "walctl": "base", "walctl.errors": "base", "walctl.defaults": "base", "walctl.sizes": "base",
    "walctl.failpoints": "base", "walctl.percentile": "base", "walctl.lazynames": "base",
    "walctl.native": "base",
    "walctl.format": "format",
    "walctl.device": "device",
    "walctl.wal": "wal",
    "walctl.store": "store",
    "walctl.compaction": "compaction", "walctl.spark": "spark", "walctl.bench": "bench",
    "walctl.pipeline": "pipeline", "walctl.status": "pipeline", "walctl.metrics": "pipeline",
    "walctl.bounds": "pipeline",
    "walctl.selftest": "selftest",
    "walctl.commands": "commands",
    # Option checks and human rendering use click/rich, so they sit with the commands.
    "walctl.options": "commands", "walctl.human": "commands",
    "walctl.cli": "cli", "walctl.__main__": "cli",
}
# Third-party modules that only the top layers may import: rendering belongs to commands/cli.
UI_LIBRARIES = {"typer", "click", "rich"}
UI_LAYERS = {"selftest", "commands", "cli"}  # selftest drives the app with typer's CliRunner

# (importer, imported): why it is allowed for now.
ALLOWED: dict[tuple[str, str], str] = {
}
# Imports within one layer that close a cycle today (importer, imported): why, and what removes it.
ALLOWED_CYCLE_EDGES = {
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE_DIR.rglob("*.py"))}


def imports_of(path: Path, modules: dict[str, Path]) -> set[str]:
    """walctl modules and UI libraries ``path`` imports; ``from pkg import sub`` counts as pkg.sub."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in modules else node.module)
    return {name for name in found
            if name.split(".")[0] == "walctl" or name.split(".")[0] in UI_LIBRARIES}


def layer(module: str) -> str:
    # The package itself, else its sub-package or top-level module (never "walctl" as a
    # prefix: a new top-level module must be placed, not fall into base).
    key = module if module == "walctl" else ".".join(module.split(".")[:2])
    if key in LAYER_OF:
        return LAYER_OF[key]
    raise AssertionError(f"{module} has no layer: add it (or its sub-package) to LAYER_OF in {__file__}")


def import_graph() -> dict[str, set[str]]:
    modules = all_modules()
    return {name: imports_of(path, modules) for name, path in modules.items()}


def is_upward(importer: str, imported: str) -> bool:
    top = imported.split(".")[0]
    if top in UI_LIBRARIES:
        return layer(importer) not in UI_LAYERS
    mine, theirs = layer(importer), layer(imported)
    return theirs != mine and theirs not in MAY_IMPORT[mine]


def test_every_module_has_a_layer():
    for name in all_modules():
        layer(name)  # raises naming the module


def test_imports_only_go_down():
    graph = import_graph()
    upward = {(a, b) for a, targets in graph.items() for b in targets if is_upward(a, b)}
    new = sorted(upward - ALLOWED.keys())
    assert not new, ("upward imports (docs/STYLE.md layers): "
                     + "; ".join(f"{a} ({layer(a)}) imports {b}" for a, b in new))
    gone = sorted(ALLOWED.keys() - upward)
    assert not gone, f"fixed, so remove from ALLOWED in {__file__}: {gone}"


def test_no_import_cycle_but_through_the_allowed_upward_imports():
    graph = import_graph()
    edges = defaultdict(set)
    for a, targets in graph.items():
        for b in targets:
            if b in graph and b != a and (a, b) not in ALLOWED and (a, b) not in ALLOWED_CYCLE_EDGES:
                edges[a].add(b)
    # A package's __init__ re-exporting its modules, which import their siblings through
    # the package, is how Python packages work, not a cycle between modules.
    for a in list(edges):
        edges[a] = {b for b in edges[a] if not a.startswith(b + ".")}
    cycle = _find_cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)
    gone = sorted(edge for edge in ALLOWED_CYCLE_EDGES if edge[1] not in graph.get(edge[0], ()))
    assert not gone, f"fixed, so remove from ALLOWED_CYCLE_EDGES in {__file__}: {gone}"


def test_only_the_registration_imports_the_commands_and_nothing_imports_the_cli():
    """Issue 12 item 2: walctl/cli/app.py is the one module that imports the command modules;
    no module outside the cli package (but ``python -m walctl``) imports walctl.cli."""
    graph = import_graph()
    cli_users = sorted(a for a, targets in graph.items() for b in targets
                       if (b == "walctl.cli" or b.startswith("walctl.cli.")) and layer(a) != "cli")
    assert cli_users == [], f"modules importing walctl.cli: {cli_users}"
    command_modules = {name for name in graph if name.startswith("walctl.commands.")
                       and not name.rsplit(".", 1)[1].startswith("_")}
    importers = sorted({a for a, targets in graph.items() for b in targets
                        if b in command_modules and not a.startswith("walctl.commands.")})
    assert importers == ["walctl.cli.app"], importers


def _find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def test_the_rule_catches_what_it_should():
    # The checker itself: an upward import is caught, a downward one is not.
    assert is_upward("walctl.store.local", "walctl.wal.reader")
    assert is_upward("walctl.wal.writer", "walctl.store.base")
    assert is_upward("walctl.format.header", "walctl.device.buffers")
    assert is_upward("walctl.spark.job", "walctl.commands.compact")
    assert is_upward("walctl.wal.reader", "rich")
    assert not is_upward("walctl.commands.recover", "walctl.wal.reader")
    assert not is_upward("walctl.store.local", "walctl.device.buffers")
    assert not is_upward("walctl.cli", "typer")
    assert layer("walctl.cli") == "cli" and layer("walctl.wal.reader") == "wal" and layer("walctl") == "base"
    with pytest.raises(AssertionError, match="has no layer"):
        layer("walctl.somethingnew")
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": {"c"}}) is None


def test_compaction_and_spark_are_layers_apart():
    """Issue 29 item 4: compaction/ owns the plan, spark/ only executes it: spark may import
    compaction, never the other way (a function-level import counts), so no cycle between them."""
    assert layer("walctl.compaction.plan") == "compaction" and layer("walctl.spark.job") == "spark"
    assert not is_upward("walctl.spark.compact", "walctl.compaction.planner")
    assert is_upward("walctl.compaction.so", "walctl.spark.job")
    assert is_upward("walctl.compaction.planner", "walctl.spark.cluster")
    assert is_upward("walctl.store.s3", "walctl.compaction.plan")
    # bench/ and selftest/ are layers of their own: the bench engine sits on wal/, selftest above
    # the pipelines (it runs them), both below the commands.
    assert is_upward("walctl.bench.run", "walctl.store.local")
    assert is_upward("walctl.selftest.steps", "walctl.commands.compact")
    assert not is_upward("walctl.selftest.steps", "walctl.spark.job")
    assert not is_upward("walctl.commands.bench", "walctl.bench.run")
    graph = import_graph()
    back = sorted((a, b) for a, targets in graph.items() if layer(a) == "compaction"
                  for b in targets if b.startswith("walctl.") and layer(b) == "spark")
    assert back == [], f"compaction/ imports spark/: {back}"


def test_a_cycle_between_compaction_and_spark_fails():
    # The checker on a graph with the cycle issue 29 removed (compaction.so -> spark.plan -> ...
    # -> compaction.common): the upward edge is caught, and so is the cycle it closes.
    edges = {"walctl.compaction.so": {"walctl.spark.plan"}, "walctl.spark.plan": {"walctl.compaction.common"},
             "walctl.compaction.common": {"walctl.compaction.so"}}
    assert is_upward("walctl.compaction.so", "walctl.spark.plan")
    assert _find_cycle(edges) is not None
