"""Issue 16 at the Pilot level: the sessions table (s: enter, a, sort, filter), the full-screen log (z: /, n, N,
d, w, end), the orphan hunter (o: k behind the Cancel-focused dialog), the events (v), arrow keys between
panels, and the dialogs that name what is hit — each key on the real app with the fake backend."""

from __future__ import annotations

import pytest
from textual.widgets import Button, DataTable

from console.model import GpuProc, HostView, ProcRef, ServerProc
from console.ui.screens.confirm import ConfirmScreen
from console.ui.screens.events import EventsScreen
from console.ui.screens.log_screen import LogScreen
from console.ui.screens.orphans import OrphanScreen
from console.ui.screens.sessions import SessionsScreen
from console.ui.widgets.gpu_panel import GpuPanel
from console.ui.widgets.key_help import KeyHelp
from console.ui.widgets.log_pane import LogPane
from tests.helpers.wait import until
from tests.ui_fakes import NOW, FakeBackend, frozen_app, gpu, proc, snapshot, started, toasts, view_a

SIZE = (160, 50)


def view_with_orphan() -> HostView:
    """host-a plus an sglang::scheduler adopted by init holding 9 GiB on GPU 2, whose launcher the agent saw die."""
    v = view_a()
    orphan = ServerProc(pid=7777, ppid=1, pgid=7777, sid=7777, start_ticks=4242, state="S", user="op", uid=1000,
                        argv=["sglang::scheduler"], role="worker", framework="sglang", gpu_mem_mib={2: 9216},
                        reparented_from=ProcRef(pid=7700, state="X", argv=["python -m sglang.launch_server"]))
    gpus = [g if g.index != 2 else gpu(2, used=9300, procs=[GpuProc(pid=7777, used_mib=9216)])
            for g in v.snapshot.gpus]
    snap = v.snapshot.model_copy(update={"servers": [*v.snapshot.servers, orphan], "gpus": gpus, "agent_uid": 1000})
    return v.model_copy(update={"snapshot": snap})


def panel(app, index: int, host: str = "host-a") -> GpuPanel:
    return next(p for p in app.query(GpuPanel) if p.host == host and p.index == index)


def selected(app) -> GpuPanel | None:
    """The panel drawn as selected."""
    return next((p for p in app.query(GpuPanel) if p.has_class("selected")), None)


def compact(app) -> bool:
    """The GPU panels are laid out as the compact grid."""
    return app.query_one(".gpus").styles.layout.name == "grid"


def dialog_up(app) -> bool:
    """A confirmation dialog is up with its Cancel button focused (the default)."""
    return isinstance(app.screen, ConfirmScreen) and app.focused is not None and app.focused.id == "cancel"


async def select_gpu(pilot, app, index: int) -> None:
    await started(pilot)
    panel(app, index).focus()
    await until(pilot, lambda: panel(app, index).has_class("selected"))


async def test_s_opens_the_sessions_table_sorts_filters_and_acknowledges():
    backend = FakeBackend()
    app = frozen_app(backend)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        assert app.views["host-a"].counts.get("failed") == 1
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, SessionsScreen) and app.screen.rows)
        screen = app.screen
        keys = [s.session_id or f"pid {s.launcher_pid}" for s in screen.rows]
        assert set(keys) == {"s-ready", "s-failed", "pid 5150"}
        await pilot.press("4")  # sort by SESSION / PID (STATE, CAUSE, GPU, SESSION: one host, no HOST column)
        await until(pilot, lambda: [s.session_id for s in screen.rows][:2] == ["s-failed", "s-ready"])
        await pilot.press("4")  # again: reversed
        await until(pilot, lambda: screen.reverse and screen.rows[-1].session_id == "s-failed")
        await pilot.press("f", "f")  # all -> live -> failed
        await until(pilot, lambda: screen.flt == "failed" and [s.session_id for s in screen.rows] == ["s-failed"])
        await pilot.press("a")
        await until(pilot, lambda: screen.query_one(DataTable).get_row_at(0)[-1] == "✓")
        assert ("acknowledge", "host-a", "s-failed") in backend.calls
        assert app.views["host-a"].counts.get("failed") is None  # the header count drops
        cur = app.views["host-a"].current_of(2)
        assert cur is not None and cur.session is None  # GPU 2 reads IDLE
        assert screen.rows[0].acknowledged
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, SessionsScreen))


