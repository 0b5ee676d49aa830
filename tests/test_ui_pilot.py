"""Pilot tests of the console UI against the fake backend (no hosts, no SSH)."""

from __future__ import annotations

from textual.widgets import Button, Input, Static, Switch
from ui_fakes import ARGV, FAILED_LOG, NOW, FakeBackend, frozen_app, started, toasts, view_a, view_idle

from console.model import AuditEntry, HostView, KillTarget, OperationResult, Step
from console.ui.flag_values import split_argv
from console.ui.screens.confirm import ConfirmScreen
from console.ui.screens.flag_form import FlagForm
from console.ui.widgets.gpu_panel import GpuPanel
from console.ui.widgets.host_header import HostHeader
from console.ui.widgets.host_section import HostSection
from console.ui.widgets.log_pane import LogPane
from console.ui.widgets.steps import StepsView
from tests.helpers.wait import until

SIZE = (140, 60)


def panel(app, host: str, idx: int) -> GpuPanel:
    return next(p for p in app.query(GpuPanel) if p.host == host and p.index == idx)


def badge(app, host: str, idx: int) -> str:
    return panel(app, host, idx).badge_label


def last(be: FakeBackend, op: str) -> tuple:
    return [c for c in be.calls if c[0] == op][-1]


def notes(app) -> list[str]:
    return toasts(app)


def selected(app) -> GpuPanel | None:
    """The panel drawn as selected (the log pane and the keys follow it)."""
    return next((p for p in app.query(GpuPanel) if p.has_class("selected")), None)


def calls(be: FakeBackend, op: str) -> list[tuple]:
    return [c for c in be.calls if c[0] == op]


def label(app, selector: str = "#launch") -> str:
    return str(app.screen.query_one(selector, Button).label)


def clickable(app, selector: str = "#launch") -> bool:
    """The button is out of its pressed effect (a click during it is ignored, as Textual's Button does)."""
    return not app.screen.query_one(selector, Button).has_class("-active")


def text_of(app, selector: str) -> str:
    return str(app.screen.query_one(selector, Static).render())


def is_form(app) -> bool:
    return isinstance(app.screen, FlagForm) and bool(app.screen.query("#f-model_path")) and app.screen.whole


def is_dialog(app) -> bool:
    """A confirmation dialog is up, its Cancel button focused (the default)."""
    s = app.screen
    return isinstance(s, ConfirmScreen) and s.focused is not None and s.focused.id == "cancel"


async def focus_gpu(app, pilot, idx: int, host: str = "host-a") -> None:
    panel(app, host, idx).focus()
    await until(pilot, lambda: panel(app, host, idx).has_class("selected"))


async def submit_form(app, pilot) -> None:
    """Once the Check run at open is done: Confirm launch when it passed (one key), else Launch (the checks run),
    then Confirm launch: the form closes."""
    form = app.screen
    assert isinstance(form, FlagForm)
    await until(pilot, lambda: not form.opening and clickable(app))
    if label(app) != "Confirm launch":
        await pilot.click("#launch")
        await until(pilot, lambda: label(app) == "Confirm launch" and clickable(app))
    await pilot.click("#launch")
    await until(pilot, lambda: not isinstance(app.screen, FlagForm))


async def test_launch_steps_to_ready():
    be = FakeBackend([view_idle()])
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await until(pilot, lambda: selected(app) is panel(app, "host-a", 0))  # no session anywhere: the first GPU
        assert badge(app, "host-a", 0) == "IDLE"
        await pilot.press("l")
        await until(pilot, lambda: is_form(app))
        assert app.screen.query_one("#f-model_path", Input).value == "/models/demo-27b"
        await submit_form(app, pilot)
        req = (await until(pilot, lambda: calls(be, "launch")))[-1][1]
        assert req.gpus == [0] and req.port == 30000
        assert req.flags[:2] == ["--model-path", "/models/demo-27b"] and "--mem-fraction-static" in req.flags
        steps = app.query_one(StepsView)
        await until(pilot, lambda: badge(app, "host-a", 0) == "READY" and steps.result is not None
                    and len(app.query_one(LogPane).lines) == 2)
        assert [s.state for s in steps.steps] == ["ok"] * 7 and steps.result.ok
        assert app.following == ("host-a", "s-new-1")  # the new session's own log, nothing else
        assert list(app.query_one(LogPane).lines) == ["fresh session line 1", "fresh session line 2"]


