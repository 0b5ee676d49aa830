"""Issue 13 at the Pilot level: what a panel, the log pane and the header show is always the GPU's
current session. One regression test per bug of the issue, and one per smaller finding."""

from __future__ import annotations

from textual.widgets import Button, Input, Static
from ui_fakes import NOW, FakeBackend, failed, frozen_app, session, started, toasts, view_a, view_idle

from console.model import HostView, OperationResult, Step
from console.ui.screens.confirm import ConfirmScreen
from console.ui.screens.flag_form import FlagForm
from console.ui.widgets.host_header import HostHeader
from console.ui.widgets.host_section import HostSection
from console.ui.widgets.log_pane import LogPane
from console.ui.widgets.steps import StepsView
from tests.helpers.wait import until

SIZE = (140, 60)


def panel(app, idx: int, host: str = "host-a"):
    return next(p for p in app.panels() if p.host == host and p.index == idx)


def badge(app, idx: int) -> str:
    return panel(app, idx).badge_label


def banner(app) -> str:
    return str(app.query_one(LogPane).query_one(".banner", Static).render())


def header(app, host: str = "host-a") -> str:
    return next(s for s in app.query(HostSection) if s.host == host).query_one(HostHeader).render().plain


def notes(app) -> list[str]:
    return toasts(app)


def last_note(app) -> str:
    return notes(app)[-1] if notes(app) else ""


def is_form(app) -> bool:
    return isinstance(app.screen, FlagForm) and bool(app.screen.query("#f-model_path")) and app.screen.whole


async def focus(app, pilot, idx: int) -> None:
    panel(app, idx).focus()
    await until(pilot, lambda: panel(app, idx).has_class("selected"))


async def submit_form(pilot) -> None:
    """Once the Check run at open is done: Confirm launch when it passed (one key), else Launch (the checks run),
    then Confirm launch once the button is out of its pressed effect: the form closes."""
    app = pilot.app
    form = app.screen
    button = form.query_one("#launch", Button)
    await until(pilot, lambda: not form.opening and not button.has_class("-active"))
    if str(button.label) != "Confirm launch":
        await pilot.click("#launch")
        await until(pilot, lambda: str(button.label) == "Confirm launch" and not button.has_class("-active"))
    await pilot.click("#launch")
    await until(pilot, lambda: not isinstance(app.screen, FlagForm))


async def test_bug1_relaunch_on_the_same_gpu_shows_the_new_sessions_log_at_once():
    be = FakeBackend(hold=True)  # the launch waits at step 3 until the gate opens
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await focus(app, pilot, 2)
        await until(pilot, lambda: app.following == ("host-a", "s-failed") and "s-failed" in banner(app))
        await pilot.press("e")  # failed: edit its flags and launch them
        await until(pilot, lambda: is_form(app))
        app.screen.query_one("#f-tp_size", Input).value = "1"  # the fixture's argv says tp 2 on one GPU
        await submit_form(pilot)
        await until(pilot, lambda: app.following[1].startswith("s-new-") and badge(app, 2).startswith("LAUNCHING"))
        sid = app.following[1]
        assert f"session {sid}" in banner(app) and "s-failed" not in banner(app)
        pane = app.query_one(LogPane)
        assert list(pane.lines) == [] and "waiting for output" in str(pane.query_one(".new-lines", Static).render())
        be.gate.set()
        await until(pilot, lambda: badge(app, 2) == "READY" and len(pane.lines) == 2)
        assert app.following == ("host-a", sid)
        assert list(pane.lines) == ["fresh session line 1", "fresh session line 2"]


async def test_bug1_a_launch_from_another_console_takes_over_the_panel_and_the_log():
    be = FakeBackend()
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await focus(app, pilot, 2)
        v = be.views["host-a"]
        cli = session("launching", "s-cli", [2], step=0, started_at=NOW - 1, line=None)
        be.push(HostView(snapshot=v.snapshot, sessions=[*v.sessions, cli]))
        await until(pilot, lambda: badge(app, 2) == "LAUNCHING 0/6" and app.following == ("host-a", "s-cli"))
        assert "session s-cli" in banner(app) and "Traceback" not in "\n".join(app.query_one(LogPane).lines)