async def test_a_refuses_a_live_session_and_enter_opens_its_log_full_screen():
    app = frozen_app(FakeBackend())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, SessionsScreen) and app.screen.rows)
        screen = app.screen
        row = next(i for i, s in enumerate(screen.rows) if s.session_id == "s-ready")
        screen.query_one(DataTable).move_cursor(row=row)
        await pilot.press("a")
        await until(pilot, lambda: toasts(app) and toasts(app)[-1].startswith("only an ended session can be acknowledged"))
        assert not screen.rows[row].acknowledged
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, LogScreen) and app.screen.lines)
        log = app.screen
        assert log.key == ("host-a", "s-ready")
        assert any("ready to roll" in x for x in log.lines)


async def test_z_full_screen_log_search_next_decisive_wrap_and_back():
    app = frozen_app(FakeBackend())
    async with app.run_test(size=SIZE) as pilot:
        await select_gpu(pilot, app, 2)  # the FAILED session
        await until(pilot, lambda: len(app.query_one(LogPane).lines) == 3)
        await pilot.press("z")
        await until(pilot, lambda: isinstance(app.screen, LogScreen) and len(app.screen.lines) == 3)
        screen = app.screen
        assert screen.key == ("host-a", "s-failed") and screen.following
        await pilot.press("slash")
        await pilot.press(*"memory")
        await pilot.press("enter")
        await until(pilot, lambda: screen.term == "memory" and screen.matches == [2])
        assert not screen.following
        await pilot.press("n")  # the only match: n and N both land on it
        await pilot.press("N")
        await until(pilot, lambda: screen.match_i == 0)
        await pilot.press("end")
        await until(pilot, lambda: screen.following)
        await pilot.press("d")
        await until(pilot, lambda: not screen.following)  # at the decisive line
        await pilot.press("w")
        await until(pilot, lambda: screen.wrap)
        # new lines of the session arrive while it is open, and show
        app.backend.on_log("host-a", "s-failed", ["late line after the failure"])
        await until(pilot, lambda: screen.lines[-1] == "late line after the failure")
        await pilot.press("z")
        await until(pilot, lambda: not isinstance(app.screen, LogScreen))


async def test_o_orphan_hunter_kill_needs_the_dialog_with_cancel_focused():
    backend = FakeBackend([view_with_orphan()])
    app = frozen_app(backend)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("o")
        await until(pilot, lambda: isinstance(app.screen, OrphanScreen) and app.screen.orphans)
        screen = app.screen
        assert [o.pid for o in screen.orphans] == [7777]
        await pilot.press("k")
        await until(pilot, lambda: dialog_up(app))
        dialog = app.screen
        body = "\n".join(dialog.lines)
        assert "pid:      7777 (start 4242" in body and "9,216 MiB on GPU 2" in body and "parent pid 7700" in body
        await pilot.press("enter")  # Cancel
        await until(pilot, lambda: app.screen is screen)
        assert not any(c[0] == "kill" for c in backend.calls)
        await pilot.press("k")
        await until(pilot, lambda: dialog_up(app))
        app.screen.query_one("#confirm", Button).press()
        kills = await until(pilot, lambda: [c[1] for c in backend.calls if c[0] == "kill"])
        assert kills[0].pid == 7777 and kills[0].start_ticks == 4242 and kills[0].session_id is None


async def test_o_in_read_only_refuses_the_kill():
    app = frozen_app(FakeBackend([view_with_orphan()]), read_only=True)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("o")
        await until(pilot, lambda: isinstance(app.screen, OrphanScreen) and app.screen.orphans)
        await pilot.press("k")
        await until(pilot, lambda: "read-only: kill disabled" in toasts(app))
        assert isinstance(app.screen, OrphanScreen)


async def test_v_events_merges_console_and_run_dir_events():
    backend = FakeBackend()
    app = frozen_app(backend)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        backend.current["host-a"].event("foreign_appeared", "foreign server pid 5150 appeared", gpus=[3])
        backend.repush("host-a")
        await until(pilot, lambda: any(e.kind == "foreign_appeared" for e in app.views["host-a"].events))
        await pilot.press("v")
        await until(pilot, lambda: isinstance(app.screen, EventsScreen))
        screen = app.screen
        await until(pilot, lambda: any(e.kind == "foreign_appeared" for e in screen.events))
        await pilot.press("f")
        await until(pilot, lambda: screen.flt == "failures")
        await pilot.press("v")
        await until(pilot, lambda: not isinstance(app.screen, EventsScreen))


@pytest.mark.parametrize("keys,want", [(("right",), 1), (("right", "right", "left"), 1), (("down", "down"), 2)])
async def test_arrow_keys_move_between_panels(keys, want):
    app = frozen_app(FakeBackend())
    async with app.run_test(size=SIZE) as pilot:
        await select_gpu(pilot, app, 0)
        await pilot.press(*keys)
        await until(pilot, lambda: app.focused is panel(app, want))
        assert selected(app) is panel(app, want)


