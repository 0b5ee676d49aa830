"""Issue 26, "stoppable actions": operations hold GPUs, not the console, and a launch under way can be aborted.

- A relaunch of GPU 0 (held at its fourth step) does not refuse a launch on GPU 2, nor the orphan hunter's kill of
  an orphan on GPU 2; what it holds (GPUs 0 and 1, its session's) is refused with the operation that holds it
  named (fake backend, deterministic).
- On the local host with simulated GPUs, the real app and LiveBackend: two launches load at once (GPU 0 and GPU 1,
  each from its own `l` form), and `x` aborts the one on the focused GPU — a dialog names the session, its
  recorded process group and its pids, Cancel focused (Cancel kills nothing); confirmed, the group is killed,
  the launch reports "aborted by the operator" (no cause), GPU 0 reads STOPPED, and the launch on GPU 1 loads on.
- The CLI: `kill SESSION` on a LOADING session while another console's `launch --wait` waits on it: the kill is
  confirmed, the waiting launch reports ABORTED (rc 1, `"aborted"` in its JSON, no cause), the session reads
  STOPPED.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from textual.widgets import Button, Input

from console.config import Config, HostConfig
from console.link.link import HostLink
from console.link.ssh import HostSpec
from console.model import ABORTED
from console.ops.backend import LiveBackend
from console.ui.app import make_app
from console.ui.screens.confirm import ConfirmScreen
from console.ui.screens.flag_form import FlagForm
from console.ui.screens.orphans import OrphanScreen
from console.ui.widgets.gpu_panel import GpuPanel
from console.ui.widgets.steps import StepsView
from tests.conftest import free_port
from tests.helpers.rel_util import cleanup_runs, cli, popen_cli, write_config
from tests.helpers.sim_files import make_sim, sim_env
from tests.helpers.wait import until, wait_until
from tests.test_ui_workflow import view_with_orphan
from tests.ui_fakes import FakeBackend, frozen_app, record_toasts, started, toasts

SLOW = "0.5"
"""The stand-in's time scale for a launch the test aborts while it loads (its weights load for 16 s)."""
SGLANG = [sys.executable, "-m", "console.sim.sglang"]


def panel(app, index: int) -> GpuPanel:
    return next(p for p in app.query(GpuPanel) if p.index == index)


async def select(pilot, app, index: int) -> None:
    panel(app, index).focus()
    await until(pilot, lambda: app.selected is panel(app, index))


def reported(p: GpuPanel) -> bool:
    """The panel's launch is under way and its session reported by the host (spawned, with its processes)."""
    s = p.session
    return s is not None and not s.pending and s.state in ("launching", "loading") and bool(s.pids)


def dialog_up(app) -> bool:
    """A confirmation dialog is up with its Cancel button focused."""
    return isinstance(app.screen, ConfirmScreen) and app.focused is not None and app.focused.id == "cancel"


async def submit_form(pilot, app, **fields: str) -> None:
    """Fill the launch form's ``fields`` and press Launch until the form closes (Check first, then launch)."""
    form = await until(pilot, lambda: isinstance(app.screen, FlagForm) and app.screen.whole and app.screen)
    for name, value in fields.items():
        form.query_one(f"#f-{name}", Input).value = value
    for _ in range(4):
        if app.screen is not form:
            break
        await form.action_launch()
        await pilot.pause()
    await until(pilot, lambda: app.screen is not form, 30)


# ---------------------------------------------------------------- per-GPU holds (fake backend)
async def test_a_relaunch_of_gpu_0_does_not_refuse_a_launch_on_gpu_2():
    be = FakeBackend(hold=True)  # every operation waits at its fourth step until the gate opens
    app = frozen_app(be)
    async with app.run_test(size=(160, 50)) as pilot:
        await started(pilot)
        await select(pilot, app, 0)  # s-ready on GPUs 0 and 1
        await pilot.press("r")
        await until(pilot, lambda: dialog_up(app))
        app.screen.query_one("#confirm", Button).press()
        await until(pilot, lambda: app.op_busy and [c for c in be.calls if c[0] == "relaunch"])
        await select(pilot, app, 1)  # held by the relaunch (its session's GPU): refused, the holder named
        for key in ("l", "k", "e"):
            n = len(toasts(app))
            await pilot.press(key)
            said = await until(pilot, lambda: toasts(app)[n:])  # noqa: B023  (awaited in this turn)
            assert "refused: relaunch · host-a · GPUs 0,1 holds host-a GPUs 0,1" in said[0], said
            assert "x aborts it" in said[0] and "other GPUs are free" in said[0]
            assert isinstance(app.screen, type(app.main))
        await select(pilot, app, 2)  # FAILED: free
        await pilot.press("l")
        await until(pilot, lambda: isinstance(app.screen, FlagForm))
        await submit_form(pilot, app, tp_size="1")  # the failed session's flags, on its one GPU
        launches = await until(pilot, lambda: [c[1] for c in be.calls if c[0] == "launch"])
        assert launches[0].gpus == [2]
        steps = app.query_one(StepsView)
        assert steps.title.startswith("launch · host-a · GPUs 2")  # the one begun last is shown ...
        assert any(x.startswith("relaunch · host-a · GPUs 0,1") for x in steps.others)  # ... the other listed
        assert {r.op for r in app.ops.running} == {"relaunch", "launch"}
        be.gate.set()
        await until(pilot, lambda: not app.op_busy and len(app.results) == 2)
        assert all(r.ok for r in app.results) and not steps.others


