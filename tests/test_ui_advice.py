"""Advice and the incident report in the TUI (issue 17): the tracker fills HostView.advice, the GPU
panel shows the first advice in one line, ``i`` opens the detail, ``e`` there opens the flag form
with the suggested flags, ``p`` writes the report through the backend."""

from __future__ import annotations

import asyncio
import os

from textual.widgets import Input, Static
from ui_fakes import FakeBackend, frozen_app, started, toasts, view_a

from console.audit import Audit
from console.model import Advice, HostView, Suggestion
from console.ui.screens.advice import AdviceScreen
from console.ui.screens.flag_form import FlagForm
from console.ui.widgets.gpu_panel import GpuPanel
from tests.helpers.wait import await_until, until
from tests.test_report import FLAGS, SECRET, local_host, mtp  # noqa: F401 (local_host: the stand-in host fixture)


async def test_tracker_fills_advice_for_the_demos_underused_foreign_server(monkeypatch):
    """The demo's hand-started server (busy, no speculative decoding, ~half its power) gets the
    gpu_underused advice in the live view, as ``status --demo --json`` shows it."""
    from console.link.link import HostLink
    from console.link.ssh import HostSpec
    from console.ops.tracker import HostTracker
    from console.sim.demo import demo_environment

    monkeypatch.setenv("MTPCONSOLE_AUDIT_LOG", os.devnull)
    views: list[HostView] = []
    async with demo_environment(load=True) as (cfg, names):
        link = HostLink(HostSpec(name=names[0], local=True), cfg.hosts[names[0]], interval=0.5)
        tracker = HostTracker(link, interval=0.5, on_view=views.append, on_log=lambda *a: None)
        run = asyncio.ensure_future(link.run())  # connects, then streams samples (as LiveBackend runs it)
        try:
            def underused():
                # once the model's config.json is read (in the background), the suggestion is checked
                return next((a for v in views[-3:] for a in v.advice
                             if a.kind == "gpu_underused" and a.suggestion is not None), None)
            a = await await_until(underused, 60)
        finally:
            await link.close()
            run.cancel()
    assert a.pid is not None and a.session_id is None and a.gpu is not None
    assert a.evidence and a.suggestion is not None and "--speculative-algorithm" in a.suggestion.flags
    assert a.suggestion.valid is True and a.suggestion.planner
    assert tracker.figure_history, "the tracker keeps each server's figures for the advisor's trends"