async def test_kill_dialog_names_port_model_uptime_traffic_and_memory():
    app = frozen_app(FakeBackend())
    async with app.run_test(size=SIZE) as pilot:
        await select_gpu(pilot, app, 0)
        await pilot.press("k")
        await until(pilot, lambda: dialog_up(app))
        dialog = app.screen
        body = "\n".join(dialog.lines)
        for want in ("port 30000", "model:    /models/demo-27b", "uptime:   10 min",
                     "12 running · 0 queued · 412 tok/s", "118,000 MiB on GPU 0", "118,000 MiB on GPU 1"):
            assert want in body, (want, body)


@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
async def test_key_help_lies_over_the_screen_and_moves_no_gpu_panel(size):
    app = frozen_app(FakeBackend())
    async with app.run_test(size=size) as pilot:
        await started(pilot)
        before = [p.region for p in app.query(GpuPanel)]
        await pilot.press("question_mark")
        await until(pilot, lambda: app.help_shown and app.screen.query_one(KeyHelp).region.width > 0)
        box = app.screen.query_one(KeyHelp)
        assert box.region.right == size[0]  # over the right side, in a layer of its own
        assert [p.region for p in app.query(GpuPanel)] == before  # nothing under it was laid out again
        assert app.screen.query_one("#side").display
        await pilot.press("question_mark")
        await until(pilot, lambda: not app.help_shown)
        await pilot.press("f1")
        await until(pilot, lambda: app.help_shown)
        assert len(app.screen.query(KeyHelp)) == 1  # mounted once, then shown and hidden


async def test_edit_form_on_a_short_terminal_shows_the_field_being_typed_in():
    app = frozen_app(FakeBackend())
    async with app.run_test(size=(80, 20)) as pilot:
        await select_gpu(pilot, app, 0)  # a READY session: the form lists what launching stops
        await pilot.press("e")
        await until(pilot, lambda: app.focused is not None and app.focused.id == "f-model_path"
                    and app.screen.query_one(".fields").region.contains_region(app.focused.region))
        fields, focused = app.screen.query_one(".fields"), app.focused
        assert fields.query(".impact")  # what it stops scrolls with the fields, not above them
        assert fields.region.contains_region(focused.region)


def test_kill_dialog_counts_a_hand_started_servers_uptime_from_its_process_start():
    from console.core.sessions import derive_views
    from console.model import SessionView
    from console.ui.screens.impact import impact_lines

    now = NOW
    launcher = proc(4242, ["python3", "-m", "sglang.launch_server", "--port", "30000"], None, {0: 80_000})
    snap = snapshot(gpus=[gpu(0)], servers=[launcher.model_copy(update={"started_at": now - 3 * 3600})])
    (view,) = [v for v in derive_views(snap, {}, now) if v.state == "foreign"]
    assert view.process_started_at == now - 3 * 3600 and view.started_at is None  # no launch of ours
    assert "uptime:   3 h (started by hand: since its process started)" in impact_lines(view, snap, now)
    unknown = SessionView(host="h", state="foreign", launcher_pid=4242)
    assert "uptime:   N/A (started by hand: its process start is unknown)" in impact_lines(unknown, None, now)


def test_snapshot_like_idle_host_has_no_orphans():
    from console.core.orphans import find_orphans

    assert find_orphans(snapshot(gpus=[gpu(0)], servers=[proc(1, ["python", "-m", "sglang.launch_server"], None,
                                                                   {})])) == []


def test_memory_bar_colours_and_histories():
    from console.ui.widgets.gpu_panel import mem_line, mem_style, serving_line, util_line

    assert mem_style(0.5) == "$text-success" and mem_style(0.9) == "$text-warning" and mem_style(0.97) == "$text-error"
    line = mem_line(gpu(0, used=91_000), [10.0, 50.0, 63.0])
    assert "63% 91,000/143,771 MiB" in line.plain and line.plain.endswith("▁▅▆")
    assert "N/A" in mem_line(gpu(0).model_copy(update={"mem_used_mib": None})).plain
    assert util_line(gpu(0, used=50_000), [0.0, 87.0]).plain.startswith("util  87% ▁▇")
    assert serving_line([], []).plain == ""
    assert serving_line([100.0, 400.0], [0.0, 3.0]).plain == "tok/s 400 ▃█ · queue 3 ▁█"


