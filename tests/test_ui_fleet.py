"""Issue 31 item 5: the fleet overview screen (``f``; the start screen at FLEET_START_GPUS GPUs or more): one row
per host from ``console.core.fleet`` (trouble first), ``/`` filters, Enter opens the host's GPU panels."""

from __future__ import annotations

from textual.widgets import DataTable, Input
from ui_fakes import FakeBackend, frozen_app, gpu, snapshot, started, view_a, view_b, view_idle

from console.model import HostView
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


async def test_one_overview_for_the_app_and_no_refresh_while_it_is_not_on_top():
    """Issue 31: ``f`` pushes the same overview again (not a new screen of 512 new rows), and a closed overview does
    no refresh work: its once-a-second tick is paused and does nothing unless the screen is on top."""
    be = FakeBackend([view_idle("host-c", 2), view_b(), view_a()])
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("f")
        await until(pilot, lambda: isinstance(app.screen, FleetScreen) and rows(app))
        fleet = app.screen
        table = fleet.query_one(DataTable)
        finds = []
        real = fleet.find
        fleet.find = lambda: finds.append(1) or real()
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, MainScreen))
        finds.clear()
        fleet.tick()  # a tick that fired anyway does nothing in the background
        await pilot.pause(2.5)  # two ticks' time
        assert finds == [] and not fleet.ticker._active.is_set()
        await pilot.press("f")
        await until(pilot, lambda: isinstance(app.screen, FleetScreen))
        assert app.screen is fleet and fleet.query_one(DataTable) is table  # the same screen, its rows kept
        assert finds and rows(app) == ["host-a", "host-b", "host-c"] and fleet.ticker._active.is_set()


async def test_the_rows_are_updated_in_place_order_and_cells_follow_the_views():
    """The table is not cleared for a change: a changed cell is updated, the order follows the trouble (a sort),
    a filter removes and adds rows; every row's cells stay those of the views."""
    be = FakeBackend([view_idle("host-c", 2), view_b(), view_a()])
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("f")
        await until(pilot, lambda: isinstance(app.screen, FleetScreen) and rows(app))
        fleet = app.screen
        table = fleet.query_one(DataTable)
        cleared = []
        real_clear = table.clear
        table.clear = lambda *a, **k: cleared.append(1) or real_clear(*a, **k)
        app.views["host-c"] = HostView(snapshot=snapshot("host-c", gpus=[gpu(0), gpu(1)], state="unreachable"),
                                       sessions=[])
        fleet.refresh_rows()
        await pilot.pause()
        assert rows(app)[:2] == ["host-a", "host-c"] and cleared == []  # host-c now UNREACHABLE: moved up by a sort
        for i, r in enumerate(fleet.rows):
            assert [str(c) for c in table.get_row_at(i)] == list(fleet._drawn[i])
        fleet.filter_text = "host-b"
        fleet.refresh_rows()
        assert rows(app) == ["host-b"]  # two of three gone: the one left drawn on an emptied table
        cleared.clear()
        fleet.filter_text = ""
        fleet.refresh_rows()
        assert rows(app) == ["host-a", "host-c", "host-b"] and cleared == []  # added back, sorted into place
        for i, r in enumerate(fleet.rows):
            assert [str(c) for c in table.get_row_at(i)] == list(fleet._drawn[i])


async def test_the_gpu_panels_are_not_aged_under_the_overview_and_are_aged_when_shown_again():
    """At 512 hosts the panels' once-a-second age redraw cost 100 ms or more and landed in the overview's keys: it
    does nothing while another screen is on top, and runs once when the panels are the screen again."""
    be = FakeBackend([view_idle("host-c", 2), view_b(), view_a()])
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        aged = []
        section = app.main.section("host-a")
        real = section.age
        section.age = lambda *a: aged.append(1) or real(*a)
        await pilot.press("f")
        await until(pilot, lambda: isinstance(app.screen, FleetScreen))
        aged.clear()
        app.pipeline.refresh_ages()  # the app's tick, under the overview
        assert aged == []
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, MainScreen) and aged)