async def test_an_orphan_kill_on_gpu_2_runs_while_a_relaunch_holds_gpus_0_and_1():
    """The orphan hunter's kill holds the GPUs the orphan holds memory on (GPU 2), not the whole host."""
    be = FakeBackend([view_with_orphan()], hold=True)
    app = frozen_app(be)
    async with app.run_test(size=(160, 50)) as pilot:
        await started(pilot)
        await select(pilot, app, 0)
        await pilot.press("r")
        await until(pilot, lambda: dialog_up(app))
        app.screen.query_one("#confirm", Button).press()
        await until(pilot, lambda: [c for c in be.calls if c[0] == "relaunch"])
        await pilot.press("o")
        await until(pilot, lambda: isinstance(app.screen, OrphanScreen) and app.screen.orphans)
        await pilot.press("k")
        await until(pilot, lambda: dialog_up(app))
        app.screen.query_one("#confirm", Button).press()
        kills = await until(pilot, lambda: [c[1] for c in be.calls if c[0] == "kill"])
        assert kills[0].pid == 7777
        assert {r.gpus for r in app.ops.running} == {frozenset({0, 1}), frozenset({2})}
        be.gate.set()
        await until(pilot, lambda: not app.op_busy and len(app.results) == 2)


async def test_x_without_a_launch_under_way_says_what_there_is():
    app = frozen_app(FakeBackend())
    async with app.run_test(size=(160, 50)) as pilot:
        await started(pilot)
        await select(pilot, app, 0)  # READY
        await pilot.press("x")
        said = await until(pilot, lambda: toasts(app))
        assert said[-1] == "no launch in progress on host-a GPU 0 (READY: k kills it): x aborts a launch while it loads"
        assert not isinstance(app.screen, ConfirmScreen)


async def test_x_is_refused_in_read_only_mode():
    app = frozen_app(FakeBackend(), read_only=True)
    async with app.run_test(size=(160, 50)) as pilot:
        await started(pilot)
        await select(pilot, app, 0)
        await pilot.press("x")
        await until(pilot, lambda: "read-only: abort launch disabled" in toasts(app))


# ---------------------------------------------------------------- the abort key on the local host
@pytest.fixture
def sim(tmp_path):
    return make_sim(tmp_path, 2, tag="x")


@pytest.fixture(autouse=True)
def _private_audit_log(tmp_path, monkeypatch):
    monkeypatch.setenv("MTPCONSOLE_AUDIT_LOG", str(tmp_path / "audit.jsonl"))


def _host_config(d: Path, runs_dir: Path) -> HostConfig:
    return HostConfig(transport="local", python=sys.executable, runs_dir=str(runs_dir), gpu_source="sim",
                      sim_dir=str(d), server_command=SGLANG, launch_env={**sim_env(d), "MTPCONSOLE_SIM_SPEED": SLOW})


def _gone(pids: list[int]) -> bool:
    return not any(Path(f"/proc/{p}").exists() and "zombie" not in Path(f"/proc/{p}/status").read_text().lower()
                   for p in pids if Path(f"/proc/{p}/status").exists())


