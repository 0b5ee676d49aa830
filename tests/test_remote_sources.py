"""Files shipped to hosts are stdlib-only, parse as Python 3.8, import only each other, and every
host-side fact has one definition.

The check runs in a fresh interpreter: CPython 3.11.7's ``ast.parse(feature_version=...)`` can
fail spuriously ("AST constructor recursion depth mismatch") inside a long test process.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from console.link.protocol import shipped_modules

ROOT = Path(__file__).resolve().parents[1]
REMOTE = ROOT / "console" / "host"
SHIPPED_MODULES = shipped_modules()
SHIPPED = [f"console/host/{m}.py" for m in SHIPPED_MODULES] + ["console/host/shipboot.py",
                                                                  "console/sim/simgpu.py"]
CHECK = """
import ast, json, sys
tree = ast.parse(open(sys.argv[1]).read(), feature_version=(3, 8))
mods, rel = set(), set()
for n in ast.walk(tree):
    if isinstance(n, ast.Import):
        mods.update(a.name.split(".")[0] for a in n.names)
    elif isinstance(n, ast.ImportFrom) and n.level == 0:
        mods.add((n.module or "").split(".")[0])
    elif isinstance(n, ast.ImportFrom):
        rel.add((n.level, n.module or ""))
print(json.dumps({"mods": sorted(mods), "rel": sorted(rel)}))
"""
OPTIONAL = {"pynvml"}  # imported inside a try: absent hosts fall back to nvidia-smi


@pytest.mark.parametrize("rel", SHIPPED)
def test_shipped_file_is_py38_and_stdlib_only(rel):
    r = subprocess.run([sys.executable, "-c", CHECK, str(ROOT / rel)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    found = json.loads(r.stdout)
    mods = set(found["mods"]) - OPTIONAL
    assert "console" not in mods
    assert mods <= set(sys.stdlib_module_names), mods - set(sys.stdlib_module_names)
    for level, module in found["rel"]:  # relative imports: only siblings that are shipped too
        assert level == 1 and module in SHIPPED_MODULES, (level, module)


def test_every_module_of_the_host_folder_is_shipped():
    """The folder is the list: every module of console/host but the package marker and the loader is shipped,
    and a sibling a shipped module imports is shipped too (else the host fails to import it)."""
    assert set(SHIPPED_MODULES) == {p.stem for p in REMOTE.glob("*.py")} - {"__init__", "shipboot"}
    for name in SHIPPED_MODULES:
        tree = ast.parse((REMOTE / f"{name}.py").read_text())
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and n.level:
                assert n.module in SHIPPED_MODULES, f"{name}.py imports .{n.module}, which is not shipped"


ONE_DEFINITION = ("RUN_SPEC", "RUN_RECORD", "RUN_LOG", "RUN_SUPERVISOR_LOG", "RUN_STOP_REQUEST", "RUN_EXIT",
                  "RUN_EXITS", "SESSION_ENV", "SESSION_ID_RE", "SECRET_FLAGS", "TOKEN_PATTERNS", "CLK_TCK",
                  "PAGE_KIB", "AGENT_VERSION", "SERVER_PATTERNS", "MAX_LOG_CHUNK")
ONE_FUNCTION = ("atomic_write_json", "load_json", "read_oom_kill", "boot_id", "proc_stat", "mask_argv",
                "mask_text", "read_chunk", "decode_wait_status", "merge_exits", "first_abnormal_exit")


def test_each_host_fact_has_one_definition():
    """Constants, patterns and helpers shared by the agent, the supervisor and the console are assigned
    (or defined) in exactly one file of the console package; everyone else imports them."""
    assigned: dict[str, list[str]] = {}
    defined: dict[str, list[str]] = {}
    for path in sorted((ROOT / "console").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for n in tree.body:
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    if isinstance(t, ast.Name):
                        assigned.setdefault(t.id, []).append(str(path.relative_to(ROOT)))
            elif isinstance(n, (ast.FunctionDef, ast.ClassDef)):
                defined.setdefault(n.name, []).append(str(path.relative_to(ROOT)))
    for name in ONE_DEFINITION:
        assert len(assigned.get(name, [])) == 1, (name, assigned.get(name))
    for name in ONE_FUNCTION:
        assert len(defined.get(name, [])) == 1, (name, defined.get(name))
    assert "SECRET_FLAGS" not in assigned or assigned["SECRET_FLAGS"] == ["console/host/hostsecrets.py"]


def test_shipped_modules_run_from_the_bootstrap_alone(tmp_path):
    """The bootstrap installs the shipped modules in a bare interpreter (no console package on the path)
    and the agent answers hello."""
    from console.link.protocol import BOOTSTRAP, shipped_payload

    p = subprocess.run([sys.executable, "-I", "-S", "-u", "-c", BOOTSTRAP], cwd=tmp_path, timeout=30,
                       input=(json.dumps(shipped_payload()) + "\n" + json.dumps(
                           {"runs_dir": str(tmp_path / "runs"), "gpu_source": "none", "interval": 5}) + "\n"
                           + json.dumps({"id": 1, "op": "ping"}) + "\n").encode(), capture_output=True)
    lines = [json.loads(x) for x in p.stdout.decode().splitlines()]
    assert lines and lines[0]["type"] == "ready", p.stderr.decode()[-2000:]
    assert lines[0]["hello"]["gpu_source"] == "none"
    assert any(m.get("id") == 1 and m.get("ok") for m in lines), lines
