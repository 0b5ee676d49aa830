"""`mtpconsole sessions`: every session on a host with its true state (classified from its own log)."""

from __future__ import annotations

import argparse
import json
import time

from console.commands._ops import term
from console.commands.context import CliContext, connect_hosts, single_host
from console.core.redact import redact_obj
from console.core.sessions import derive_views


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--all", action="store_true", help="include every ended session (default: live + recent)")
    p.add_argument("--state", choices=["live", "failed", "stopped", "ended", "ready", "foreign"], default=None,
                   help="only these sessions (live: still running; ended: failed or stopped)")


LIVE = ("launching", "loading", "ready", "stopping", "foreign", "stale", "unreachable")


def wanted(state: str, flt: str | None) -> bool:
    """Whether a session in ``state`` passes ``--state``."""
    if flt is None:
        return True
    if flt == "live":
        return state in LIVE
    if flt == "ended":
        return state in ("failed", "stopped")
    return state == flt


def age(started: float | None, now: float) -> str:
    """Since when the session exists, short (``42s``, ``17m``, ``3h``, ``2d``)."""
    if started is None:
        return "-"
    d = max(0.0, now - started)
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if d >= n:
            return f"{d / n:.0f}{unit}"
    return f"{d:.0f}s"


async def classify_sessions(link, snap) -> dict:
    """Classify each session from the tail of its own log plus its exit record."""
    from console.core.classify import classify

    out = {}
    for s in snap.sessions:
        try:
            chunk = await link.client.read_log(s.session_id, tail_bytes=256 * 1024)
            out[s.session_id] = classify(chunk.data, s.exit)
        except Exception:
            continue
    return out


async def run(ctx: CliContext, args: argparse.Namespace) -> int:
    single_host(ctx)
    async with connect_hosts(ctx) as links:
        link = links[0]
        snap = await link.refresh()
        if args.all:  # the history: every run directory, not only the recent ones a sample carries
            every = await link.client.sessions()  # a bad one is listed broken
            snap = snap.model_copy(update={"sessions": every})
        classes = await classify_sessions(link, snap)
        now = time.time()
        views = [v for v in derive_views(snap, classes, now, interval=1e9) if wanted(v.state, args.state)]
    if ctx.json_output:
        print(json.dumps(redact_obj([v.model_dump(mode="json") for v in views]), indent=2))
        return 0
    if not views:
        print(f"{term(link.name)}: no sessions")
    else:
        print(f"{'SESSION / PID':<36} {'STATE':<10} {'GPU':<9} {'PORT':<10} {'AGE':<5} {'ACK':<3} "
              "CAUSE / FLAGS")
    for v in views:
        what = term(v.session_id or f"foreign pid {v.launcher_pid}")
        extra = f" {v.cause}: {v.line}" if v.state == "failed" and v.cause else ""
        ack = "✓" if v.acknowledged else "-"
        print(f"{what:<36} {v.state.upper():<10} GPU {','.join(map(str, v.gpus)) or '-':<5} "
              f"port {v.port or '-':<6} {age(v.up_since, now):<5} {ack:<3} {term(v.flags_summary + extra)}")
    return 0
