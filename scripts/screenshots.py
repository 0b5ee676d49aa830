"""Write SVG screenshots of the console into screenshots/ (README "Screenshots"), from the real demo.

    python scripts/screenshots.py [--out screenshots]

The app is the real one (``console.ui.app.make_app``) with the real backend (``LiveBackend``) on the
built-in demo host (``console.sim.demo``: 4 simulated 96 GB GPUs, the SGLang stand-in, a server
started by hand on GPU 0 under load), in a headless terminal. Everything shown is what the demo
really does: its log lines, its confirmation steps and their timings, its failures. The incident is
replayed with the app's own keys and dialogs: the kill dialog of the hand-started server, the flag
form catching bad values, the forced relaunch with the incident's flags dying of gpu_oom, the full
log searched, the sessions table, the events, a relaunch with flags that fit, the light theme.
Every wait is bounded; the demo is torn down at the end (nothing is left running).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO)]

from console.link.link import HostLink  # noqa: E402
from console.link.ssh import HostSpec  # noqa: E402
from console.ops.backend import LiveBackend  # noqa: E402
from console.sim.demo import FIXED_FLAGS, INCIDENT_FLAGS, demo_environment  # noqa: E402

SIZE = (160, 44)


async def until(pilot, cond: Callable[[], object], timeout: float, what: str) -> None:
    """Pause until ``cond()`` holds (bounded); says what it waited for when it gives up."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit(f"screenshots: gave up waiting {timeout:.0f} s for {what}")
        await pilot.pause(0.2)


async def shoot(out: Path) -> list[Path]:
    from textual.widgets import Input, Select, Switch

    from console.ui.app import MainScreen, make_app
    from console.ui.screens.flag_form import FlagForm

    written: list[Path] = []
    async with demo_environment(load=True) as (cfg, names):
        link = HostLink(HostSpec(name="demo", local=True), cfg.hosts["demo"], interval=1.0)
        backend = LiveBackend(cfg, [link], interval=1.0)
        app = make_app(backend)
        async with app.run_test(size=SIZE) as pilot:
            def panel0():
                return next((p for p in app.panels() if p.index == 0), None)

            def save(name: str) -> None:
                path = out / f"{name}.svg"
                app.save_screenshot(str(path))
                written.append(path)
                print(path, flush=True)

            async def idle(what: str) -> None:
                await until(pilot, lambda: not app.op_busy, 240, what)
                await pilot.pause(2.5)  # the next samples: the panels read what the host says now

            async def to_main() -> None:
                for _ in range(4):
                    if isinstance(app.screen, MainScreen):
                        return
                    await pilot.press("escape")
                    await pilot.pause(0.3)

            async def edit(flags: list[str], force: bool) -> None:
                await pilot.press("e")
                await until(pilot, lambda: isinstance(app.screen, FlagForm), 10, "the flag form")
                form = app.screen
                for name in ("mem_fraction", "max_running", "context_length", "extras"):
                    form.query_one(f"#f-{name}", Input).value = ""
                form.query_one("#f-spec_algo", Select).value = "none"
                form.query_one("#f-extras", Input).value = " ".join(flags)
                form.query_one("#force", Switch).value = force
                await pilot.pause(0.3)
                for _ in range(2):
                    await form.submit("launch")
                    await pilot.pause(0.5)

            await until(pilot, lambda: panel0() is not None and panel0().badge_label == "FOREIGN"
                        and panel0().gpu is not None and (panel0().gpu.power_w or 0) > 200, 90,
                        "the hand-started server serving on GPU 0")
            app.main.focus_panel(panel0())
            await pilot.pause(2.0)

            await pilot.press("k")
            await pilot.pause(0.5)
            save("kill-confirmation")
            await to_main()

            await pilot.press("e")
            await until(pilot, lambda: isinstance(app.screen, FlagForm), 10, "the flag form")
            form = app.screen
            form.query_one("#f-mem_fraction", Input).value = "1.5"
            form.query_one("#f-extras", Input).value = "--max-running-requests 512 --speculative-num-draft-tokens four"
            await form.submit("check")
            await pilot.pause(0.5)
            form.query_one("#f-mem_fraction", Input).value = "0.90"
            await form.submit("check")
            await pilot.pause(1.0)
            save("flag-form-validation-error")
            await to_main()

            await edit(INCIDENT_FLAGS, force=True)  # the incident's relaunch, forced past the planner
            await idle("the forced relaunch")
            save("main-failed-relaunch")

            await pilot.press("z")
            await pilot.pause(0.8)
            await pilot.press("slash", *"memory", "enter")
            await pilot.pause(0.5)
            await pilot.press("d")
            await pilot.pause(0.5)
            save("full-log-search")
            await to_main()

            await pilot.press("s")
            await pilot.pause(1.0)
            save("sessions-table")
            await to_main()

            await pilot.press("v")
            await pilot.pause(1.0)
            save("events")
            await to_main()

            await edit(FIXED_FLAGS, force=False)  # e on the FAILED session: its flags, fixed
            await idle("the relaunch with flags that fit")
            save("steps-successful-relaunch")

            await pilot.press("t")
            await pilot.pause(0.8)
            save("light-theme")
            await app.action_quit()
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(REPO / "screenshots"))
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    asyncio.run(shoot(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