async def test_launch_failed_shows_cause_and_keeps_form_values():
    be = FakeBackend([view_idle()], outcome="failed")
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await focus_gpu(app, pilot, 1)
        await pilot.press("l")
        await until(pilot, lambda: is_form(app))
        app.screen.query_one("#f-mem_fraction", Input).value = "0.7"
        await submit_form(app, pilot)
        steps = app.query_one(StepsView)
        await until(pilot, lambda: badge(app, "host-a", 1) == "FAILED: gpu_oom" and steps.result is not None
                    and any("launch FAILED: gpu_oom" in n for n in notes(app)))
        text = panel(app, "host-a", 1).body.plain
        assert "Not enough memory" in text
        assert not steps.result.ok
        assert [s.state for s in steps.steps][4:] == ["failed", "skipped", "skipped"]
        await pilot.press("l")  # the next try starts from what was typed
        await until(pilot, lambda: is_form(app))
        assert app.screen.query_one("#f-mem_fraction", Input).value == "0.7"


async def test_form_inline_errors_block_launch():
    be = FakeBackend([view_idle()])
    be.validator = lambda flags: [("error", "unrecognized arguments: --bogus")] if "--bogus" in flags else []
    be.planner = lambda flags, gpus: f"fits on GPUs {gpus}"
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await focus_gpu(app, pilot, 0)
        await pilot.press("l")
        await until(pilot, lambda: is_form(app))
        form = app.screen
        form.query_one("#f-mem_fraction", Input).value = "1.5"
        form.query_one("#f-port", Input).value = "70000"
        form.query_one("#f-extras", Input).value = "--a 'unterminated"
        await pilot.click("#launch")

        def errors() -> dict[str, str]:
            return {w.id: str(w.render()) for w in form.query(".field-error.-shown")}
        await until(pilot, lambda: errors() == {"err-mem_fraction": "must be in (0, 1]", "err-port": "must be 1–65535",
                                                "err-extras": "cannot split: No closing quotation"} and clickable(app))
        form.query_one("#f-mem_fraction", Input).value = "0.8"
        form.query_one("#f-port", Input).value = "30001"
        form.query_one("#f-extras", Input).value = "--bogus 1"
        await pilot.click("#launch")
        checks = await until(pilot, lambda: "fits on GPUs [0]" in text_of(app, "#checks") and clickable(app)
                             and text_of(app, "#checks"))
        assert "unrecognized arguments: --bogus" in checks
        assert label(app) == "Launch"  # errors: not armed
        assert not any(c[0] == "launch" for c in be.calls)
        form.query_one("#f-extras", Input).value = "\x00"
        await pilot.click("#launch")
        await until(pilot, lambda: "NUL" in text_of(app, "#err-extras"))


