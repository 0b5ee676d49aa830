"""SVG snapshots of every widget state and of the whole app on fixed views.

Regenerate with ``pytest tests/test_ui_snapshots.py --snapshot-update`` and review the SVGs.
Frozen clock, UTC, no animations, no blinking cursors, no spinner frames, fake host names.
"""

from __future__ import annotations

import pytest
from textual.containers import Vertical
from textual.widgets import Input
from ui_fakes import (
    ARGV,
    FAILED_LOG,
    LAUNCH_STEPS,
    NOW,
    SESSION_LOG,
    FakeBackend,
    failed,
    foreign,
    frozen_app,
    gpu,
    harness,
    ready,
    session,
    snapshot,
    started,
    toasts,
    view_a,
    view_b,
    with_current,
)

from console.model import HostView, OperationResult, Step
from console.ui.flag_values import from_argv
from console.ui.screens.confirm import ConfirmScreen
from console.ui.screens.flag_form import FlagForm
from console.ui.widgets.badge import Badge
from console.ui.widgets.gpu_panel import GpuPanel
from console.ui.widgets.host_section import HostSection
from console.ui.widgets.log_pane import LogPane
from console.ui.widgets.steps import StepsView
from tests.helpers.wait import until

BADGES = [("IDLE", "idle"), ("LAUNCHING 3/6", "launching"), ("LOADING", "loading"), ("READY", "ready"),
          ("FAILED: gpu_oom", "failed"), ("STOPPING", "stopping"), ("STOPPED", "stopped"), ("FOREIGN", "foreign"),
          ("STALE", "stale"), ("UNREACHABLE", "unreachable")]


async def panel_shown(pilot) -> None:
    await until(pilot, lambda: len(pilot.app.query(GpuPanel)) == 1)


async def log_shown(pilot) -> None:
    pane = pilot.app.query_one(LogPane)
    await until(pilot, lambda: pane.log_widget.lines and (not pane.pattern or len(pane.log_widget.lines) == 1))


async def form_shown(pilot) -> None:
    """The form is up and the Check it runs at open is done (or was skipped: the fields do not parse)."""
    await until(pilot, lambda: isinstance(pilot.app.screen, FlagForm) and pilot.app.screen.query("#f-model_path")
                and not pilot.app.screen.opening)


def launch_released(pilot) -> bool:
    """The form's Launch button is drawn out of its pressed effect (Textual's Button keeps it ~0.2 s)."""
    return not pilot.app.screen.query_one("#launch").has_class("-active")


async def dialog_shown(pilot) -> None:
    await until(pilot, lambda: isinstance(pilot.app.screen, ConfirmScreen) and pilot.app.screen.query(".dialog-body"))


async def steps_shown(pilot) -> None:
    await until(pilot, lambda: len(pilot.app.query_one(StepsView).rows) == 6)


@pytest.mark.parametrize("theme", ["dark", "light", "high-contrast"])
def test_every_badge(snap_compare, theme):
    app = harness(lambda: [Vertical(*(Badge(label, kind) for label, kind in BADGES))], theme=theme)
    assert snap_compare(app, terminal_size=(40, 12))


def _one_gpu(sess=None, **snap_kw) -> HostView:
    g = gpu(0, used=90_000, power=455.0, procs=[]) if sess else gpu(0)
    return HostView(snapshot=snapshot(gpus=[g], **snap_kw), sessions=[sess] if sess else [])


PANELS = {
    "idle": _one_gpu(),
    "launching": _one_gpu(session("launching", "s-launch", [0], step=2)),
    "loading": _one_gpu(session("loading", "s-load", [0], line="Load weight begin. avail mem=139.10 GB")),
    "ready": _one_gpu(ready(gpus=(0,))),
    "failed": _one_gpu(failed(gpus=(0,))),
    "foreign": _one_gpu(foreign(gpus=(0,))),
    "stale": _one_gpu(ready(gpus=(0,)), age=6.0),
    "unreachable": _one_gpu(ready(gpus=(0,)), state="unreachable", error="connection lost: read timeout"),
}


