"""The TUI's first frame does not wait for what only a key needs (issue 16, first frame with data).

``console/commands/tui.py`` imports ``UI_MODULES`` before the app starts and ``LATER_MODULES`` in the
background once the first frames are drawn: a top-level import that drags one of the later modules into
the start would silently add its cost to every start again.
"""

from __future__ import annotations

import json
import subprocess
import sys

from console.commands.tui import LATER_MODULES, UI_MODULES


def _fresh(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          timeout=120).stdout


def test_start_imports_none_of_the_later_modules() -> None:
    out = _fresh("import json, sys, importlib\n"
                 f"for m in {list(UI_MODULES)!r}: importlib.import_module(m)\n"
                 f"print(json.dumps([m for m in {list(LATER_MODULES)!r} if m in sys.modules]))")
    assert json.loads(out) == []


def test_later_modules_import() -> None:
    out = _fresh("import importlib\n"
                 f"for m in {list(LATER_MODULES)!r}: importlib.import_module(m)\n"
                 "print('ok')")
    assert out.strip() == "ok"
