"""Find and kill an orphan from the TUI with real parts: the real app and LiveBackend on the `local` host with
simulated GPUs, a real double-forked ``sglang::scheduler`` holding GPU memory; `o` lists it with its evidence,
`k` opens the Cancel-focused dialog, Kill runs the confirmed kill (gone, GPU memory released)."""

from __future__ import annotations

import sys
from pathlib import Path

from textual.widgets import Button

from console.config import Config, HostConfig
from console.link.link import HostLink
from console.link.ssh import HostSpec
from console.ops.backend import LiveBackend
from console.ui.app import make_app
from console.ui.screens.confirm import ConfirmScreen
from console.ui.screens.orphans import OrphanScreen
from tests.helpers.rel_util import cleanup_runs, kill_quietly
from tests.helpers.wait import until
from tests.test_orphans_cli import sim, sim_env, start_orphan  # noqa: F401  (fixture)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def test_o_finds_and_k_kills_a_real_orphan(sim, tmp_path, runs_dir):  # noqa: F811
    d, _ = sim
    pid = start_orphan(d, tmp_path, gpu=1, mib=6000)
    hc = HostConfig(transport="local", python=sys.executable, runs_dir=str(runs_dir), gpu_source="sim",
                    sim_dir=str(d), launch_env=sim_env(d))
    backend = LiveBackend(Config(hosts={"local": hc}), [HostLink(HostSpec(name="local", local=True), hc,
                                                                  interval=0.3)], interval=0.3)
    app = make_app(backend)
    try:
        async with app.run_test(size=(160, 40)) as pilot:
            await until(pilot, lambda: any(p.pid == pid for v in app.views.values() for p in v.snapshot.servers), 30)
            await pilot.press("o")
            await until(pilot, lambda: isinstance(app.screen, OrphanScreen))
            screen = app.screen
            await until(pilot, lambda: [o.pid for o in screen.orphans] == [pid], 10, what=lambda: screen.orphans)
            assert any("6,000 MiB on GPU 1" in e for e in screen.orphans[0].evidence)
            await pilot.press("k")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.focused is not None
                        and app.focused.id == "cancel")
            app.screen.query_one("#confirm", Button).press()
            await until(pilot, lambda: bool(app.results), 60)
            r = app.results[-1]
            steps = {s.name: s.state for s in r.steps}
            assert r.ok and steps["exited"] == "ok" and steps["GPU released"] == "ok", r
            assert not _alive(pid)
            await app.action_quit()
    finally:
        kill_quietly([pid])
        cleanup_runs(runs_dir)
