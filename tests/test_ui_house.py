"""Issue 27, moves 5 and 6 (the UI's part): the GPU panels' screen owns its keys, the UI's parts reach the app
only through Protocols (no import of ``console.ui.app``, no private method of it), the three table screens share
one base and one CSS, and each fact the UI prints has one home — the step marks (a forced preflight reads ⚠
everywhere, never ``?``), the launch steps' count and the theme names."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import get_args

import pytest
from pydantic import ValidationError
from textual.command import CommandPalette
from textual.widgets import Static
from ui_fakes import NOW, FakeBackend, frozen_app, session, snapshot

from console.commands import tui
from console.commands._ops import step_printer
from console.config import THEME_NAMES, UiConfig, load_config
from console.core.text import LAUNCH_STEPS, STEP_MARKS, launch_progress, steps_line
from console.errors import ConfigError
from console.model import OperationResult, Step, StepState
from console.ui.app import MtpConsoleApp
from console.ui.log_follow import banner
from console.ui.main_screen import KEYS, MainScreen
from console.ui.screens.events import EventsScreen
from console.ui.screens.flag_form import FlagForm
from console.ui.screens.log_screen import LogScreen
from console.ui.screens.orphans import OrphanScreen
from console.ui.screens.sessions import SessionsScreen
from console.ui.screens.table import TableScreen
from console.ui.themes import NAMES
from console.ui.widgets.badge import badge_for
from console.ui.widgets.gpu_panel import GpuPanel
from tests.helpers.wait import stays, until

UI = Path(__file__).resolve().parents[1] / "console" / "ui"
SIZE = (140, 60)


def panel(app, idx: int, host: str = "host-a") -> GpuPanel:
    return next(p for p in app.query(GpuPanel) if p.host == host and p.index == idx)


# ---- one home per fact
def test_one_table_of_step_marks_covers_every_step_state():
    assert set(STEP_MARKS) == set(get_args(StepState))
    assert STEP_MARKS["warning"] == "⚠" and len(set(STEP_MARKS.values())) == len(STEP_MARKS)
    steps = [Step(name="preflight", state="warning"), Step(name="spawned", state="ok"),
             Step(name="on GPU", state="skipped")]
    assert steps_line(steps) == "⚠ preflight · ✓ spawned · – on GPU"


def test_the_cli_prints_a_forced_preflight_with_the_warning_mark(capsys):
    step_printer(False)([Step(name="preflight", state="warning", elapsed_s=0.1, evidence="forced"),
                         Step(name="spawned", state="skipped")])
    out = capsys.readouterr().out.splitlines()
    assert out == ["  ⚠ preflight (0.10 s): forced", "  – spawned: "]


def test_the_launching_count_is_the_number_of_launch_steps():
    from console.ops import lifecycle

    assert len(LAUNCH_STEPS) == 6 and launch_progress(None) == "0/6" and launch_progress(2) == "2/6"
    assert list(lifecycle.LAUNCH_STEPS) == list(LAUNCH_STEPS)  # the steps the lifecycle confirms, by name
    s = session("launching", "s-new", [0], step=2)
    assert badge_for(s, snapshot(), NOW, 1.0) == ("LAUNCHING 2/6", "launching")
    assert "LAUNCHING 2/6" in banner(s)


def test_theme_names_have_one_definition(tmp_path):
    assert NAMES is THEME_NAMES and tui.THEMES is THEME_NAMES
    assert THEME_NAMES == ("dark", "light", "high-contrast")
    with pytest.raises(ValidationError):
        UiConfig(theme="solarized")  # type: ignore[arg-type]
    p = tmp_path / "config.toml"
    p.write_text('[ui]\ntheme = "solarized"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"ui\.theme"):
        load_config(str(p))


# ---- the rooms inside console/ui
def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):  # every import, TYPE_CHECKING ones too
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def test_no_part_of_the_ui_imports_the_app_or_calls_its_private_methods():
    private = re.compile(r"\b(?:app|console|capp)\._[a-z]\w*\(")
    for path in sorted(UI.rglob("*.py")):
        if path.parent == UI and path.name in ("app.py", "__init__.py"):  # the app, and the package's make_app
            continue
        rel = path.relative_to(UI)
        assert "console.ui.app" not in _imports(path), f"{rel} imports console.ui.app (type it against protocols)"
        assert not private.findall(path.read_text(encoding="utf-8")), f"{rel} calls a private method of the app"
    app_text = (UI / "app.py").read_text(encoding="utf-8")
    assert "MAIN_ONLY" not in app_text


def test_the_three_tables_share_one_base_and_one_css():
    for screen in (SessionsScreen, EventsScreen, OrphanScreen):
        assert issubclass(screen, TableScreen)
        assert "DEFAULT_CSS" not in vars(screen), f"{screen.__name__} has CSS of its own"
    assert {SessionsScreen.DETAIL_LINES, EventsScreen.DETAIL_LINES, OrphanScreen.DETAIL_LINES} == {6, 4, 12}


def test_the_panels_screen_binds_its_keys_and_the_app_only_the_global_ones():
    assert {b.action for b in MtpConsoleApp.BINDINGS} == {"help", "quit", "cycle_theme"}
    mine = {b.action for b in MainScreen.BINDINGS}
    for action in ("launch", "kill", "relaunch", "edit", "sessions", "full_log", "orphans", "events", "advice",
                   "report", "compact", "filter_log", "next_panel(1)", "move_panel(0, 1)"):
        assert action in mine
    order = [b.key for b in KEYS if b.show]  # the footer's order: the key help (where the rest are), then l k r e
    assert order[:5] == ["question_mark", "l", "k", "r", "e"] and order[-1] == "q"


# ---- the same behaviour through the new owners
async def test_a_forced_preflight_reads_the_warning_mark_in_the_full_log():
    app = frozen_app(FakeBackend())
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: panel(app, 0))
        panel(app, 0).focus()
        await until(pilot, lambda: app.following == ("host-a", "s-ready"))

        async def forced(on_steps) -> OperationResult:
            return OperationResult(op="launch", host="host-a", ok=True, session_id="s-ready", state="ready",
                                   steps=[Step(name="preflight", state="warning"), Step(name="spawned", state="ok")])
        app.ops.run("launch · host-a · GPUs 0,1", "launch", "host-a", forced)
        await until(pilot, lambda: not app.op_busy and app.results)
        await pilot.press("z")
        await until(pilot, lambda: isinstance(app.screen, LogScreen))
        shown = await until(pilot, lambda: "steps:" in str(app.screen.query_one(".banner", Static).render())
                            and str(app.screen.query_one(".banner", Static).render()))
        assert "steps: ⚠ preflight · ✓ spawned" in shown and "?" not in shown.split("steps:")[1]


async def test_a_remapped_panel_key_works_and_the_old_key_does_nothing():
    app = frozen_app(FakeBackend(), keymap={"launch": "x"})
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: panel(app, 2))
        panel(app, 2).focus()
        await until(pilot, lambda: app.selected is panel(app, 2))
        await pilot.press("l")
        assert await stays(pilot, lambda: isinstance(app.screen, MainScreen), 0.3)  # l is no key now
        await pilot.press("x")
        await until(pilot, lambda: isinstance(app.screen, FlagForm))


async def test_the_panel_keys_act_only_on_the_panels_screen():
    app = frozen_app(FakeBackend())
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: panel(app, 0))
        panel(app, 0).focus()
        await until(pilot, lambda: app.selected is panel(app, 0))
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, SessionsScreen))
        await pilot.press("c", "k")  # the panels' compact and kill: not keys of the sessions table
        assert await stays(pilot, lambda: isinstance(app.screen, SessionsScreen) and not app.compact, 0.3)
        await pilot.press("ctrl+p")
        await until(pilot, lambda: isinstance(app.screen, CommandPalette))
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Keys (?)" in titles and "Theme (t)" in titles  # the app's own keys, on every screen
        assert not any(t.startswith(("Kill", "Launch", "Compact", "Sessions")) for t in titles), titles
