"""Issue 26, the operator's night round 3, in the TUI: keys and footers that tell the truth on every screen (item 7),
the first GPU with a session selected at start (item 8), 80x24 that shows the cause, the whole command line
somewhere, y / n in the kill dialog — Pilot tests against the fake backend, and 80x24 snapshots (regenerate with
``pytest tests/test_ui_night.py --snapshot-update`` and review the SVGs)."""

from __future__ import annotations

from textual.command import CommandPalette
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Input
from ui_fakes import (
    ARGV,
    FakeBackend,
    failed,
    frozen_app,
    gpu,
    ready,
    snapshot,
    started,
    toasts,
    view_a,
    view_b,
    view_idle,
)

from console.model import GpuProc, HostView
from console.ui.main_screen import KEYS, MainScreen
from console.ui.screens.advice import AdviceScreen
from console.ui.screens.confirm import ConfirmScreen
from console.ui.screens.events import EventsScreen
from console.ui.screens.log_screen import LogScreen
from console.ui.screens.orphans import OrphanScreen
from console.ui.screens.sessions import SessionsScreen
from console.ui.widgets.footer import QuietFooter
from console.ui.widgets.gpu_panel import GpuPanel
from console.ui.widgets.key_help import KeyHelp, key_rows
from console.ui.widgets.log_pane import NO_SESSION, LogPane
from tests.helpers.wait import stays, until

SIZE = (140, 40)
DESTRUCTIVE_KEYS = {"l", "k", "r", "e", "x"}


def panel(app, index: int, host: str = "host-a") -> GpuPanel:
    return next(p for p in app.query(GpuPanel) if p.host == host and p.index == index)


def footer_keys(app) -> list[str]:
    """The keys the footer of the screen on top draws."""
    return [k for k, _shown, _desc, _enabled in app.screen.query_one(QuietFooter).keys]


def footer_text(app) -> str:
    return " ".join(f"{shown} {desc}" for _k, shown, desc, _e in app.screen.query_one(QuietFooter).keys)


async def focus(app, pilot, index: int, host: str = "host-a") -> None:
    panel(app, index, host).focus()
    await until(pilot, lambda: app.selected is panel(app, index, host))


# ---- item 7: keys and footers truthful on every screen
async def test_the_advice_dialog_footer_lists_its_own_keys_and_q_quits_there_too():
    be = FakeBackend()
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("i")
        await until(pilot, lambda: isinstance(app.screen, AdviceScreen) and app.screen.query(QuietFooter))
        await until(pilot, lambda: footer_keys(app) == ["question_mark", "e", "escape", "q"])
        assert footer_text(app) == "? Keys e Edit with suggestion esc Close q Quit"  # no "t Theme": not a key here
        await pilot.press("question_mark")  # the key help works in a dialog too
        await until(pilot, lambda: app.help_shown)
        await pilot.press("q")  # quits, as the footer says (it closed the dialog)
        await until(pilot, lambda: ("stop",) in be.calls)


async def test_the_kill_dialog_takes_y_and_n_with_the_focus_on_cancel():
    be = FakeBackend()
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await focus(app, pilot, 0)
        await pilot.press("k")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.focused is not None)
        assert app.screen.focused.id == "cancel" and footer_keys(app) == ["question_mark", "y", "n", "q"]
        await pilot.press("n")
        await until(pilot, lambda: isinstance(app.screen, MainScreen))
        assert not [c for c in be.calls if c[0] == "kill"]
        await pilot.press("k")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.focused is not None)
        assert app.screen.focused.id == "cancel"
        await pilot.press("y")
        kills = await until(pilot, lambda: [c for c in be.calls if c[0] == "kill"])
        assert kills[0][1].session_id == "s-ready"


async def test_read_only_offers_no_destructive_key_in_footers_key_help_or_palette():
    app = frozen_app(FakeBackend([view_a()]), read_only=True)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await until(pilot, lambda: app.screen.query_one(QuietFooter).keys)
        assert not DESTRUCTIVE_KEYS & set(footer_keys(app)) and {"s", "z", "question_mark"} <= set(footer_keys(app))
        keys = {k for row, _what in key_rows(app.screen) for k in row.split()}
        assert not DESTRUCTIVE_KEYS & keys and "s" in keys
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert not [t for t in titles if t.startswith(("Launch", "Kill", "Relaunch", "Edit", "Abort"))], titles
        await pilot.press("k")  # the key says why nothing happens
        await until(pilot, lambda: "read-only: kill disabled" in toasts(app))
        await pilot.press("i")
        await until(pilot, lambda: isinstance(app.screen, AdviceScreen) and app.screen.query_one(QuietFooter).keys)
        assert "e" not in footer_keys(app)
        await pilot.press("e")
        await until(pilot, lambda: "read-only: edit and relaunch disabled" in toasts(app))
        await pilot.press("escape", "o")
        await until(pilot, lambda: isinstance(app.screen, OrphanScreen) and app.screen.query_one(QuietFooter).keys)
        assert "k" not in footer_keys(app)