async def test_panel_keeps_serving_history_of_the_current_session_only():
    backend = FakeBackend()
    app = frozen_app(backend)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        gpu0 = panel(app, 0)
        base = app.views["host-a"]
        for i in range(3):  # three new samples of a READY session, each applied before the next
            seen = len(gpu0.hist["tps"])
            snap = base.snapshot.model_copy(update={"sampled_at": base.snapshot.sampled_at + i + 1})
            backend.push(base.model_copy(update={"snapshot": snap}))
            await until(pilot, lambda: len(gpu0.hist["tps"]) > seen)  # noqa: B023  (awaited in this turn)
        assert len(gpu0.hist["tps"]) >= 3 and gpu0.hist["tps"][-1] == 412.3
        assert len(gpu0.hist["mem"]) >= 3 and "tok/s 412" in gpu0.body.plain


async def test_flag_form_enter_submits_own_footer_and_fewer_tab_stops():
    from textual.widgets import Input

    from console.ui.screens.flag_form import FlagForm

    backend = FakeBackend()
    app = frozen_app(backend)
    async with app.run_test(size=SIZE) as pilot:
        await select_gpu(pilot, app, 3)
        await pilot.press("l")
        await until(pilot, lambda: isinstance(app.screen, FlagForm) and app.screen.whole)
        form = app.screen
        keys = {b.action for _, b, enabled, _ in [v for v in form.active_bindings.values()] if enabled}
        assert {"check", "launch", "cancel"} <= keys and "kill" not in keys and "audit" not in keys
        spec_on = form.query_one("#f-spec_algo").value not in ("none",)
        assert form.query_one("#f-num_steps").disabled is (not spec_on)
        assert form.query_one("#f-hicache_size").disabled  # hierarchical cache off
        assert not form.query_one("#check").can_focus and not form.query_one("#cancel").can_focus
        form.query_one("#f-port", Input).focus()
        await until(pilot, lambda: not form.opening and str(form.query_one("#launch").label) == "Confirm launch")
        await pilot.press("enter")  # the Check run at open passed: one enter launches
        await until(pilot, lambda: any(c[0] == "launch" for c in backend.calls))


async def test_launch_form_prefilled_from_the_last_session_on_that_gpu():
    from textual.widgets import Input

    from console.ui.screens.flag_form import FlagForm

    app = frozen_app(FakeBackend())
    async with app.run_test(size=SIZE) as pilot:
        await select_gpu(pilot, app, 2)  # s-failed ran here with ARGV
        await pilot.press("l")
        await until(pilot, lambda: isinstance(app.screen, FlagForm) and app.screen.whole)
        form = app.screen
        assert form.query_one("#f-model_path", Input).value == "/models/demo-27b"
        assert form.query_one("#f-max_running", Input).value == "48"
        assert form.query_one("#f-gpus", Input).value == "2"


async def test_small_terminal_compacts_panels_until_the_operator_chooses():
    app = frozen_app(FakeBackend())
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot)
        await until(pilot, lambda: compact(app))  # 80x24: compact by itself
        await pilot.resize_terminal(200, 50)
        await until(pilot, lambda: not compact(app))  # room again: full panels
        await pilot.press("c")
        await until(pilot, lambda: compact(app))
        await pilot.resize_terminal(80, 24)
        await until(pilot, lambda: app.main.stacked and app.query_one("#hosts").size.width <= 80)
        await pilot.resize_terminal(200, 50)
        await until(pilot, lambda: not app.main.stacked and app.query_one("#hosts").size.width > 100)
        assert compact(app)  # the operator's choice stands


async def test_flag_form_profile_picker_fills_the_fields():
    from textual.widgets import Input, Select

    from console.model import LaunchRequest
    from console.ui.screens.flag_form import FlagForm

    backend = FakeBackend()
    backend.profiles = {"fixed": LaunchRequest(host="", flags=["--model-path", "/models/qwen", "--max-running-requests",
                                                                "16"], gpus=[2], port=31000)}
    app = frozen_app(backend)
    async with app.run_test(size=SIZE) as pilot:
        await select_gpu(pilot, app, 2)
        await pilot.press("l")
        await until(pilot, lambda: isinstance(app.screen, FlagForm) and app.screen.whole)
        form = app.screen
        form.query_one("#profile", Select).value = "fixed"
        await until(pilot, lambda: form.query_one("#f-model_path", Input).value == "/models/qwen")
        assert form.query_one("#f-max_running", Input).value == "16"
        assert form.query_one("#f-port", Input).value == "31000"


async def test_palette_still_offers_the_panel_actions_while_it_is_open():
    from textual.command import CommandPalette

    app = frozen_app(FakeBackend())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("ctrl+p")
        await until(pilot, lambda: isinstance(app.screen, CommandPalette))
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for want in ("Sessions (s)", "Full log (z)", "Orphans (o)", "Events (v)", "Kill (k)"):
            assert want in titles, titles