async def test_kill_cancel_is_default_then_confirm_uses_captured_target():
    be = FakeBackend()
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await focus_gpu(app, pilot, 0)
        await pilot.press("k")
        await until(pilot, lambda: is_dialog(app))
        body = text_of(app, ".dialog-body")
        assert "host-a" in body and "0,1" in body and "s-ready" in body and "4200" in body
        assert "GPU memory released" in body and "port closed" in body
        await pilot.press("enter")
        await until(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
        assert not any(c[0] == "kill" for c in be.calls)

        await pilot.press("k")
        await until(pilot, lambda: is_dialog(app))
        # the list shifts under the dialog: another session now sits on GPU 0
        v = view_a()
        be.push(v.model_copy(update={"sessions": [s.model_copy(update={"session_id": "s-other"})
                                                  if s.session_id == "s-ready" else s for s in v.sessions]}))
        await until(pilot, lambda: any(s.session_id == "s-other" for s in app.views["host-a"].sessions))
        await pilot.press("tab", "enter")
        kills = await until(pilot, lambda: calls(be, "kill"))
        assert kills == [("kill", KillTarget(host="host-a", session_id="s-ready"))]


async def test_kill_foreign_targets_pid_and_start_ticks():
    be = FakeBackend()
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await focus_gpu(app, pilot, 3)
        await pilot.press("k")
        await until(pilot, lambda: is_dialog(app))
        assert "foreign" in text_of(app, ".dialog-body")
        await pilot.click("#confirm")
        assert await until(pilot, lambda: calls(be, "kill")) == [("kill", KillTarget(host="host-a", pid=5150,
                                                                                     start_ticks=5203))]


async def test_relaunch_same_flags_and_edited_flag():
    be = FakeBackend()
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await focus_gpu(app, pilot, 0)
        await pilot.press("r")
        await until(pilot, lambda: is_dialog(app))
        await pilot.click("#confirm")
        await until(pilot, lambda: calls(be, "relaunch"))
        op, target, req = last(be, "relaunch")
        assert target.session_id == "s-ready"
        assert req.flags == split_argv(ARGV)[1] and req.gpus == [0, 1] and req.replaces == "s-ready"

        be.push(view_a())  # back to the fixed view (s-ready on GPUs 0,1)
        await until(pilot, lambda: app.query_one(StepsView).result is not None
                    and "s-ready" in panel(app, "host-a", 1).body.plain)
        await focus_gpu(app, pilot, 1)
        await pilot.press("e")
        await until(pilot, lambda: is_form(app))
        form = app.screen
        assert form.query_one("#f-mem_fraction", Input).value == "0.85"
        assert form.query_one("#f-spec_algo").value == "EAGLE"
        form.query_one("#f-mem_fraction", Input).value = "0.8"
        await pilot.click("#launch")
        diff = await until(pilot, lambda: label(app) == "Confirm launch" and clickable(app) and text_of(app, "#diff"))
        assert "- --mem-fraction-static 0.85" in diff and "+ --mem-fraction-static 0.8" in diff
        await pilot.click("#launch")
        await until(pilot, lambda: len(calls(be, "relaunch")) == 2)
        op, target, req = last(be, "relaunch")
        assert target == KillTarget(host="host-a", session_id="s-ready")
        i = req.flags.index("--mem-fraction-static")
        assert req.flags[i + 1] == "0.8" and "0.85" not in req.flags
        assert "--speculative-algorithm" in req.flags and req.command == split_argv(ARGV)[0]


async def test_read_only_refuses_destructive_keys():
    be = FakeBackend()
    app = frozen_app(be, read_only=True)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await focus_gpu(app, pilot, 0)
        for i, key in enumerate("klre"):
            await pilot.press(key)
            await until(pilot, lambda: len(notes(app)) == i + 1)  # noqa: B023  (awaited in this turn)
            assert not isinstance(app.screen, (ConfirmScreen, FlagForm))
        assert notes(app) == ["read-only: kill disabled", "read-only: launch disabled",
                              "read-only: relaunch disabled", "read-only: edit and relaunch disabled"]
        assert app.check_action("kill", ()) is False and app.sub_title == "READ-ONLY"
        shown = {b.binding.key for b in app.screen.active_bindings.values()}  # the footer's and the key help's
        assert not shown & set("klre") and {"s", "z", "question_mark"} <= shown
        assert not any(c[0] in ("kill", "launch", "relaunch") for c in be.calls)
    assert frozen_app(FakeBackend(read_only=True)).read_only


async def test_host_unreachable_ui_stays_responsive():
    be = FakeBackend(hold=True)  # the kill below blocks until the gate opens
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        assert badge(app, "host-a", 0) == "READY"
        await focus_gpu(app, pilot, 0)
        await pilot.press("k")
        await until(pilot, lambda: is_dialog(app))
        await pilot.click("#confirm")
        await until(pilot, lambda: app.op_busy)
        v = view_a(state="unreachable", error="connection lost: timeout")
        be.push(v)
        await until(pilot, lambda: {badge(app, "host-a", i) for i in range(4)} == {"UNREACHABLE"})
        assert "stale-red" in app.query_one(".host-header").classes
        await pilot.press("a")  # keys are still handled while the operation waits
        await until(pilot, lambda: "-shown" in app.query_one("#audit").classes)
        await pilot.press("c")
        await until(pilot, lambda: app.query_one(".gpus").styles.layout.name == "grid")
        assert app.op_busy
        be.gate.set()
        await until(pilot, lambda: not app.op_busy)
        assert app.query_one(StepsView).result.ok


async def test_stale_sample_turns_ready_into_stale():
    app = frozen_app(FakeBackend([view_a(age=5.0)]))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await until(pilot, lambda: badge(app, "host-a", 0) == "STALE")
        assert badge(app, "host-a", 2) == "FAILED: gpu_oom"
        assert "stale-amber" in app.query_one(".host-header").classes


async def test_log_switching_filter_and_follow():
    be = FakeBackend()
    app = frozen_app(be)
    async with app.run_test(size=(140, 30)) as pilot:
        await started(pilot)
        await focus_gpu(app, pilot, 0)
        pane = app.query_one(LogPane)
        await until(pilot, lambda: app.following == ("host-a", "s-ready") and len(pane.lines) == 7)
        assert pane.lines[-1] == "coloured line with a bell and a  title change"  # no escapes survive
        await focus_gpu(app, pilot, 2)
        await until(pilot, lambda: app.following == ("host-a", "s-failed") and list(pane.lines) == FAILED_LOG)
        assert ("unfollow_log", "host-a", "s-ready") in be.calls
        be.on_log("host-a", "s-ready", ["must not show"])
        be.on_log("host-a", "s-failed", ["x" * 5000])
        await until(pilot, lambda: len(pane.lines) == 4)
        assert list(pane.lines)[:3] == FAILED_LOG and "must not show" not in pane.lines
        assert pane.lines[-1].endswith("… [+3000 chars]") and len(pane.lines[-1]) < 2100

        await pilot.press("slash")
        await until(pilot, lambda: isinstance(app.focused, Input))
        await pilot.press(*"Error", "enter")
        await until(pilot, lambda: list(pane.log_widget.lines) == [FAILED_LOG[2]])
        pane.set_filter("")
        await until(pilot, lambda: len(pane.log_widget.lines) == 4)
        be.on_log("host-a", "s-failed", [f"line {i}" for i in range(100)])
        log = pane.log_widget
        await until(pilot, lambda: len(pane.lines) == 104 and log.max_scroll_y > 0
                    and log.scroll_y == log.max_scroll_y)  # following
        log.scroll_to(y=0, animate=False)
        await until(pilot, lambda: log.scroll_y == 0)
        be.on_log("host-a", "s-failed", ["a", "b", "c"])
        await until(pilot, lambda: "3 new lines" in text_of(app, ".new-lines"))
        assert pane.unseen == 3 and log.scroll_y == 0
        await pilot.press("end")
        await until(pilot, lambda: pane.unseen == 0 and log.scroll_y == log.max_scroll_y)
        await pilot.press("w")
        await until(pilot, lambda: pane.wrap and len(log.lines) > len(pane.lines))

        await focus_gpu(app, pilot, 3)  # a foreign server has no session log
        await until(pilot, lambda: app.following is None and len(pane.lines) == 0)
        banner = str(pane.query_one(".banner", Static).render())
        assert "foreign server (pid 5150)" in banner and "z shows its output" in banner  # where to read it


async def test_view_coalescing_and_theme_cycle():
    be = FakeBackend([view_idle()])
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        for i in range(200):  # a burst: only the latest view is applied
            be.push(view_idle(n=2 + (i % 2)))
        assert len(app.pending_views) == 1
        await until(pilot, lambda: len(app.query(GpuPanel)) == 3 and not app.pending_views)
        assert app.theme == "textual-dark" and "theme-dark" in app.classes
        await pilot.press("t")
        assert app.theme == "textual-light" and "theme-light" in app.classes
        await pilot.press("t")
        assert app.theme == "mtp-high-contrast" and "theme-high-contrast" in app.classes
        await pilot.press("question_mark")
        await until(pilot, lambda: app.help_shown)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Kill (k)" in titles and "Launch (l)" in titles
        await pilot.press("q")
    assert ("stop",) in be.calls


async def test_remote_text_is_never_markup():
    v = view_a()
    snap = v.snapshot.model_copy(update={"gpus": [g.model_copy(update={"name": "[b]evil[/b] [red"}) for g in v.snapshot.gpus]})
    weird = v.sessions[0].model_copy(update={"session_id": "s-[i]x", "flags_summary": "[link=x]y", "argv": ["[/]"]})
    be = FakeBackend([HostView(snapshot=snap, sessions=[weird, *v.sessions[1:]])])
    be.logs[("host-a", "s-[i]x")] = ["[bold]not bold[/bold] [/]"]
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await focus_gpu(app, pilot, 0)
        p = panel(app, "host-a", 0)
        assert "[b]evil[/b] [red" in p.title_text
        assert "s-[i]x" in p.body.plain
        await until(pilot, lambda: list(app.query_one(LogPane).lines) == ["[bold]not bold[/bold] [/]"])
        be.on_audit(AuditEntry(at=NOW, host="host-a", op="[b]op", result="[/]"))
        app.say("[/] bad")
        await pilot.press("a")  # the audit pane draws the entry: never parsed as markup
        await until(pilot, lambda: "-shown" in app.query_one("#audit").classes and app.query_one("#audit").row_count == 2)


async def test_compact_is_a_grid_sized_by_width():
    views = [HostView(snapshot=view_idle("host-a", 8).snapshot), view_idle("host-b", 8)]
    app = frozen_app(FakeBackend(views))
    async with app.run_test(size=(200, 50)) as pilot:
        await started(pilot)
        full = await until(pilot, lambda: panel(app, "host-a", 0).region.height)
        await pilot.press("c")
        await until(pilot, lambda: panel(app, "host-a", 0).region.y == panel(app, "host-a", 1).region.y)
        cols = app.grid_columns()
        assert cols == (app.query_one("#hosts").size.width - 1) // 44 >= 2
        p0, p1 = panel(app, "host-a", 0), panel(app, "host-a", 1)
        assert p0.region.y == p1.region.y and p1.region.x > p0.region.x  # side by side
        assert p0.region.height == 6 < full  # title, power, stats, session + border
        assert "no processes" not in p0.body.plain
        await pilot.resize_terminal(120, 50)
        await until(pilot, lambda: app.grid_columns() < cols
                    and app.query_one(".gpus").styles.grid_size_columns == app.grid_columns())
        await pilot.press("c")
        await until(pilot, lambda: panel(app, "host-a", 0).region.height == full)
        assert panel(app, "host-a", 1).region.y > full
        assert "no processes" in panel(app, "host-a", 0).body.plain


async def test_form_hooks_get_the_host_and_a_plan_error_needs_force():
    be = FakeBackend([view_idle()])
    seen = []

    async def validator(flags, host=None):
        seen.append(("validator", host))
        return [("ok", "flags: no problems")]

    def planner(flags, gpus, host=None):
        seen.append(("planner", host))
        return ("error", "memory plan: does not fit — 512 running requests")

    be.validator, be.planner = validator, planner
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await focus_gpu(app, pilot, 1)
        await pilot.press("l")
        await until(pilot, lambda: is_form(app))
        form = app.screen
        await pilot.click("#launch")
        checks = await until(pilot, lambda: "does not fit" in text_of(app, "#checks") and text_of(app, "#checks"))
        assert ("validator", "host-a") in seen and ("planner", "host-a") in seen
        assert "flags: no problems" in checks
        assert label(app) == "Launch"  # blocked
        form.query_one("#force", Switch).value = True
        await submit_form(app, pilot)
        req = (await until(pilot, lambda: calls(be, "launch")))[-1][1]
        assert req.force and req.gpus == [1]


async def test_launch_refused_before_start_creates_no_session():
    """Bug 3: a refused launch (here the memory preflight) leaves the GPU as it was, shows the refusal in
    the steps view and as a toast, and no fake FAILED entry appears anywhere."""
    be = FakeBackend([view_idle()])

    async def refuse(req, on_steps):
        be.calls.append(("launch", req))
        steps = [Step(name="preflight", state="failed", evidence="memory plan: does not fit — no room for the KV cache")]
        on_steps(steps)
        return OperationResult(op="launch", host=req.host, ok=False, state="failed", cause="gpu_oom", steps=steps,
                               error="memory plan: does not fit — no room for the KV cache", hint="lower it")
    be.launch = refuse
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await focus_gpu(app, pilot, 1)
        await pilot.press("l")
        await until(pilot, lambda: is_form(app))
        await submit_form(app, pilot)
        steps = app.query_one(StepsView)
        await until(pilot, lambda: steps.result is not None
                    and any("launch refused, nothing started: memory plan: does not fit" in n for n in notes(app)))
        assert badge(app, "host-a", 1) == "IDLE" and badge(app, "host-a", 0) == "IDLE"
        assert "no server" in panel(app, "host-a", 1).body.plain
        assert "FAILED" not in header(app) and "IDLE 2" in header(app)
        assert str(app.query_one(".host-note", Static).render()) == ""
        assert not steps.result.ok and steps.steps[0].state == "failed"
        await pilot.press("k")
        await until(pilot, lambda: "nothing is running on host-a GPU 1" in notes(app)[-1])
        assert not isinstance(app.screen, ConfirmScreen)
        be.launch = FakeBackend.launch.__get__(be)
        await pilot.press("l")
        await until(pilot, lambda: is_form(app))
        await submit_form(app, pilot)
        await until(pilot, lambda: badge(app, "host-a", 1) == "READY")


def header(app, host: str = "host-a") -> str:
    return next(s for s in app.query(HostSection) if s.host == host).query_one(HostHeader).render().plain


async def test_keys_typed_ahead_each_move_the_selection():
    """Tab Tab typed before the first focus event is handled selects the second panel, not the first
    twice (the selection moves when the key is handled, not when the focus event comes round)."""
    be = FakeBackend([view_idle(n=4)])
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        first = selected(app)
        start = first.index if first is not None else -1
        app.action_next_panel(1)
        app.action_next_panel(1)  # no await between them: the first focus event has not run yet
        await until(pilot, lambda: app.focused is panel(app, "host-a", start + 2))
        assert selected(app) is panel(app, "host-a", start + 2)
        app.action_next_panel(-1)
        app.action_next_panel(-1)
        app.action_next_panel(-1)
        await until(pilot, lambda: app.focused is panel(app, "host-a", (start + 2 - 3) % 4))
        assert selected(app) is panel(app, "host-a", (start + 2 - 3) % 4)