async def test_the_ack_toast_says_what_each_gpu_of_the_session_reads_now():
    v = view_a()  # the failed session ran on GPUs 2 and 3; a foreign server holds GPU 3 now
    sessions = [failed(gpus=(2, 3)) if s.session_id == "s-failed" else s for s in v.sessions]
    app = frozen_app(FakeBackend([v.model_copy(update={"sessions": sessions})]))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, SessionsScreen) and app.screen.rows)
        screen = app.screen
        screen.table.move_cursor(row=next(i for i, s in enumerate(screen.rows) if s.session_id == "s-failed"))
        await pilot.press("a")
        said = await until(pilot, lambda: [t for t in toasts(app) if t.startswith("acknowledged")])
        assert said == ["acknowledged s-failed: GPU 2 reads IDLE, GPU 3 reads FOREIGN"]
        assert (panel(app, 2).badge_label, panel(app, 3).badge_label) == ("IDLE", "FOREIGN")


async def test_t_names_the_theme_and_restyles_once():
    app = frozen_app(FakeBackend())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        whole: list[object] = []
        real_update, real_refresh = app.update_styles, app.refresh_css

        def update_styles(node, animate=True):
            if node is app:  # a class set on the app restyled every widget once more
                whole.append(node)
            return real_update(node, animate)

        def refresh_css(animate=True):
            whole.append("css")
            return real_refresh(animate)
        app.update_styles, app.refresh_css = update_styles, refresh_css
        await pilot.press("t")
        await until(pilot, lambda: app.theme == "textual-light" and "theme: light (t: high-contrast)" in toasts(app))
        assert await stays(pilot, lambda: whole == ["css"], 0.3)  # one restyle: the new theme's CSS
        await pilot.press("t")
        await until(pilot, lambda: "theme: high-contrast (t: dark)" in toasts(app))


async def test_the_key_help_is_built_once_per_screen_and_lists_what_each_key_does():
    app = frozen_app(FakeBackend())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("question_mark")
        await until(pilot, lambda: app.help_shown and app.screen.query_one(KeyHelp).rows)
        rows = dict(app.screen.query_one(KeyHelp).rows)
        assert rows["tab ⇧tab ← → ↑ ↓"] == "move between the GPU panels"  # six keys, one row
        for b in KEYS:
            assert b.tooltip in rows.values(), b.key
        assert not [w for w in rows.values() if w.startswith(("Scroll", "Page", "Copy"))]  # no widget's own keys
        await pilot.press("f1", "s")
        await until(pilot, lambda: isinstance(app.screen, SessionsScreen))
        await pilot.press("question_mark")
        await until(pilot, lambda: app.help_shown and app.screen.query_one(KeyHelp).rows)
        what = dict(app.screen.query_one(KeyHelp).rows)
        assert what["⏎"] == "open the session's log and its steps" and "1 2 3 4 5 6 7 8 9" in what
        await pilot.press("question_mark", "escape")
        await until(pilot, lambda: isinstance(app.screen, MainScreen))
        await pilot.press("f1")
        await until(pilot, lambda: app.help_shown)
        assert len(app.screen.query(KeyHelp)) == 1  # mounted once on this screen, shown again


async def test_the_filter_box_closes_when_it_is_cleared():
    app = frozen_app(FakeBackend())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        pane = app.query_one(LogPane)
        box = pane.query_one(".filter", Input)
        await until(pilot, lambda: pane.lines)
        await pilot.press("slash", *"Load", "enter")
        await until(pilot, lambda: pane.pattern == "Load" and box.has_class("-open") and not box.has_focus)
        await pilot.press("slash", "backspace", "backspace", "backspace", "backspace", "enter")
        await until(pilot, lambda: pane.pattern == "" and not box.has_class("-open"))
        await pilot.press("slash")
        await until(pilot, lambda: box.has_focus and box.has_class("-open"))
        await pilot.press("tab")  # left empty: closes
        await until(pilot, lambda: not box.has_focus and not box.has_class("-open"))


async def test_the_arrows_move_between_gpu_panels():
    app = frozen_app(FakeBackend())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await until(pilot, lambda: app.selected is panel(app, 0) and panel(app, 0).has_focus)
        await pilot.press("down")
        await until(pilot, lambda: app.selected is panel(app, 1) and panel(app, 1).has_focus)
        await pilot.press("right", "right")
        await until(pilot, lambda: app.selected is panel(app, 3))
        await pilot.press("up")
        await until(pilot, lambda: app.selected is panel(app, 2))