async def test_bug2_after_a_kill_the_panel_reads_stopped_never_an_older_failure():
    v = view_a()
    old = failed(gpus=(0,), sid="s-old-oom", started_at=NOW - 3600).model_copy(
        update={"ended_at": NOW - 3500, "line": "run 512"})
    be = FakeBackend([HostView(snapshot=v.snapshot, sessions=[*v.sessions, old])])
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await focus(app, pilot, 0)
        assert badge(app, 0) == "READY"
        await pilot.press("k")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.click("#confirm")
        await until(pilot, lambda: badge(app, 0) == "STOPPED" and badge(app, 1) == "STOPPED"
                    and "s-ready · STOPPED by this console" in banner(app))
        body = panel(app, 0).body.plain
        assert "s-ready" in body and "stopped by this console" in body and "gpu_oom" not in body
        assert "FAILED 1" in header(app) and "STOPPED 1" in header(app)  # GPU 2's failure, the stopped tp 2
        assert "s-ready · STOPPED by this console" in banner(app)
        await pilot.press("r")  # relaunch offers s-ready's flags, not the old failure's
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "s-ready's flags" in app.screen.title_text

        async def refuse(req, on_steps):
            be.calls.append(("launch", req))
            return OperationResult(op="launch", host=req.host, ok=False, cause="gpu_oom",
                                   error="memory plan: does not fit — no room", steps=[
                                       Step(name="preflight", state="failed", evidence="does not fit")])
        be.launch = refuse
        await pilot.click("#confirm")
        await until(pilot, lambda: last_note(app).startswith("launch refused, nothing started"))
        req = [c for c in be.calls if c[0] == "launch"][-1][1]
        assert req.replaces == "s-ready" and req.gpus == [0, 1]
        assert any("relaunching s-ready's flags" in n for n in notes(app))
        assert "launch refused, nothing started: memory plan: does not fit" in notes(app)[-1]
        assert not any("FAILED: gpu_oom" in n for n in notes(app))
        assert badge(app, 0) == "STOPPED"  # refused: the GPU is left as it was


async def test_bug4_kill_is_not_offered_on_a_dead_session():
    be = FakeBackend()
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await focus(app, pilot, 2)
        await pilot.press("k")
        await until(pilot, lambda: last_note(app).startswith("nothing is running on host-a GPU 2"))
        assert not isinstance(app.screen, ConfirmScreen) and not any(c[0] == "kill" for c in be.calls)
        assert notes(app)[-1] == ("nothing is running on host-a GPU 2 (FAILED): r relaunches s-failed's flags, "
                                  "e edits them")
        assert badge(app, 2) == "FAILED: gpu_oom"


async def test_bug5_the_badge_changes_on_the_result_not_on_the_next_sample():
    be = FakeBackend([view_idle()])
    real = be._place

    def lagging(host, s):  # the host's sample still says LOADING when the launch reports READY
        real(host, s.model_copy(update={"state": "loading", "metrics": None}) if s.state == "ready" else s)
    be._place = lagging
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await focus(app, pilot, 0)
        await pilot.press("l")
        await until(pilot, lambda: is_form(app))
        await submit_form(pilot)
        steps = app.query_one(StepsView)
        await until(pilot, lambda: steps.result is not None)
        assert steps.result.ok
        assert badge(app, 0) == "READY"


async def test_bug6_a_vanished_foreign_server_is_an_event_and_leaves_the_banner():
    be = FakeBackend()
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await focus(app, pilot, 3)
        await until(pilot, lambda: badge(app, 3) == "FOREIGN" and "pid 5150" in banner(app))
        v = be.views["host-a"]
        be.push(HostView(snapshot=v.snapshot, sessions=[s for s in v.sessions if s.session_id]))
        await until(pilot, lambda: badge(app, 3) == "IDLE" and "no server on host-a GPU 3" in banner(app))
        assert "5150" not in banner(app)
        gone = [n for n in notes(app) if "foreign server pid 5150" in n]
        assert gone and "is gone: not stopped by this console" in gone[-1]
        assert gone[-1].startswith("22:13:20 host-a: ")  # when (the frozen clock, UTC) and where
        be.push(v)
        await until(pilot, lambda: any("foreign server pid 5150 appeared on GPUs 3" in n for n in notes(app)))


async def test_steps_pane_shows_the_failing_step_when_it_does_not_fit():
    be = FakeBackend([view_idle()], outcome="failed")
    app = frozen_app(be)
    async with app.run_test(size=(140, 20)) as pilot:
        await started(pilot)
        await focus(app, pilot, 0)
        await pilot.press("l")
        await until(pilot, lambda: is_form(app))
        await submit_form(pilot)
        steps = app.query_one(StepsView)

        def failing_row_in_view() -> bool:
            row = steps.rows[steps.focus_index()].region
            return steps.result is not None and steps.head.region.bottom <= row.y < steps.region.bottom - 1
        await until(pilot, failing_row_in_view, what="the failing step's line is in view, below the docked outcome")
        assert steps.max_scroll_y > 0 and all(s.name in steps.text for s in steps.steps)  # does not fit: scrolls
        row = steps.rows[steps.focus_index()].region  # the failing step's line is in view, below the docked outcome
        assert "✗" in steps.text and steps.head.region.bottom <= row.y < steps.region.bottom - 1