async def test_x_aborts_the_launch_on_the_focused_gpu_while_another_loads(sim, runs_dir, tmp_path):
    d, model = sim
    hc = _host_config(d, runs_dir)
    backend = LiveBackend(Config(hosts={"local": hc}), [HostLink(HostSpec(name="local", local=True), hc,
                                                                  interval=0.3)], interval=0.3, cache_dir=tmp_path)
    app = make_app(backend)
    app.animation_level = "none"
    record_toasts(app)
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            await until(pilot, lambda: len(app.panels()) == 2, 30)
            for gpu in (0, 1):  # two launches at once: the second is not refused by the first
                await select(pilot, app, gpu)
                await pilot.press("l")
                await submit_form(pilot, app, model_path=str(model), port=str(free_port()))
            await until(pilot, lambda: all(reported(p) for p in app.panels()), 60,
                        what=lambda: [(p.index, p.badge_label) for p in app.panels()])
            assert {r.op for r in app.ops.running} == {"launch"} and len(app.ops.running) == 2
            s0 = panel(app, 0).session
            info = next(x for x in app.views["local"].snapshot.sessions if x.session_id == s0.session_id)
            pgid, pids = info.record.pgid, list(s0.pids)
            await select(pilot, app, 0)
            await pilot.press("x")
            await until(pilot, lambda: dialog_up(app))
            body = "\n".join(app.screen.lines)
            assert app.screen.title_text == f"Abort the launch of {s0.session_id}?"
            assert f"session:  {s0.session_id} · {s0.state.upper()}" in body and f"process group {pgid}" in body
            assert all(str(p) in body for p in pids) and ABORTED in body
            await pilot.press("enter")  # Cancel: nothing is killed
            await until(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
            assert not [r for r in app.results if r.op == "kill"] and reported(panel(app, 0))
            await pilot.press("x")
            await until(pilot, lambda: dialog_up(app))
            app.screen.query_one("#confirm", Button).press()
            done = await until(pilot, lambda: len(app.results) == 2 and app.results, 60)
            kill = next(r for r in done if r.op == "kill")
            launch = next(r for r in done if r.op == "launch")
            assert kill.ok and kill.state == "stopped", kill
            assert launch.aborted == ABORTED and launch.cause is None and not launch.ok, launch
            assert launch.session_id == s0.session_id and launch.state == "stopped"
            assert any(s.state == "warning" and ABORTED in (s.evidence or "") for s in launch.steps)
            await until(pilot, lambda: panel(app, 0).badge_label == "STOPPED", 10)
            assert f"launch {ABORTED}: {s0.session_id} reads STOPPED" in toasts(app)
            assert _gone(pids)
            s1 = panel(app, 1).session  # the other launch goes on, untouched
            assert s1 is not None and s1.state in ("loading", "launching", "ready")
            assert len(app.ops.running) == 1 and app.ops.running[0].gpus == frozenset({1})
            await select(pilot, app, 1)  # and it can be aborted the same way
            await pilot.press("x")
            await until(pilot, lambda: dialog_up(app))
            app.screen.query_one("#confirm", Button).press()
            await until(pilot, lambda: len(app.results) == 4 and not app.op_busy, 60)
            assert [r.aborted for r in app.results if r.op == "launch"] == [ABORTED, ABORTED]
            await app.action_quit()
    finally:
        cleanup_runs(runs_dir)


# ---------------------------------------------------------------- the CLI: kill SESSION mid-launch
def test_cli_kill_mid_launch_aborts_the_waiting_launch(sim, runs_dir, tmp_path):
    d, model = sim
    conf = write_config(tmp_path / "config.toml", {"local": {
        "python": sys.executable, "runs_dir": str(runs_dir), "gpu_source": "sim", "sim_dir": str(d),
        "server_command": SGLANG, "launch_env": {**sim_env(d), "MTPCONSOLE_SIM_SPEED": SLOW}}})
    env = {"MTPCONSOLE_AUDIT_LOG": str(tmp_path / "audit.jsonl"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    base = ["--config", str(conf)]
    waiting = popen_cli(*base, "launch", "--host", "local", "--gpu", "0", "--port", str(free_port()), "--wait",
                        "--json", "--", "--model-path", str(model), env=env)
    try:
        def loading() -> str | None:
            out = cli(*base, "sessions", "--host", "local", "--json", env=env)
            views = [v for v in json.loads(out.stdout or "[]") if v.get("session_id")]
            return next((v["session_id"] for v in views if v["state"] == "loading"), None)
        sid = wait_until(loading, 60, step=0.3)
        assert sid, (waiting.poll(), waiting.stderr.read() if waiting.poll() is not None else "")
        assert waiting.poll() is None  # still waiting for READY
        k = cli(*base, "kill", sid, "--host", "local", "--grace", "5", "--json", env=env)
        assert k.returncode == 0 and json.loads(k.stdout)["ok"], k.stdout + k.stderr
        out, err = waiting.communicate(timeout=60)
        r = json.loads(out)
        assert waiting.returncode == 1, (out, err)
        assert r["aborted"] == ABORTED and r["cause"] is None and r["ok"] is False and r["session_id"] == sid
        assert r["state"] == "stopped"
        s = cli(*base, "sessions", "--host", "local", "--json", env=env)
        assert next(v for v in json.loads(s.stdout) if v["session_id"] == sid)["state"] == "stopped"
        text = cli(*base, "sessions", "--host", "local", env=env)
        assert text.returncode == 0
    finally:
        if waiting.poll() is None:
            waiting.kill()
        cleanup_runs(runs_dir)