# ---------------------------------------------------------------- the TUI, on the fake backend
SIZE = (140, 60)
SUGGESTED = ["--model-path", "/models/other", "--port", "30003", "--speculative-algorithm", "EAGLE",
             "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]


def advised_view() -> HostView:
    """host-a (view_a) with the advisor's finding on the hand-started server of GPU 3."""
    a = Advice(host="host-a", gpu=3, pid=5150, kind="gpu_underused",
               message="GPU at 43% of its power limit with 8 queued; consider EAGLE/MTP (planner: fits with 12.0 GiB to spare)",
               evidence=["power 300 W of 700 W (43% < 75%)", "8 request(s) queued", "speculative decoding off"],
               suggestion=Suggestion(flags=SUGGESTED, change="--speculative-algorithm EAGLE (steps 3, topk 1, 4 draft)",
                                     valid=True, planner="fits: 12.0 GiB to spare"))
    return view_a().model_copy(update={"advice": [a]})


def panel(app, idx: int, host: str = "host-a"):
    return next(p for p in app.query(GpuPanel) if p.host == host and p.index == idx)


async def select(pilot, idx: int) -> None:
    """Focus host-a's GPU ``idx`` and wait until it is the selected panel."""
    panel(pilot.app, idx).focus()
    await until(pilot, lambda: panel(pilot.app, idx).has_class("selected"))


def advice_text(app) -> str:
    return str(app.screen.query_one("#advice-text", Static).render()) if isinstance(app.screen, AdviceScreen) else ""


def toast_starting(app, text: str) -> bool:
    return any(n.startswith(text) for n in toasts(app))


async def test_panel_shows_the_first_advice_in_one_line():
    app = frozen_app(FakeBackend([advised_view()]))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        body = (await until(pilot, lambda: "⚑" in panel(app, 3).body.plain and panel(app, 3).body.plain)).splitlines()
        assert body[-1].startswith("⚑ GPU at 43% of its power limit with 8 queued; consider EAGLE/MTP"), body
        assert not any("⚑" in line for line in panel(app, 0).body.plain.splitlines())  # not on other GPUs
        await pilot.press("c")
        await until(pilot, lambda: "⚑" not in panel(app, 3).body.plain)  # compact panels keep their four lines


async def test_i_opens_the_advice_and_e_there_opens_the_flag_form_with_the_suggestion():
    be = FakeBackend([advised_view()])
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await select(pilot, 3)
        await pilot.press("i")
        text = await until(pilot, lambda: advice_text(app))
        assert "power 300 W of 700 W" in text and "accepted by the flag validator" in text and "pid 5150" in text
        await pilot.press("e")
        form = await until(pilot, lambda: isinstance(app.screen, FlagForm) and app.screen.whole and app.screen)
        assert isinstance(form, FlagForm), form
        assert form.query_one("#f-spec_algo").value == "EAGLE"
        assert form.query_one("#f-port", Input).value == "30003"
        assert "advice: gpu_underused" in form.title_text
        assert not any(c[0] in ("kill", "launch", "relaunch") for c in be.calls)  # nothing until confirmed


async def test_i_on_a_gpu_without_advice_says_so_and_e_is_blocked_in_read_only():
    app = frozen_app(FakeBackend([advised_view()], read_only=True))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await select(pilot, 0)
        await pilot.press("i")  # not destructive: open in read-only too
        assert "Nothing to say" in await until(pilot, lambda: advice_text(app))
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, AdviceScreen))
        await select(pilot, 3)
        await pilot.press("i")
        await until(pilot, lambda: "pid 5150" in advice_text(app))
        await pilot.press("e")
        await until(pilot, lambda: "read-only: edit and relaunch disabled" in toasts(app))
        assert isinstance(app.screen, AdviceScreen)  # no form
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, AdviceScreen))
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Advice (i)" in titles and "Report (p)" in titles  # offered in read-only: neither is destructive


async def test_p_writes_the_report_of_the_selected_session_and_shows_its_path():
    be = FakeBackend([advised_view()], read_only=True)  # p is not destructive
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await select(pilot, 2)  # the FAILED session
        await pilot.press("p")
        await until(pilot, lambda: toast_starting(app, "report written: /tmp/mtpconsole-fake/reports/report-s-failed.md"))
        assert ("report", "host-a", "s-failed") in be.calls
        await select(pilot, 3)  # a hand-started server on a GPU that never ran a session: nothing to report
        await pilot.press("p")
        await until(pilot, lambda: toast_starting(app, "no session to report on host-a GPU 3"))
        assert [c for c in be.calls if c[0] == "report"] == [("report", "host-a", "s-failed")]


async def test_p_says_why_when_the_report_cannot_be_written():
    be = FakeBackend([advised_view()])

    async def refuse(host: str, session_id: str) -> str:
        raise RuntimeError(f"{host}: no session {session_id!r} in its runs directory")
    be.report = refuse  # type: ignore[method-assign]
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await select(pilot, 0)
        await pilot.press("p")
        await until(pilot, lambda: toast_starting(app, "report of s-ready not written: host-a: no session"))


def test_advice_screen_snapshot(snap_compare):
    """The advice detail: the message, kind and who, the evidence, the checked change."""
    from ui_fakes import harness

    items = advised_view().advice + [Advice(host="host-a", gpu=3, pid=5150, kind="power_capped",
                                            message="power at the limit with clocks throttled: expect lower throughput",
                                            evidence=["power 698 W of 700 W", "throttle: sw_power_cap"])]
    app = harness(lambda: [], on_ready=lambda a: a.push_screen(AdviceScreen(items, gpu=3, host="host-a")))

    async def run_before(pilot) -> None:
        await until(pilot, lambda: "throttle: sw_power_cap" in advice_text(pilot.app))
    assert snap_compare(app, terminal_size=(110, 30), run_before=run_before)


