"""The import graph of ``console/`` keeps its rooms: no cycles, no upward imports, one rule per folder.

Every ``import`` in every module counts — at module level, inside functions and under
``if TYPE_CHECKING:`` — because a function-level or type-only import is still a dependency (it only hides
a cycle until the function runs, or until the annotation is read). Cycles count every import too.

The rooms, bottom up (``docs/architecture.md`` draws the flow):

- ground: ``console.model``, ``console.errors``, ``console.config``, ``console.paths`` — pydantic and stdlib;
- ``console.host``: what runs on the host (agent, supervisor, their helpers): stdlib and its siblings only;
- ``console.link``: the wire and transports: host facts, ground — nothing above;
- ``console.core``: pure functions over models: ground, host facts, itself — never asyncio, subprocess,
  sockets, the link, ops, the UI or textual;
- ``console.audit``: ground, core, host facts;
- ``console.ops``: I/O services (lifecycle, tracker, the live backend, learning, gathering): core, link, audit
  — never the UI, the CLI, textual or argparse;
- ``console.backend``: the seam the UI talks to: ground only;
- ``console.ui``: backend, ground, core, itself, textual — never link, ops, host or the CLI;
- ``console.commands`` + ``console.cli``: anything below; imported only by ``console.__main__``;
- ``console.sim``: stand-ins: ground, core.flags, the host's stdlib readers, itself; imported by the CLI (the demo)
  and tests only.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "console"

GROUND = ("console.model", "console.errors", "console.config", "console.paths")
CLI_LAYER = ("console.cli", "console.commands")
ENTRY_POINTS = {"console.__main__"}
"""``python -m console`` runs the CLI."""
IMPURE = ("asyncio", "subprocess", "socket", "asyncssh", "textual", "threading", "console.link", "console.ops",
          "console.ui", "console.commands", "console.cli", "console.backend", "console.sim", "console.audit")
"""What a pure core module may never import."""

ROOMS: dict[str, tuple[str, ...]] = {
    "console.model": GROUND, "console.errors": GROUND, "console.config": GROUND, "console.paths": GROUND,
    "console.host": ("console.host",),
    "console.link": ("console.link", "console.host", *GROUND),
    "console.core": ("console.core", "console.host", *GROUND),
    "console.audit": ("console.audit", "console.core", "console.host", *GROUND),
    "console.ops": ("console.ops", "console.core", "console.link", "console.audit", "console.backend", "console.host",
                    *GROUND),
    "console.backend": ("console.backend", *GROUND),
    "console.ui": ("console.ui", "console.backend", "console.core", *GROUND),
    "console.sim": ("console.sim", "console.core.flags", "console.host", *GROUND),  # host: its /proc readers
}
"""Room -> the console modules it may import (every import counted). The CLI may import anything."""

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
    graph = {m: {d for d, _ in imports_of(m) if d in MODULES and d != m} for m in MODULES}
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
    assert cycles == [], "import cycles (function-level and TYPE_CHECKING imports included): " + "; ".join(
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


def room_of(m: str) -> str | None:
    return next((r for r in sorted(ROOMS, key=len, reverse=True) if under(m, r)), None)


def test_every_module_lives_in_a_room():
    homeless = [m for m in MODULES if room_of(m) is None and not under(m, CLI_LAYER)
                and m not in ENTRY_POINTS and m != "console"]
    assert homeless == [], "a module outside every room: put it in a folder the rules know"


def test_each_room_imports_only_what_its_rule_allows():
    def rule(m: str, dep: str) -> str | None:
        room = room_of(m)
        if room is None or not under(dep, "console") or dep == "console":
            return None
        if not under(dep, ROOMS[room]):
            return f"{room} may import only {', '.join(ROOMS[room])}"
        return None
    assert violations(rule) == []


def test_core_stays_pure():
    def rule(m: str, dep: str) -> str | None:
        if under(m, "console.core") and under(dep, IMPURE):
            return "console.core holds pure functions over models (no I/O services, no loop, no UI)"
        return None
    assert violations(rule) == []


def test_the_sim_is_imported_only_by_the_cli():
    def rule(m: str, dep: str) -> str | None:
        if under(dep, "console.sim") and not under(m, ("console.sim", *CLI_LAYER)):
            return "stand-ins are for the demo (the CLI) and tests only"
        return None
    assert violations(rule) == []


def test_nothing_below_the_ui_imports_textual_or_rich():
    rich_ok = {"console.core.report_svg": "draws the incident report's panel as an SVG file with rich's recorder"}

    def rule(m: str, dep: str) -> str | None:
        if under(m, ("console.ui", *CLI_LAYER)) or (m in rich_ok and under(dep, "rich")):
            return None
        if under(dep, ("textual", "rich")):
            return "only the UI (and the CLI) draw"
        return None
    assert violations(rule) == []


def test_only_the_link_sends_requests():
    """``request(`` on a link is the client's private business: no ``link.request(`` outside console/link."""
    found = []
    for m, path in MODULES.items():
        if under(m, "console.link"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "request" \
                    and "link" in ast.unparse(node.func.value):
                found.append(f"{m}:{node.lineno}: {ast.unparse(node)[:80]}")
    assert found == [], "\n".join(found)


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