# ---- item 8: at start, the first GPU with a session
async def test_one_gpu_serving_is_selected_at_start_and_its_log_shown():
    view = HostView(snapshot=snapshot(gpus=[gpu(0, used=120_000, procs=[GpuProc(pid=4200, used_mib=118_000)])]),
                    sessions=[ready(gpus=(0,))])
    app = frozen_app(FakeBackend([view]))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        pane = app.query_one(LogPane)
        await until(pilot, lambda: app.following == ("host-a", "s-ready") and pane.lines)
        assert pane.banner_shown.startswith("session s-ready · READY") and NO_SESSION not in pane.banner_shown
        assert app.selected is panel(app, 0) and panel(app, 0).has_focus  # the keys act from there


async def test_the_first_gpu_with_a_session_is_selected_else_the_first_gpu():
    v = HostView(snapshot=snapshot(gpus=[gpu(0), gpu(1), gpu(2)]), sessions=[failed(gpus=(2,))])
    app = frozen_app(FakeBackend([v]))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await until(pilot, lambda: app.selected is panel(app, 2) and app.following == ("host-a", "s-failed"))
    app = frozen_app(FakeBackend([view_idle()]))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        pane = app.query_one(LogPane)
        await until(pilot, lambda: app.selected is panel(app, 0) and pane.banner_shown == "no server on host-a GPU 0")


async def test_a_later_session_does_not_move_the_operators_choice():
    be = FakeBackend([view_idle(n=3)])
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await until(pilot, lambda: app.selected is panel(app, 0))
        await focus(app, pilot, 1)  # the operator chose GPU 1
        be.push(HostView(snapshot=view_idle(n=3).snapshot, sessions=[failed(gpus=(2,))]))
        await until(pilot, lambda: panel(app, 2).badge_label.startswith("FAILED"))
        assert await stays(pilot, lambda: app.selected is panel(app, 1), 0.3)


# ---- 80x24
async def test_80x24_stacks_the_log_under_the_panels_at_the_full_width():
    app = frozen_app(FakeBackend())
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot)
        hosts, side, log = (app.screen.query_one(s) for s in ("#hosts", "#side", "#log"))
        await until(pilot, lambda: side.region.y >= hosts.region.bottom and log.region.width == 80)
        await pilot.resize_terminal(200, 50)
        await until(pilot, lambda: side.region.x >= hosts.region.right and side.region.y == hosts.region.y)


def test_80x24_main_screen_with_a_failed_panel(snap_compare):
    """The FAILED panel, compact, says its cause and the first words of its hint; its log under the panels."""
    async def run_before(pilot) -> None:
        app = pilot.app
        await started(pilot)
        await focus(app, pilot, 2)
        await until(pilot, lambda: app.following == ("host-a", "s-failed") and len(app.query_one(LogPane).lines) == 3)
    assert snap_compare(frozen_app(FakeBackend([view_a(), view_b()])), terminal_size=(80, 24), run_before=run_before)


def test_80x24_sessions_table(snap_compare):
    """STATE and CAUSE lead; HOST is a column (two hosts)."""
    async def run_before(pilot) -> None:
        await started(pilot)
        await pilot.press("s")
        await until(pilot, lambda: isinstance(pilot.app.screen, SessionsScreen)
                    and pilot.app.screen.query_one(DataTable).row_count == 4)
        pilot.app.screen.table.move_cursor(row=1)  # the FAILED one: its cause, hint and command line below
        await until(pilot, lambda: "FAILED" in str(pilot.app.screen.detail_box.render()))
    assert snap_compare(frozen_app(FakeBackend([view_a(), view_b()])), terminal_size=(80, 24), run_before=run_before)


def test_80x24_events_table(snap_compare):
    """KIND and WHAT lead; one host: no HOST column."""
    backend = FakeBackend([view_a()])

    async def run_before(pilot) -> None:
        await started(pilot)
        cur = backend.current["host-a"]
        cur.event("session_failed", "s-failed on GPU 2 failed: gpu_oom (Not enough memory)", session_id="s-failed",
                  gpus=[2])
        cur.event("foreign_appeared", "foreign server pid 5150 appeared on GPUs 3 (port 30003)", gpus=[3])
        backend.repush("host-a")
        await until(pilot, lambda: len(pilot.app.views["host-a"].events) >= 2)
        await pilot.press("v")
        await until(pilot, lambda: isinstance(pilot.app.screen, EventsScreen)
                    and pilot.app.screen.query_one(DataTable).row_count >= 2)
        pilot.app.clear_notifications()  # the events' toasts go after a while: not in the picture
    assert snap_compare(frozen_app(backend), terminal_size=(80, 24), run_before=run_before)