@pytest.mark.parametrize("state", list(PANELS))
def test_gpu_panel(snap_compare, state):
    view = with_current(PANELS[state])  # each GPU's current session, as a backend pushes it
    app = harness(lambda: [HostSection("host-a")],
                  on_ready=lambda a: a.query_one(HostSection).apply(view, NOW, 1.0))
    assert snap_compare(app, terminal_size=(90, 10), run_before=panel_shown)


def _log_app(pattern: str = ""):
    def ready_(a) -> None:
        pane = a.query_one(LogPane)
        pane.start("host-a", "s-ready", "session s-ready · READY · host-a · GPUs 0,1\nstarted 2023-11-14 22:03:20\n"
                   "$ python3 -m sglang.launch_server --model-path /models/demo-27b")
        pane.add_lines([*SESSION_LOG, *FAILED_LOG, "z" * 3000])
        if pattern:
            box = pane.query_one(Input)
            box.value = pattern
            pane.set_filter(pattern)
    return harness(lambda: [LogPane(id="log")], on_ready=ready_)


def test_log_pane_with_banner(snap_compare):
    assert snap_compare(_log_app(), terminal_size=(100, 18), run_before=log_shown)


def test_log_pane_filtered(snap_compare):
    assert snap_compare(_log_app("memory"), terminal_size=(100, 18), run_before=log_shown)


def _form_app(raw, **kw):
    return harness(lambda: [], on_ready=lambda a: a.push_screen(FlagForm("host-a", raw, **kw)))


def test_flag_form(snap_compare):
    raw = from_argv(["--model-path", "/models/demo-27b", "--mem-fraction-static", "0.85"], [0], 30000)
    assert snap_compare(_form_app(raw, title="Launch on host-a · GPU 0"), terminal_size=(110, 50),
                        run_before=form_shown)


def test_flag_form_with_errors(snap_compare):
    raw = {"model_path": "", "gpus": "0", "mem_fraction": "1.5", "port": "70000", "num_steps": "-1",
           "extras": "--x 'open"}

    async def run_before(pilot) -> None:
        await form_shown(pilot)
        await pilot.click("#launch")
        await until(pilot, lambda: len(pilot.app.screen.query(".field-error.-shown")) == 5 and launch_released(pilot))

    assert snap_compare(_form_app(raw, title="Launch on host-a · GPU 0"), terminal_size=(110, 50),
                        run_before=run_before)


def test_flag_form_edit_with_diff_and_checks(snap_compare):
    raw = from_argv(ARGV, [0, 1], 30000)
    raw["mem_fraction"] = "0.8"
    validator = lambda flags: [("warning", "speculative decoding caps max running requests at 48")]  # noqa: E731
    planner = lambda flags, gpus: "fits: 118.2 of 143.8 GB per GPU"  # noqa: E731

    async def run_before(pilot) -> None:
        await form_shown(pilot)  # the Check run at open shows the checks and the diff; it stops a server: not armed
        await pilot.click("#launch")
        await until(pilot, lambda: "fits: 118.2" in str(pilot.app.screen.query_one("#checks").render())
                    and "+ --mem-fraction-static 0.8" in str(pilot.app.screen.query_one("#diff").render())
                    and launch_released(pilot))

    app = _form_app(raw, title="Edit and relaunch s-ready on host-a · GPUs 0,1", running_argv=ARGV,
                    validator=validator, planner=planner, replaces="s-ready",
                    impact=["session:  s-ready", "pids:     4200"])
    assert snap_compare(app, terminal_size=(110, 60), run_before=run_before)


def test_confirm_dialog(snap_compare):
    lines = ["host:     host-a", "GPUs:     0,1", "session:  s-ready", "pids:     4200", "",
             "then checks: process group gone · no sglang:: orphans · GPU memory released · port closed"]
    app = harness(lambda: [], on_ready=lambda a: a.push_screen(ConfirmScreen("Kill s-ready?", lines, "Kill")))
    assert snap_compare(app, terminal_size=(100, 20), run_before=dialog_shown)


