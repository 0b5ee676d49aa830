"""Files shipped to hosts are stdlib-only and parse as Python 3.8.

The check runs in a fresh interpreter: CPython 3.11.7's ``ast.parse(feature_version=...)`` can
fail spuriously ("AST constructor recursion depth mismatch") inside a long test process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ["console/remote/agent.py", "console/remote/supervisor.py", "console/sim/simgpu.py"]
CHECK = """
import ast, json, sys
tree = ast.parse(open(sys.argv[1]).read(), feature_version=(3, 8))
mods = set()
for n in ast.walk(tree):
    if isinstance(n, ast.Import):
        mods.update(a.name.split(".")[0] for a in n.names)
    elif isinstance(n, ast.ImportFrom) and n.level == 0:
        mods.add((n.module or "").split(".")[0])
print(json.dumps(sorted(mods)))
"""
OPTIONAL = {"pynvml"}  # imported inside a try: absent hosts fall back to nvidia-smi


@pytest.mark.parametrize("rel", SHIPPED)
def test_shipped_file_is_py38_and_stdlib_only(rel):
    r = subprocess.run([sys.executable, "-c", CHECK, str(ROOT / rel)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    mods = set(json.loads(r.stdout)) - OPTIONAL
    assert "console" not in mods
    assert mods <= set(sys.stdlib_module_names), mods - set(sys.stdlib_module_names)
