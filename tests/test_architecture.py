"""The import graph of ``console/`` keeps its layers: no cycles, no upward imports.

Every ``import`` in every module counts — at module level, inside functions and under
``if TYPE_CHECKING:`` — because a function-level import is still a dependency (it only hides a
cycle until the function runs). Cycles are counted on runtime imports (``TYPE_CHECKING``
blocks never execute).

Layers, bottom up:

- data: ``console.model``, ``console.config``, ``console.errors``, ``console.redact``, ``console.audit``,
  ``console.remote`` (agent, transports), ``console.ops`` (lifecycle, classification, planner, flags,
  tracker, the live backend), ``console.sim`` (stand-ins) — never textual, never ``console.ui``;
- the seam: ``console.backend`` (the protocol the UI talks to);
- ``console.ui``: renders views and calls the backend; imports the seam, the models, its own modules
  and the pure helpers listed in :data:`UI_PURE_HELPERS`;
- the CLI: ``console.cli`` and ``console.commands`` (the CLI context lives in
  ``console.commands.context``); nothing else imports them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "console"

UI_PURE_HELPERS = {
    "console.redact": "masks secrets in text the UI shows",
    "console.ops.flags.argv": "the one argv resolver (how the host's argparse reads a flag list): pure functions",
    "console.ops.flags.launcher": "the one launcher/flags split of a command line: a pure function",
    "console.ops.flags.sources": "the bundled flag schema the resolver falls back to (package data, read once)",
    "console.ops.flags.models": "the flag schema's models",
    "console.ops.sessions": "derive_views: sessions as the operator sees them, a pure function of a snapshot",
    "console.ops.orphans": "find_orphans: a pure function of a snapshot",
    "console.ops.events": "a host's event list, pure functions over models",
    "console.ops.metrics": "parses a server's /metrics text into serving figures (prometheus_client's parser)",
}
"""Modules of the data layer the UI may import: pure functions over models (no I/O, no host, no loop).
Each is checked below to stay pure: no asyncio, subprocess, socket, SSH, and no link or lifecycle."""

IMPURE = ("asyncio", "subprocess", "socket", "asyncssh", "textual", "console.remote.link", "console.remote.ssh",
          "console.ops.lifecycle", "console.ops.backend", "console.ops.tracker")

CLI_LAYER = ("console.cli", "console.commands")
ENTRY_POINTS = {"console.__main__"}
"""``python -m console`` runs the CLI."""
DATA_LAYER = ("console.model", "console.config", "console.errors", "console.redact", "console.audit",
              "console.remote", "console.ops", "console.sim")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES: dict[str, Path] = {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the import nodes inside ``if TYPE_CHECKING:`` blocks."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                out.update(id(n) for n in ast.walk(stmt))
    return out


def imports_of(name: str, *, runtime_only: bool = False) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every import in module ``name``, resolved to a module where it names one."""
    path = MODULES[name]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    skip = _type_checking_nodes(tree) if runtime_only else set()
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for alias in node.names:
                sub = f"{mod}.{alias.name}"
                yield (sub if sub in MODULES else mod), node.lineno


def under(mod: str, prefixes: tuple[str, ...] | str) -> bool:
    prefixes = (prefixes,) if isinstance(prefixes, str) else prefixes
    return any(mod == p or mod.startswith(p + ".") for p in prefixes)


def test_modules_found():
    assert "console.cli" in MODULES and "console.commands.context" in MODULES and "console.ops.backend" in MODULES
    assert "console.hostctx" not in MODULES  # the CLI context lives in console.commands.context