async def test_a_filter_sets_the_fleet_rows_aside_and_clearing_it_puts_them_back_up_to_date():
    """Issue 31: a filter that leaves a few hosts sets the others' table rows aside (not removed, not added again
    when it is cleared: 511 rows measured again cost 150-300 ms a key); a host that changed meanwhile is shown as it
    is now once the filter is cleared, and the row highlighted while filtered stays highlighted."""
    be = FakeBackend([view_idle("host-c", 2), view_b(), view_a()])
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("f")
        await until(pilot, lambda: isinstance(app.screen, FleetScreen) and rows(app))
        fleet = app.screen
        table = fleet.query_one(DataTable)
        added = []
        real_add = table.add_row
        table.add_row = lambda *a, **k: added.append(k.get("key")) or real_add(*a, **k)
        await pilot.press("slash", *"host-c", "enter")
        await until(pilot, lambda: rows(app) == ["host-c"])
        assert fleet.aside is not None and added == ["host-c"]
        app.views["host-a"] = HostView(snapshot=snapshot("host-a", gpus=[gpu(0), gpu(1)], state="unreachable"),
                                       sessions=[])
        fleet.refresh_rows()  # a tick while filtered: host-a's row (not shown) is found again
        added.clear()
        await pilot.press("escape")
        await until(pilot, lambda: len(rows(app)) == 3)
        assert added == [] and fleet.aside is None
        assert rows(app) == ["host-a", "host-b", "host-c"] and fleet.selected().host == "host-c"
        assert table.get_row_at(0)[1] == "unreachable"
        for i, r in enumerate(fleet.rows):
            assert [str(c) for c in table.get_row_at(i)] == list(fleet._drawn[i])


async def test_the_age_tick_redraws_only_the_host_sections_in_view():
    """Issue 31: the once-a-second age redraw touches the host sections on screen only (at 512 hosts all 4096
    panels' redraw took ~450 ms a second on 2 cores and delayed every key); one scrolled into view is aged by the
    next tick."""
    be = FakeBackend([view_a()] + [view_idle(f"host-{i:02d}", 4) for i in range(12)])  # under FLEET_START_GPUS:
    app = frozen_app(be)  # the GPU panels stay the start screen (no overview pushed over them mid-test)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await until(pilot, lambda: len(app.views) == 13 and app.main.shown)
        await pilot.pause()
        sections = {h: app.main.section(h) for h in ["host-a"] + [f"host-{i:02d}" for i in range(12)]}
        aged: list[str] = []
        for host, sec in sections.items():
            real = sec.age
            sec.age = (lambda h, r: lambda *a: aged.append(h) or r(*a))(host, real)
        app.pipeline.refresh_ages()
        on = {h for h, s in sections.items() if app.main.in_view(s)}
        assert on and len(on) < len(sections), on  # the test needs some sections out of view
        assert set(aged) == on


async def test_the_overview_shown_again_is_restyled_only_when_the_theme_or_css_changed_meanwhile():
    """Issue 31: Textual restyles a resumed screen, which empties the table's render caches (every visible cell
    rendered again: ~100 ms of ``f`` at 512 hosts). Nothing changed while it was hidden: no restyle; a theme switched
    meanwhile (``t`` on the GPU panels): restyled, the table in the new theme's colours."""
    be = FakeBackend([view_idle("host-c", 2), view_b(), view_a()])
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("f")
        await until(pilot, lambda: isinstance(app.screen, FleetScreen))
        fleet = app.screen
        restyled: list[int] = []
        real = fleet.update_node_styles
        fleet.update_node_styles = lambda *a, **k: restyled.append(1) or real(*a, **k)
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, MainScreen))
        await pilot.press("f")
        await until(pilot, lambda: app.screen is fleet)
        await pilot.pause()
        assert restyled == []
        before = fleet.query_one(DataTable).styles.background
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, MainScreen))
        await pilot.press("t")
        await pilot.pause()
        await pilot.press("f")
        await until(pilot, lambda: app.screen is fleet and bool(restyled))
        await pilot.pause()
        assert fleet.query_one(DataTable).styles.background != before