async def test_live_backend_report_writes_markdown_and_svg_under_the_state_dir(local_host, monkeypatch):  # noqa: F811
    """LiveBackend.report (the TUI's p) on a real failed stand-in launch: the Markdown and the panel's SVG
    land in $XDG_STATE_HOME/mtpconsole/reports, drawn by the same functions as ``mtpconsole report``."""
    import json

    from console.config import load_config
    from console.link.link import HostLink
    from console.link.ssh import HostSpec
    from console.ops.backend import LiveBackend
    from tests.helpers.sshd import free_port

    tmp = local_host
    r = await asyncio.to_thread(mtp, tmp, "launch", "--host", "local", "--gpu", "0", "--port", str(free_port()),
                                "--force", "--wait", "--json", "--", "--model-path", str(tmp / "model"), *FLAGS)
    sid = json.loads(r.stdout)["session_id"]
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp / "state"))
    cfg = load_config(tmp / "config.toml")
    link = HostLink(HostSpec(name="local", local=True), cfg.hosts["local"])
    be = LiveBackend(cfg, [link], audit=Audit(tmp / "audit.jsonl"))
    try:
        await link.open()
        path = await be.report("local", sid)
    finally:
        await link.close()
    md = tmp / "state" / "mtpconsole" / "reports" / f"report-{sid}.md"
    assert path == str(md) and md.exists()
    svg = md.with_suffix(".svg").read_text()
    text = md.read_text()
    assert f"]({md.with_suffix('.svg').name})" in text and "## Summary" in text and "gpu_oom" in text
    assert "<svg" in svg and "FAILED" in svg and SECRET not in text + svg
    assert "launch" in text.split("## Timeline", 1)[1]  # the audit log's launch entry, from the console's own log


async def test_demo_tui_shows_the_advice_on_the_hand_started_servers_panel(monkeypatch):
    """The whole path on the demo: link → tracker (advice) → LiveBackend → app → the GPU panel's line."""
    from console.link.link import HostLink
    from console.link.ssh import HostSpec
    from console.ops.backend import LiveBackend
    from console.sim.demo import demo_environment
    from console.ui.app import make_app

    monkeypatch.setenv("MTPCONSOLE_AUDIT_LOG", os.devnull)
    async with demo_environment(load=True) as (cfg, names):
        links = [HostLink(HostSpec(name=n, local=True), cfg.hosts[n], interval=0.5) for n in names]
        app = make_app(LiveBackend(cfg, links, interval=0.5))  # live data: the real clock
        app.animation_level = "none"
        async with app.run_test(size=SIZE) as pilot:
            def advised():
                return next((p for p in app.query(GpuPanel) if "of its power limit with" in p.body.plain), None)
            p = await until(pilot, advised, 60)
            p.focus()
            await until(pilot, lambda: p.has_class("selected"))
            await pilot.press("i")
            await until(pilot, lambda: isinstance(app.screen, AdviceScreen))
            assert app.screen.items[0].kind == "gpu_underused"
            await pilot.press("escape")
            await app.action_quit()


def test_tracker_advice_is_rate_limited_and_a_rule_bug_never_stops_the_view(monkeypatch):
    """At most one advisor run a second per host; a failing rule gives no advice, not a frozen host."""
    from console.ops import tracker as tracker_mod

    class Link:
        name = "host-a"
        listeners: list = []

        def listen(self, listener) -> None:
            pass

    now = [1000.0]
    runs: list[int] = []

    def fake_advice(view, shapes, **kw):
        runs.append(len(kw["history"]))
        if len(runs) == 3:
            raise KeyError("a rule's bug")
        return [Advice(host="host-a", gpu=3, pid=5150, kind="gpu_underused", message="GPU underused")]
    monkeypatch.setattr(tracker_mod, "host_advice", fake_advice)
    tr = tracker_mod.HostTracker(Link(), interval=1.0, on_view=lambda v: None, on_log=lambda *a: None,  # type: ignore[arg-type]
                                 clock=lambda: now[0])
    tr.shape_cache = {"/models/demo-27b": None, "/models/other": None}  # nothing to read in the background
    tr.foreign_logs_at = float("inf")  # nor the foreign server's stdout file (this test runs without a loop)
    view = view_a()
    assert [a.kind for a in tr.advise(view)] == ["gpu_underused"]
    now[0] += 0.5
    assert tr.advise(view) and len(runs) == 1  # within the second: the last advice, no new run
    now[0] += 0.6
    tr.advise(view)
    assert runs == [0, 2]  # the second run sees the first reading of each live server (two) as history
    now[0] += 1.0
    assert tr.advise(view) == [] and tr.advice_error == "KeyError: \"a rule's bug\""