def test_no_import_cycles():
    graph = {m: {d for d, _ in imports_of(m, runtime_only=True) if d in MODULES and d != m} for m in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def strongconnect(v: str) -> None:  # Tarjan, recursion depth bounded by the module count
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for m in sorted(graph):
        if m not in index:
            strongconnect(m)
    assert cycles == [], "import cycles (function-level imports included): " + "; ".join(
        " <-> ".join(c) for c in cycles)


def violations(rule) -> list[str]:
    out = []
    for m in MODULES:
        for dep, line in imports_of(m):
            why = rule(m, dep)
            if why:
                out.append(f"{MODULES[m].relative_to(REPO)}:{line}: {m} imports {dep}: {why}")
    return out


def test_only_the_cli_imports_the_cli_and_its_context():
    def rule(m: str, dep: str) -> str | None:
        if under(dep, CLI_LAYER) and not under(m, CLI_LAYER) and m not in ENTRY_POINTS:
            return "only console.cli and console.commands may use the CLI and its context"
        return None
    assert violations(rule) == []


def test_ui_imports_only_the_seam_models_and_pure_helpers():
    allowed = ("console.backend", "console.model", "console.ui", *UI_PURE_HELPERS)

    def rule(m: str, dep: str) -> str | None:
        if under(m, "console.ui") and under(dep, "console") and not under(dep, allowed) and dep != "console":
            return "the UI talks to the data layer through console.backend.Backend only"
        return None
    assert violations(rule) == []


def test_ui_pure_helpers_stay_pure():
    def rule(m: str, dep: str) -> str | None:
        if m in UI_PURE_HELPERS and under(dep, IMPURE):
            return "a helper the UI imports must be a pure function over models"
        return None
    assert violations(rule) == []
    assert all(m in MODULES for m in UI_PURE_HELPERS), "a listed helper no longer exists: update the list"


def test_remote_imports_nothing_above_it():
    def rule(m: str, dep: str) -> str | None:
        if under(m, "console.remote") and under(dep, ("console.ops", "console.ui", "console.commands",
                                                       "console.cli", "console.sim", "console.backend")):
            return "console.remote (agent, transports) is below ops, sim, UI and CLI"
        return None
    assert violations(rule) == []


DATA_RICH_OK = {
    "console.ops.report_svg": "draws the incident report's panel as an SVG file with rich's recorder (a file "
                              "format shared by the CLI and the TUI's p, no terminal, no textual)",
}
"""Data-layer modules that may import rich (never textual or console.ui), each with its reason."""


def test_data_layer_never_imports_textual_or_the_ui():
    def rule(m: str, dep: str) -> str | None:
        if m in DATA_RICH_OK and under(dep, "rich"):
            return None
        if under(m, DATA_LAYER) and under(dep, ("textual", "rich", "console.ui")):
            return "the data layer never imports the UI"
        return None
    assert violations(rule) == []


@pytest.mark.parametrize("name", ["console.ops.backend", "console.ops.lifecycle", "console.ops.tracker"])
def test_live_backend_knows_nothing_of_the_command_line(name):
    deps = {d for d, _ in imports_of(name)}
    assert not any(under(d, ("argparse", *CLI_LAYER)) for d in deps), deps


def test_no_function_attributes_or_dict_tricks():
    """No state kept as ``fn.attr = ...`` on functions (metadata such as ``__name__`` is fine, as functools.wraps
    sets it), no ``__dict__`` tricks in console/."""
    found = []
    for m, path in MODULES.items():
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        funcs = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "__dict__" and isinstance(node.ctx, ast.Load):
                found.append(f"{m}:{node.lineno}: __dict__")
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id in funcs \
                            and not (t.attr.startswith("__") and t.attr.endswith("__")):  # __name__ like wraps()
                        found.append(f"{m}:{node.lineno}: attribute set on function {t.value.id}")
    assert found == []


def test_the_ui_uses_the_backend_through_its_protocol():
    """No ``getattr(<...backend...>, ...)`` / ``hasattr`` in console/ui: what the UI needs is declared in
    console.backend.Backend."""
    found = []
    for m, path in MODULES.items():
        if not under(m, "console.ui"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") \
                    and node.args and "backend" in ast.unparse(node.args[0]):
                found.append(f"{m}:{node.lineno}: {ast.unparse(node)}")
    assert found == []


def test_no_getattr_on_the_command_line():
    """Options are read as typed fields: no ``getattr(args, ...)``/``getattr(ctx, ...)`` anywhere in console/."""
    found = []
    for m, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") \
                    and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in ("args", "ctx"):
                found.append(f"{m}:{node.lineno}: {ast.unparse(node)}")
    assert found == []