async def test_log_esc_closes_the_filter_and_keeps_the_position_and_follow_survives_wrap():
    be = FakeBackend()
    be.logs[("host-a", "s-ready")] = [f"line {i} " + "x" * 300 for i in range(200)]
    app = frozen_app(be)
    async with app.run_test(size=(140, 40)) as pilot:
        await started(pilot)
        await focus(app, pilot, 0)
        pane = app.query_one(LogPane)
        log = pane.log_widget
        await until(pilot, lambda: len(pane.lines) == 200)
        assert log.styles.scrollbar_size_horizontal == 0  # no stray ▉ thumb under long lines
        await pilot.press("w")
        await until(pilot, lambda: pane.wrap and len(log.lines) > 200)
        be.on_log("host-a", "s-ready", [f"more {i} " + "y" * 300 for i in range(50)])
        await until(pilot, lambda: len(pane.lines) == 250 and log.max_scroll_y > 0 and log.scroll_y == log.max_scroll_y)
        assert pane.following
        log.scroll_to(y=40, animate=False, immediate=True)
        await until(pilot, lambda: not pane.following)
        await pilot.press("slash")
        await until(pilot, lambda: isinstance(app.focused, Input))
        await pilot.press(*"line 1")
        await until(pilot, lambda: pane.pattern == "line 1")
        await pilot.press("escape")
        await until(pilot, lambda: pane.pattern == "" and "-open" not in pane.query_one(Input).classes)
        assert log.scroll_y == 40 and not pane.following
        await pilot.press("end")
        await until(pilot, lambda: pane.following)
        be.on_log("host-a", "s-ready", ["tail line"])
        await until(pilot, lambda: pane.lines[-1] == "tail line" and log.scroll_y == log.max_scroll_y)
        assert pane.following


async def test_flag_form_clears_stale_checks_and_l_prefills_the_focused_gpu():
    be = FakeBackend([view_idle(n=4)])
    be.planner = lambda flags, gpus: f"fits on {gpus}"
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await focus(app, pilot, 2)
        await pilot.press("l")
        await until(pilot, lambda: is_form(app))
        form = app.screen
        assert form.query_one("#f-gpus", Input).value == "2"
        await pilot.click("#check")
        checks = form.query_one("#checks", Static)
        await until(pilot, lambda: checks.display and "fits on [2]" in str(checks.render()))
        form.query_one("#f-mem_fraction", Input).value = "0.7"
        await until(pilot, lambda: not checks.display)
        assert str(form.query_one("#launch", Button).label) == "Launch"
        form.query_one("#f-gpus", Input).value = "3"  # a leftover value on panel 2's form
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, FlagForm))
        await focus(app, pilot, 1)
        await pilot.press("l")
        await until(pilot, lambda: is_form(app))
        assert app.screen.query_one("#f-gpus", Input).value == "1"


async def test_f1_opens_help_and_the_palette_lists_each_command_once():
    app = frozen_app(FakeBackend())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("f1")
        await until(pilot, lambda: app.help_shown)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert len(titles) == len(set(titles))
        assert "Keys" not in titles and "Theme" not in titles and "Keys (?)" in titles
        assert sum(t.startswith("Keys") for t in titles) == 1


async def test_host_header_keeps_its_fields_apart():
    app = frozen_app(FakeBackend())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        text = await until(pilot, lambda: "READY 1" in header(app) and header(app))
        assert "connected · rtt 12 ms · age 0.4 s · nvml · " in text
        assert "READY 1 · FOREIGN 1 · FAILED 1" in text


async def test_planner_text_is_not_doubled(monkeypatch):
    """'not planned: not planned' (the form's plan line) and 'fits (fits)' (the preflight evidence)."""

    from console.config import Config
    from console.ops import backend, lifecycle

    be = backend.LiveBackend(Config(), [])
    be.links = {"h": object()}  # type: ignore[dict-item]

    async def verdict(link, req, snap=None, *, count_use=False):
        return None, "not planned: no GPU memory information"
    monkeypatch.setattr(lifecycle, "memory_verdict", verdict)
    assert await be.planner(["--model-path", "/m"], [0], host="h") == "not planned: no GPU memory information"
    from console.ops.lifecycle.preflight import Checked, passed_evidence
    said = passed_evidence(Checked(refusals=[], hints=[], line="", flags_note="", verdict="fits", plan_text="fits"), [], "")
    assert said == "memory plan: fits"  # no "(fits)" after "fits"
    said = passed_evidence(Checked(refusals=[], hints=[], line="", flags_note="", verdict="does_not_fit",
                                   plan_text="does not fit", forced=True), [], "")
    assert "does_not_fit" not in said and "(does not fit)" not in said
