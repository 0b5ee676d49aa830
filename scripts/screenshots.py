"""Write SVG screenshots of the console into screenshots/ (README "Screenshots").

    python scripts/screenshots.py [--out screenshots]

The app is the real one (``console.ui.app.make_app``) in a headless terminal; the data is the
deterministic fake backend from tests/ui_fakes.py staging the demo host's incident (host
"demo", 4 × 96 GB GPUs, a hand-started server on GPU 0), so every run draws the same pictures
and no real host name appears. Operations run through the app's own keys and dialogs.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import ui_fakes as f  # noqa: E402
from console.model import GpuProc, HostView, ServeMetrics  # noqa: E402
from console.sim.demo import FOREIGN_FLAGS, INCIDENT_FLAGS  # noqa: E402

SIZE = (160, 44)
MODEL = "/models/Qwen3.6-27B"
CMD = ["python3", "-m", "sglang.launch_server", "--model-path", MODEL]


def demo_view() -> HostView:
    """The demo host before the relaunch: the hand-started server on GPU 0, three idle GPUs."""
    def g(i, used=8, power=80.0, procs=None):
        return f.gpu(i, used=used, power=power, procs=procs).model_copy(update={
            "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "mem_total_mib": 97887, "power_limit_w": 600.0})
    gpus = [g(0, 84_568, 301.0, [GpuProc(pid=8896, used_mib=84_560)]), g(1), g(2), g(3)]
    servers = [f.proc(8896, ["sglang::scheduler_TP0"], None, {0: 84_560})]
    fg = f.session("foreign", None, [0], host="demo", argv=[*CMD, "--port", "30000", *FOREIGN_FLAGS], port=30000,
                   pids=[8892, 8896], launcher_pid=8892, flags_summary="no spec · mem 0.85 · run 32 · ctx 32768",
                   metrics=ServeMetrics(gen_throughput=398.0, running_req=31, queue_req=4))
    return HostView(snapshot=f.snapshot("demo", gpus=gpus, servers=servers), sessions=[fg])


def backend(outcome: str) -> f.FakeBackend:
    be = f.FakeBackend([demo_view()], outcome=outcome)
    be.logs = {("demo", k[1]): v for k, v in be.logs.items()}
    be.validator = lambda flags: ([("error", "--speculative-num-draft-tokens: invalid int value: 'four'")]
                                  if "four" in flags else [("ok", "flags: no problems against sglang 0.5.23")])
    be.planner = lambda flags, gpus: (("error", "memory plan: does not fit — recurrent state for 512 requests "
                                                "exceeds the static budget; lower --max-running-requests to ≤ 40")
                                      if "512" in flags else "memory plan: fits — 16 requests, KV 21.3 GB")
    return be


async def settle(pilot, n: int = 3) -> None:
    for _ in range(n):
        await pilot.pause(0.12)


async def relaunch(app, pilot, flags: list[str], force: bool) -> None:
    """e on GPU 0, the flags typed into "other flags", force as asked, Launch, Confirm launch."""
    from textual.widgets import Input, Select, Switch

    await pilot.press("e")
    await settle(pilot)
    form = app.screen
    for name in ("mem_fraction", "max_running", "context_length", "extras"):
        form.query_one(f"#f-{name}", Input).value = ""
    form.query_one("#f-spec_algo", Select).value = "none"
    form.query_one("#f-extras", Input).value = " ".join(flags)
    form.query_one("#force", Switch).value = force
    await settle(pilot, 1)
    for _ in range(2):
        await pilot.click("#launch")
        await settle(pilot, 2)
    await settle(pilot)


async def shoot(out: Path) -> list[Path]:
    from textual.widgets import Input

    written = []

    async def one(name: str, outcome: str, script, theme: str = "dark") -> None:
        app = f.frozen_app(backend(outcome), theme=theme)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await pilot.press("tab")
            await settle(pilot)
            await script(app, pilot)
            await settle(pilot)
            path = out / f"{name}.svg"
            app.save_screenshot(str(path))
            written.append(path)

    async def failed_relaunch(app, pilot):
        await relaunch(app, pilot, INCIDENT_FLAGS, force=True)

    async def form_error(app, pilot):
        await pilot.press("e")
        await settle(pilot)
        app.screen.query_one("#f-mem_fraction", Input).value = "1.5"
        app.screen.query_one("#f-extras", Input).value = "--max-running-requests 512 --speculative-num-draft-tokens four"
        await pilot.click("#launch")
        await settle(pilot, 2)
        app.screen.query_one("#f-mem_fraction", Input).value = "0.90"
        await pilot.click("#launch")
        await settle(pilot, 2)

    async def kill_confirm(app, pilot):
        await pilot.press("k")

    async def good_relaunch(app, pilot):
        await relaunch(app, pilot, ["--mem-fraction-static", "0.90", "--max-running-requests", "16"], force=False)

    async def nothing(app, pilot):
        pass

    await one("main-failed-relaunch", "failed", failed_relaunch)
    await one("flag-form-validation-error", "ready", form_error)
    await one("kill-confirmation", "ready", kill_confirm)
    await one("steps-successful-relaunch", "ready", good_relaunch)
    await one("light-theme", "ready", good_relaunch, theme="light")
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(REPO / "screenshots"))
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for p in asyncio.run(shoot(out)):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
