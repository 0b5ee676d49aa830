"""Issue 16, first useful frame: the GPU panels show real (simulated) data in the first frame when the host's
first sample came before the UI (the demo: its link is started before Textual is imported), and a host whose
first sample comes later shows it at once, not at the next timer tick — checked on the real app with the
apply timer switched off. With real processes: ``mtpconsole --demo`` on a pseudo-terminal draws GPU panels
with the simulated GPUs' power readings (``<watts>/600 W``), quits on ``q`` and leaves nothing;
a link started early and run again by the backend runs one agent; the demo's stand-ins run at a lower CPU
priority behind the TUI; the TUI's start-up pauses the cyclic GC and restores it."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from console.commands import tui
from console.config import HostConfig
from console.link.link import HostLink
from console.link.ssh import HostSpec
from console.ui.app import MtpConsoleApp
from console.ui.themes import NAMES
from console.ui.widgets.gpu_panel import GpuPanel
from console.ui.widgets.host_section import HostSection
from tests.helpers.rel_util import REPO, cleanup_runs
from tests.helpers.wait import aholds_for, await_until, stays, until
from tests.ui_fakes import NOW, FakeBackend, view_a

SIZE = (160, 50)


class NoApplyTimer(MtpConsoleApp):
    """The app without its 0.1 s apply timer: whatever shows was applied by the start-up path itself."""

    def set_interval(self, interval, callback=None, **kw):  # type: ignore[override]
        if callback == self.apply_views:
            return None
        return super().set_interval(interval, callback, **kw)


class LateBackend(FakeBackend):
    """A host whose first sample arrives after the UI is up (a real host behind SSH)."""

    async def start(self, on_view, on_log, on_audit) -> None:
        self.on_view, self.on_log, self.on_audit = on_view, on_log, on_audit


def _panels(app) -> list[GpuPanel]:
    return [p for p in app.query(GpuPanel) if p.gpu is not None]


async def test_first_frame_has_the_sample_the_backend_already_had():
    app = NoApplyTimer(FakeBackend([view_a()]), clock=lambda: NOW)
    app.animation_level = "none"
    async with app.run_test(size=SIZE) as pilot:
        panels = await until(pilot, lambda: _panels(app))  # the apply timer is off: the first frame carried it
        assert sorted(p.index for p in panels) == [0, 1, 2, 3]
        assert {p.index: p.gpu.power_w for p in panels}[0] == 612.0  # the sample's own figure


async def test_a_hosts_first_sample_after_start_is_shown_without_a_timer_tick():
    backend = LateBackend([view_a()])
    app = NoApplyTimer(backend, clock=lambda: NOW)
    app.animation_level = "none"
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.query(HostSection))  # the screen is up
        assert _panels(app) == []  # no sample yet: no panel, no placeholder figure
        backend.push(view_a())
        await until(pilot, lambda: len(_panels(app)) == 4)
        n = len(app.pending_views)
        backend.push(view_a())  # later samples wait for the timer (one apply per tick): off here
        assert await stays(pilot, lambda: len(app.pending_views) == n + 1, 0.3)


def test_the_tui_knows_the_theme_names_without_importing_textual():
    assert tui.THEMES == NAMES


def test_the_start_up_pauses_the_cyclic_gc_and_restores_it(monkeypatch):
    seen = []

    async def fake_main(ctx, *, resume_gc=False):
        seen.append((gc.isenabled(), resume_gc))
        return 0

    monkeypatch.setattr(tui, "_main", fake_main)
    assert gc.isenabled()
    assert tui.run(tui.CliContext(theme="dark"), None) == 0  # type: ignore[arg-type]
    assert seen == [(False, True)] and gc.isenabled()


async def test_an_early_link_is_run_once(tmp_path):
    """The TUI starts each link before the UI exists; the backend's own run() joins that loop (one agent)."""
    sim = tmp_path / "sim"
    (sim / "alloc").mkdir(parents=True)
    (sim / "gpus.json").write_text(json.dumps([{"index": 0, "uuid": "GPU-s0", "name": "Sim", "mem_total_mib": 97887,
                                                "power_limit_w": 600.0}]))
    runs = tmp_path / "runs"
    runs.mkdir()
    link = HostLink(HostSpec(name="local", local=True),
                    HostConfig(python=sys.executable, runs_dir=str(runs), gpu_source="sim", sim_dir=str(sim)),
                    interval=0.3)
    starts: list[int] = []
    again: asyncio.Task | None = None
    orig = link.open

    async def counted_open():
        starts.append(1)
        await orig()
    link.open = counted_open  # type: ignore[method-assign]
    early = asyncio.create_task(link.run())
    try:
        await asyncio.wait_for(link.connected.wait(), 30)
        again = asyncio.create_task(link.run())  # the backend's prestart
        assert await aholds_for(lambda: starts == [1] and not again.done(), 0.5)  # no second start: it waits
        assert link.running
        assert link.sample is not None and link.sample["gpus"][0]["power_limit_w"] == 600.0
    finally:
        await link.close()
        await asyncio.wait_for(asyncio.gather(early, *([again] if again else [])), 10)
        cleanup_runs(runs)
    assert not link.running


def _demo_pids(marker: bytes) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if marker in Path(f"/proc/{name}/environ").read_bytes():
                    out.append(int(name))
            except OSError:
                continue
    return out


async def test_the_demo_stand_ins_run_behind_the_tui():
    from console.sim.demo import BACKGROUND_NICE, demo_environment

    async with demo_environment(load=False, background=True) as (cfg, _names):
        marker = f"MTPCONSOLE_SIM_DIR={cfg.hosts['demo'].sim_dir}".encode()
        pids = await await_until(lambda: _demo_pids(marker), 10)
        assert pids
        foreign = min(pids)
        assert os.getpriority(os.PRIO_PROCESS, foreign) == BACKGROUND_NICE
        try:
            group = Path(f"/proc/{foreign}/autogroup").read_text()
        except OSError:  # a kernel without autogroups
            group = ""
        assert not group or group.rstrip().endswith(f"nice {BACKGROUND_NICE}")
    assert await await_until(lambda: not _demo_pids(marker), 10) is True


def test_demo_on_a_terminal_shows_simulated_power_and_leaves_nothing():
    """The real TUI (``python -m console --demo``) on a 200x50 pty draws the GPU panels with the simulated
    GPUs' power (``<watts>/600 W``: the demo's GPUs have a 600 W limit); q quits, nothing is left behind."""
    env = {**os.environ, "MTPCONSOLE_AUDIT_LOG": os.devnull, "PYTHONPATH": str(REPO)}
    p = subprocess.run([sys.executable, "-m", "bench.first_frame", "mtpconsole", r"\d+/600 W", "--",
                        sys.executable, "-m", "console", "--demo"], capture_output=True, text=True, cwd=REPO,
                       env=env, timeout=120)
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["first_frame_ms"] is not None and r["first_data_ms"] is not None, (r, p.stderr[-2000:])
    assert r["exited_by"] == "q" and r["leftovers"] == [], r
    assert r["first_data_ms"] >= r["first_frame_ms"]


def test_power_readings_on_the_first_data_frame_are_the_simulations():
    """What bench.first_frame matched as data is a panel's power bar text (``612/600 W`` style), and the
    demo's GPUs have a 600 W limit: a placeholder such as ``0/0 W`` or ``?/600 W`` would not be data."""
    from console.ui.widgets.gpu_panel import power_bar

    text = power_bar(412.0, 600.0).plain
    assert re.search(r"\d+/\d+ W", text) and "412/600 W" in text
    assert not re.search(r"\d+/\d+ W", power_bar(None, 600.0).plain)
