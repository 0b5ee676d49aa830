"""Issue 31 item 5: the fleet overview screen (``f``; the start screen at FLEET_START_GPUS GPUs or more): one row
per host from ``console.core.fleet`` (trouble first), ``/`` filters, Enter opens the host's GPU panels."""

from __future__ import annotations

from textual.widgets import DataTable, Input
from ui_fakes import FakeBackend, frozen_app, started, view_a, view_b, view_idle

from console.ui.main_screen import MainScreen
from console.ui.screens.fleet import FLEET_START_GPUS, FleetScreen
from tests.helpers.wait import until

SIZE = (140, 50)


def rows(app) -> list[str]:
    t = app.screen.query_one(DataTable)
    return [str(t.get_row_at(i)[0]) for i in range(t.row_count)]


async def test_f_opens_the_overview_trouble_first_filter_and_enter_opens_the_host():
    be = FakeBackend([view_idle("host-c", 2), view_b(), view_a()])
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        assert isinstance(app.screen, MainScreen)  # 8 GPUs: below the threshold, the panels come first
        await pilot.press("f")
        await until(pilot, lambda: isinstance(app.screen, FleetScreen) and rows(app))
        assert rows(app) == ["host-a", "host-b", "host-c"]  # host-a has a FAILED session: first
        first = app.screen.query_one(DataTable).get_row_at(0)
        assert first[3] == "●●✗◆" and first[6].startswith("FAILED")
        await pilot.press("slash")
        await until(pilot, lambda: app.screen.query_one(Input).has_focus)
        for ch in "host-b":
            await pilot.press(ch)  # an "f" or "/" typed here is text, not a key of the screen
        await pilot.press("enter")
        await until(pilot, lambda: rows(app) == ["host-b"])
        await pilot.press("escape")  # clears the filter first
        await until(pilot, lambda: rows(app) == ["host-a", "host-b", "host-c"])
        assert app.screen.selected().host == "host-b"  # the row highlighted while filtered stays highlighted
        await pilot.press("enter")  # host-b: its panels, its first GPU selected
        await until(pilot, lambda: isinstance(app.screen, MainScreen))
        await until(pilot, lambda: app.selected is not None and app.selected.host == "host-b")
        assert app.selected.index == 0


async def test_a_fleet_past_the_threshold_starts_on_the_overview():
    hosts = FLEET_START_GPUS // 8 + 1
    be = FakeBackend([view_idle(f"gpu-{i:02d}", 8) for i in range(hosts)])
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, FleetScreen) and len(rows(app)) == hosts, timeout=15)
        assert rows(app)[0] == "gpu-00"
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, MainScreen))


async def test_an_audit_entry_before_the_audit_pane_is_mounted_is_kept():
    """A large fleet's start composes thousands of GPU panels first; the app's log flush could then give the audit
    pane an entry before its on_mount added the columns ("More values provided than there are columns")."""
    from console.model import AuditEntry
    from console.ui.widgets.audit import AuditPane

    app = frozen_app(FakeBackend([view_idle("host-a", 1)]))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        pane = AuditPane()  # not mounted: no on_mount yet
        pane.add_entry(AuditEntry(at=1.0, host="host-a", op="agent.start", ok=True))
        assert pane.row_count == 1 and len(pane.columns) == 6
        await app.screen.mount(pane)
        await pilot.pause()
        assert len(pane.columns) == 6  # on_mount adds none twice