# ---- the whole command line is visible somewhere
LONG = [*ARGV, *[f"--extra-flag-{i}=value-{i}" for i in range(40)]]


async def test_the_sessions_detail_says_the_command_line_is_cut_and_enter_shows_it_whole():
    v = view_a()
    sessions = [s.model_copy(update={"argv": LONG}) if s.session_id == "s-failed" else s for s in v.sessions]
    app = frozen_app(FakeBackend([v.model_copy(update={"sessions": sessions})]))
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot)
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, SessionsScreen) and app.screen.rows)
        screen = app.screen
        screen.table.move_cursor(row=next(i for i, s in enumerate(screen.rows) if s.session_id == "s-failed"))
        detail = await until(pilot, lambda: "enter shows it all" in str(screen.detail_box.render())
                             and str(screen.detail_box.render()))
        assert len(detail.splitlines()) <= screen.DETAIL_LINES - 1 and "… (+" in detail.splitlines()[-1]
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, LogScreen))
        banner = await until(pilot, lambda: str(app.screen.query_one(".banner").render()))
        assert "--extra-flag-39=value-39" in banner.replace("\n", " ")  # the banner wraps all of it


async def test_the_relaunch_dialog_gives_every_flag_and_scrolls():
    v = view_a()
    sessions = [s.model_copy(update={"argv": LONG}) if s.session_id == "s-ready" else s for s in v.sessions]
    app = frozen_app(FakeBackend([v.model_copy(update={"sessions": sessions})]))
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot)
        await focus(app, pilot, 0)
        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.query(".dialog-body"))
        flags = next(line for line in app.screen.lines if line.startswith("flags:"))
        assert flags.endswith("--extra-flag-39=value-39") and "…" not in flags
        body = app.screen.query_one(".dialog-scroll", VerticalScroll)
        await until(pilot, lambda: body.max_scroll_y > 0)  # taller than the screen allows: it scrolls
        await pilot.press("pagedown")
        await until(pilot, lambda: body.scroll_y > 0)
        assert app.screen.focused.id == "cancel"


async def test_the_command_palette_lists_the_keys_by_their_display():
    app = frozen_app(FakeBackend())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("ctrl+p")
        await until(pilot, lambda: isinstance(app.screen, CommandPalette))
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Keys (?)" in titles and "Filter (/)" in titles and "Kill (k)" in titles



async def test_the_footer_draws_whole_keys_the_key_help_first_and_a_click_presses_a_key():
    app = frozen_app(FakeBackend())
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot)
        footer = app.screen.query_one(QuietFooter)
        await until(pilot, lambda: footer.spans)
        line = footer.render().plain
        assert line.startswith(" ? Keys  l Launch  k Kill") and line.rstrip().endswith("▏^p palette")
        drawn = [key for _start, _end, key in footer.spans]
        assert drawn[0] == "question_mark" and "z" not in drawn  # no room for "z Full log": not half drawn
        assert "Full lo" not in line
        start = next(s for s, _e, key in footer.spans if key == "s")
        await pilot.click(QuietFooter, offset=(start + 2, 0))
        await until(pilot, lambda: isinstance(app.screen, SessionsScreen))
        await pilot.press("escape", "z")
        await until(pilot, lambda: isinstance(app.screen, LogScreen) and app.screen.query_one(QuietFooter).keys)
        assert footer_keys(app)[0] == "question_mark"  # on every screen


async def test_a_theme_switch_parses_no_css_once_the_themes_are_warm(monkeypatch):
    """In idle time after the start every other theme's CSS is parsed: t then parses none (first round or later),
    and each theme's own colours are there."""
    from textual.css.stylesheet import Stylesheet

    from console.ui.themes import NAMES, css_variables

    parsed: list[str] = []
    real = Stylesheet._parse_rules

    def parse_rules(self, css, *a, **kw):
        parsed.append(css[:60])
        return real(self, css, *a, **kw)
    monkeypatch.setattr(Stylesheet, "_parse_rules", parse_rules)
    app = frozen_app(FakeBackend())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await until(pilot, lambda: all(app.theme_css.is_warm(css_variables(app, n)) for n in NAMES))
        first = len(parsed)
        background = {}
        for _ in range(2):
            for name in ("textual-light", "mtp-high-contrast", "textual-dark"):
                await pilot.press("t")
                await until(pilot, lambda: app.theme == name)  # noqa: B023  (awaited in this turn)
                await pilot.pause()
                background.setdefault(name, app.screen.styles.background)
                assert app.screen.styles.background == background[name]
        assert await stays(pilot, lambda: len(parsed) == first, 0.3), parsed[first:]  # no source parsed again
        assert len(set(background.values())) == 3  # three themes, three backgrounds
        assert app.screen.query_one(GpuPanel).styles.border.top[0] == "round"  # and the styles are there
