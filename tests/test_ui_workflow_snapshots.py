"""SVG snapshots of the issue-16 screens on fixed views: the sessions table (all, filtered, acknowledged),
the full-screen log (searching, wrapped), the orphan hunter and its kill dialog, the events, the kill dialog
that names what is hit, and the whole app at 80x24 with the log full screen.

Regenerate with ``pytest tests/test_ui_workflow_snapshots.py --snapshot-update`` and review the SVGs.
"""

from __future__ import annotations

from test_ui_workflow import view_with_orphan
from ui_fakes import FakeBackend, frozen_app, view_a, view_b

from console.ui.screens.events import EventsScreen
from tests.helpers.rel_util import wait_until


async def settle(pilot) -> None:
    await pilot.pause(0.3)


async def to_gpu(pilot, n: int) -> None:
    await settle(pilot)
    for _ in range(n):
        await pilot.press("tab")
    await settle(pilot)


def _app(views=None, **kw):
    return frozen_app(FakeBackend(views or [view_a(), view_b()]), **kw)


def test_sessions_table(snap_compare):
    async def run_before(pilot) -> None:
        await settle(pilot)
        await pilot.press("s")
        await settle(pilot)
    assert snap_compare(_app(), terminal_size=(140, 24), run_before=run_before)


def test_sessions_table_failed_acknowledged(snap_compare):
    async def run_before(pilot) -> None:
        await settle(pilot)
        await pilot.press("s", "f", "f", "a")
        await settle(pilot)
    assert snap_compare(_app(), terminal_size=(140, 24), run_before=run_before)


def test_full_log_search(snap_compare):
    async def run_before(pilot) -> None:
        await to_gpu(pilot, 3)  # the FAILED session on GPU 2
        await pilot.press("z")
        await settle(pilot)
        await pilot.press("slash", *"memory", "enter")
        await settle(pilot)
    assert snap_compare(_app(), terminal_size=(120, 24), run_before=run_before)


def test_full_log_80x24_wrapped(snap_compare):
    async def run_before(pilot) -> None:
        await to_gpu(pilot, 1)
        await pilot.press("z", "w")
        await settle(pilot)
    assert snap_compare(_app(), terminal_size=(80, 24), run_before=run_before)


def test_orphans_screen(snap_compare):
    async def run_before(pilot) -> None:
        await settle(pilot)
        await pilot.press("o")
        await settle(pilot)
    assert snap_compare(_app([view_with_orphan()]), terminal_size=(140, 24), run_before=run_before)


def test_orphan_kill_dialog(snap_compare):
    async def run_before(pilot) -> None:
        await settle(pilot)
        await pilot.press("o", "k")
        await settle(pilot)
    assert snap_compare(_app([view_with_orphan()]), terminal_size=(120, 30), run_before=run_before)


def test_events_screen(snap_compare):
    backend = FakeBackend([view_a()])

    async def run_before(pilot) -> None:
        await settle(pilot)
        backend.current["host-a"].event("foreign_appeared", "foreign server pid 5150 appeared on GPUs 3 (port 30003)",
                                        gpus=[3])
        backend.repush("host-a")
        # conditions, not a fixed number of frames: a busy CI machine takes longer to apply a push
        await wait_until(lambda: any(e.kind == "foreign_appeared" for e in pilot.app.views["host-a"].events), 10)
        await settle(pilot)
        await pilot.press("v")
        await wait_until(lambda: isinstance(pilot.app.screen, EventsScreen) and pilot.app.screen.events, 10)
        await settle(pilot)
    assert snap_compare(frozen_app(backend), terminal_size=(140, 20), run_before=run_before)


def test_kill_dialog_names_what_is_hit(snap_compare):
    async def run_before(pilot) -> None:
        await to_gpu(pilot, 1)
        await pilot.press("k")
        await settle(pilot)
    assert snap_compare(_app(), terminal_size=(100, 30), run_before=run_before)
