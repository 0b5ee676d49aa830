"""SVG snapshots of the issue-16 screens on fixed views: the sessions table (all, filtered, acknowledged),
the full-screen log (searching, wrapped), the orphan hunter and its kill dialog, the events, the kill dialog
that names what is hit, and the whole app at 80x24 with the log full screen.

Regenerate with ``pytest tests/test_ui_workflow_snapshots.py --snapshot-update`` and review the SVGs.
"""

from __future__ import annotations

from test_ui_workflow import view_with_orphan
from textual.widgets import DataTable
from ui_fakes import FakeBackend, frozen_app, started, view_a, view_b

from console.ui.screens.confirm import ConfirmScreen
from console.ui.screens.events import EventsScreen
from console.ui.screens.log_screen import LogScreen
from console.ui.screens.orphans import OrphanScreen
from console.ui.screens.sessions import SessionsScreen
from console.ui.widgets.gpu_panel import GpuPanel
from console.ui.widgets.log_pane import LogPane
from tests.helpers.wait import until


def table_rows(pilot, screen_type) -> int:
    """Rows of the table on the current screen when it is a ``screen_type`` (0 otherwise)."""
    screen = pilot.app.screen
    return screen.query_one(DataTable).row_count if isinstance(screen, screen_type) else 0


async def to_gpu(pilot, n: int, log_lines: int) -> None:
    """Host-a's GPU ``n - 1`` selected (GPU 0 is at start: tab ``n - 1`` times) and the log pane shows its session's
    ``log_lines``."""
    await started(pilot)
    await until(pilot, lambda: pilot.app.selected is not None and pilot.app.selected.index == 0)
    for _ in range(n - 1):
        await pilot.press("tab")
    app = pilot.app
    await until(pilot, lambda: next(p for p in app.query(GpuPanel) if p.index == n - 1).has_class("selected")
                and len(app.query_one(LogPane).lines) == log_lines)


def _app(views=None, **kw):
    return frozen_app(FakeBackend(views or [view_a(), view_b()]), **kw)


def test_sessions_table(snap_compare):
    async def run_before(pilot) -> None:
        await started(pilot)
        await pilot.press("s")
        await until(pilot, lambda: table_rows(pilot, SessionsScreen) == 4)
    assert snap_compare(_app(), terminal_size=(140, 24), run_before=run_before)


def test_sessions_table_failed_acknowledged(snap_compare):
    async def run_before(pilot) -> None:
        await started(pilot)
        await pilot.press("s", "f", "f", "a")
        await until(pilot, lambda: table_rows(pilot, SessionsScreen) == 1
                    and pilot.app.screen.query_one(DataTable).get_row_at(0)[-1] == "✓")
    assert snap_compare(_app(), terminal_size=(140, 24), run_before=run_before)


def test_full_log_search(snap_compare):
    async def run_before(pilot) -> None:
        await to_gpu(pilot, 3, log_lines=3)  # the FAILED session on GPU 2
        await pilot.press("z")
        await until(pilot, lambda: isinstance(pilot.app.screen, LogScreen) and len(pilot.app.screen.rows) == 3)
        await pilot.press("slash", *"memory", "enter")
        await until(pilot, lambda: pilot.app.screen.matches == [2])
    assert snap_compare(_app(), terminal_size=(120, 24), run_before=run_before)


def test_full_log_80x24_wrapped(snap_compare):
    async def run_before(pilot) -> None:
        await to_gpu(pilot, 1, log_lines=7)
        await pilot.press("z", "w")
        await until(pilot, lambda: isinstance(pilot.app.screen, LogScreen) and pilot.app.screen.wrap
                    and len(pilot.app.screen.lines) == 7 and len(pilot.app.screen.rows) > 7)
    assert snap_compare(_app(), terminal_size=(80, 24), run_before=run_before)


def test_orphans_screen(snap_compare):
    async def run_before(pilot) -> None:
        await started(pilot)
        await pilot.press("o")
        await until(pilot, lambda: table_rows(pilot, OrphanScreen) == 1)
    assert snap_compare(_app([view_with_orphan()]), terminal_size=(140, 24), run_before=run_before)


def test_orphan_kill_dialog(snap_compare):
    async def run_before(pilot) -> None:
        await started(pilot)
        await pilot.press("o", "k")
        await until(pilot, lambda: isinstance(pilot.app.screen, ConfirmScreen))
    assert snap_compare(_app([view_with_orphan()]), terminal_size=(120, 30), run_before=run_before)


def test_events_screen(snap_compare):
    backend = FakeBackend([view_a()])

    async def run_before(pilot) -> None:
        await started(pilot)
        backend.current["host-a"].event("foreign_appeared", "foreign server pid 5150 appeared on GPUs 3 (port 30003)",
                                        gpus=[3])
        backend.repush("host-a")
        await until(pilot, lambda: any(e.kind == "foreign_appeared" for e in pilot.app.views["host-a"].events))
        await pilot.press("v")
        await until(pilot, lambda: table_rows(pilot, EventsScreen) > 0)
    assert snap_compare(frozen_app(backend), terminal_size=(140, 20), run_before=run_before)


def test_kill_dialog_names_what_is_hit(snap_compare):
    async def run_before(pilot) -> None:
        await to_gpu(pilot, 1, log_lines=7)
        await pilot.press("k")
        await until(pilot, lambda: isinstance(pilot.app.screen, ConfirmScreen))
    assert snap_compare(_app(), terminal_size=(100, 30), run_before=run_before)