def _steps_app(states: list[str], result: OperationResult | None):
    def ready_(a) -> None:
        v = a.query_one(StepsView)
        v.begin("launch · host-a · GPUs 0")
        v.set_steps([Step(name=n, state=s, started_at=NOW - 2.0, elapsed_s=0.5 + i if s in ("ok", "failed") else None,
                          evidence=f"{n}: evidence" if s in ("ok", "failed") else None)
                     for i, (n, s) in enumerate(zip(LAUNCH_STEPS, states))])
        if result:
            v.finish(result)
    return harness(lambda: [StepsView(lambda: NOW)], on_ready=ready_)


def test_steps_in_progress(snap_compare):
    app = _steps_app(["ok", "ok", "ok", "running", "pending", "pending"], None)
    assert snap_compare(app, terminal_size=(90, 10), run_before=steps_shown)


def test_steps_failed(snap_compare):
    res = OperationResult(op="launch", host="host-a", ok=False, cause="gpu_oom",
                          line="Not enough memory. Please try to increase --mem-fraction-static.",
                          hint="lower --max-running-requests or raise --mem-fraction-static")
    app = _steps_app(["ok", "ok", "ok", "ok", "failed", "skipped"], res)
    assert snap_compare(app, terminal_size=(90, 12), run_before=steps_shown)


async def _select_gpu0(pilot) -> None:
    """At start the first GPU with a session (host-a's GPU 0) is selected and focused, its log shown."""
    await started(pilot)
    app = pilot.app
    await until(pilot, lambda: next(p for p in app.query(GpuPanel) if (p.host, p.index) == ("host-a", 0))
                .has_class("selected") and len(app.query_one(LogPane).lines) == len(SESSION_LOG))


def _whole_app(**kw):
    return frozen_app(FakeBackend([view_a(), view_b()]), **kw)


@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
def test_whole_app(snap_compare, size):
    assert snap_compare(_whole_app(), terminal_size=size, run_before=_select_gpu0)


def test_whole_app_compact_light(snap_compare):
    async def run_before(pilot) -> None:
        await _select_gpu0(pilot)
        await pilot.press("c", "t", "a")
        app = pilot.app
        await until(pilot, lambda: "theme-light" in app.classes and "-shown" in app.query_one("#audit").classes
                    and app.query_one(".gpus").styles.layout.name == "grid")
        await until(pilot, lambda: any(t.startswith("theme: light") for t in toasts(app)))
        app.clear_notifications()  # the theme's toast goes after 3 s: not in the picture, whenever it is taken
    assert snap_compare(_whole_app(), terminal_size=(160, 40), run_before=run_before)


def test_whole_app_high_contrast_read_only(snap_compare):
    assert snap_compare(_whole_app(theme="high-contrast", read_only=True), terminal_size=(160, 40),
                        run_before=_select_gpu0)


def test_whole_app_compact_grid(snap_compare):
    """c with 8 GPUs per host: short panels, as many per row as the width allows."""
    from ui_fakes import view_idle

    from console.model import HostView

    def views():
        a = view_a()
        more = [g.model_copy(update={"index": i, "uuid": f"GPU-{i:04d}"}) for i, g in
                enumerate(view_idle(n=8).snapshot.gpus) if i >= 4]
        return [HostView(snapshot=a.snapshot.model_copy(update={"gpus": [*a.snapshot.gpus, *more]}),
                         sessions=a.sessions), view_b()]

    async def run_before(pilot) -> None:
        await _select_gpu0(pilot)
        await pilot.press("c")
        await until(pilot, lambda: pilot.app.query_one(".gpus").styles.layout.name == "grid")
    assert snap_compare(frozen_app(FakeBackend(views())), terminal_size=(200, 50), run_before=run_before)
