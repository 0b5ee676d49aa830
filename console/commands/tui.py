"""The TUI entry point: ``mtpconsole`` with no subcommand.

Start-up order (the first frame should already show each host's first sample): the hosts are
staged (the demo's) and their links started *first*, then the UI (Textual and the app, the
slowest imports) is imported in a worker thread while the event loop bootstraps the agents, so
an agent's start and first sample overlap the console's own start instead of following it; the
app applies what the links already have as it mounts (console/ui/app.py); what only a key needs (the screens
behind keys, the ``/metrics`` parser) is imported in the background once the first frames are drawn. The
cyclic garbage collector is paused for the start (:data:`GC_PAUSE_S`). BENCHMARKS.md, "Start-up", has the
figures.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import sys

from console.commands.context import CliContext, demo_or_config, make_audit, make_links
from console.config import THEME_NAMES
from console.errors import UserError

UI_MODULES = ("console.ops.backend", "console.ui.app")
"""Imported off the event loop while the links start (a few hundred ms of imports)."""
LATER_MODULES = ("console.core.classify", "console.ui.screens.sessions", "console.ui.screens.log_screen", "console.ui.screens.orphans",
                 "console.ui.screens.events", "console.ui.operations", "prometheus_client.parser")
"""Not needed for the first frame (the log classifier, the screens behind keys, the ``/metrics`` parser): imported off the event
loop once the first frames are drawn (:data:`WARM_AFTER_S`), so a key pressed then does not wait for them."""
WARM_AFTER_S = 1.5
"""Seconds after the app starts before :data:`LATER_MODULES` are imported (its first frames come first)."""
THEMES = THEME_NAMES
"""``console.config.ThemeName`` (``console.ui.themes.NAMES`` too): a wrong ``--theme`` is refused before Textual is
imported, and the hosts start before that import."""
GC_PAUSE_S = 5.0
"""The cyclic garbage collector is paused while the TUI starts (the UI's imports and first frames allocate
a few million long-lived objects: collections in between took a tenth to a quarter of the start and freed
next to nothing); it runs again this long after the start (the app's first mount of GPU panels collects
once and freezes what exists, see ``console/ui/views.py``)."""


def run(ctx: CliContext, args: argparse.Namespace) -> int:
    """Stage the hosts (the demo's, or the operator's), build the backend and run the app until quit."""
    if ctx.theme not in THEMES:
        raise UserError(f"unknown theme {ctx.theme!r} (choose from {', '.join(THEMES)})")
    if ctx.demo:
        print("mtpconsole: opening the demo host (simulated GPUs, a hand-started server)…", file=sys.stderr)
    collecting = gc.isenabled()
    gc.disable()
    try:
        return asyncio.run(_main(ctx, resume_gc=collecting))
    finally:
        if collecting:
            gc.enable()


def _import_later() -> None:
    """Import :data:`LATER_MODULES` (in a worker thread, after the first frames)."""
    for name in LATER_MODULES:
        importlib.import_module(name)


def _import_ui() -> None:
    """Import the UI, and parse what the first view needs once (the bundled flag schema: the advisor checks a
    live server's flags with it), off the event loop."""
    for name in UI_MODULES:
        importlib.import_module(name)
    from console.core.flags.sources import bundled_schema

    bundled_schema()


async def _main(ctx: CliContext, *, resume_gc: bool = False) -> int:
    if resume_gc:
        asyncio.get_running_loop().call_later(GC_PAUSE_S, gc.enable)
    audit = make_audit(ctx)
    try:
        async with demo_or_config(ctx, background=True) as (cfg, names):  # the demo comes up behind the app
            links = make_links(ctx, cfg, names, audit)
            # The agents start now, while the UI is imported; the backend's own run() of each link
            # joins these loops (HostLink.run is idempotent), so nothing connects twice.
            early = [asyncio.create_task(link.run()) for link in links]
            await asyncio.to_thread(_import_ui)
            from console.ops.backend import LiveBackend
            from console.ui.app import make_app

            backend = LiveBackend(cfg, links, interval=ctx.interval, read_only=ctx.read_only, audit=audit)
            backend.prestart()  # the app's start shows what the links already have (their first sample)
            app = make_app(backend, theme=ctx.theme, read_only=ctx.read_only, interval=ctx.interval,
                           keymap=cfg.ui.keymap)
            warm: list[asyncio.Future] = []  # holds the warm-up's future until the app ends
            warm_timer = asyncio.get_running_loop().call_later(
                WARM_AFTER_S, lambda: warm.append(asyncio.ensure_future(asyncio.to_thread(_import_later))))
            try:
                await app.run_async()
            finally:
                warm_timer.cancel()  # a quit within WARM_AFTER_S does not start imports on the way out
                for link in links:  # run_async returned without the backend's stop (an error): close here
                    if link.running:
                        await link.close()
                for t in early:
                    t.cancel()
            return int(app.return_code or 0)
    finally:
        audit.close()
