"""The TUI entry point: ``mtpconsole`` with no subcommand."""

from __future__ import annotations

import argparse
import asyncio
import sys

from console.commands.context import CliContext, demo_or_config, make_audit, make_links
from console.errors import UserError


def run(ctx: CliContext, args: argparse.Namespace) -> int:
    """Stage the hosts (the demo's, or the operator's), build the backend and run the app until quit."""
    from console.ui.themes import NAMES

    if ctx.theme not in NAMES:
        raise UserError(f"unknown theme {ctx.theme!r} (choose from {', '.join(NAMES)})")
    if ctx.demo:
        print("mtpconsole: staging the demo host (simulated GPUs, a hand-started server)…", file=sys.stderr)
    return asyncio.run(_main(ctx))


async def _main(ctx: CliContext) -> int:
    from console.ops.backend import LiveBackend
    from console.ui.app import make_app

    audit = make_audit(ctx)
    try:
        async with demo_or_config(ctx, background=True) as (cfg, names):  # the demo comes up behind the app
            backend = LiveBackend(cfg, make_links(ctx, cfg, names, audit), interval=ctx.interval,
                                  read_only=ctx.read_only, audit=audit)
            backend.prestart()  # the hosts connect while the app starts: data in the first frames
            app = make_app(backend, theme=ctx.theme, read_only=ctx.read_only, interval=ctx.interval,
                           keymap=cfg.ui.keymap)
            await app.run_async()
            return int(app.return_code or 0)
    finally:
        audit.close()
