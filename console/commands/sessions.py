"""`mtpconsole sessions`: every session on a host with its true state (classified from its own log)."""

from __future__ import annotations

import argparse
import json
import time

from console.commands._ops import term
from console.commands.context import CliContext, connect_hosts, single_host
from console.ops.sessions import derive_views
from console.redact import redact_obj


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--all", action="store_true", help="include every ended session (default: live + recent)")


async def classify_sessions(link, snap) -> dict:
    """Classify each session from the tail of its own log plus its exit record."""
    from console.ops.classify import classify

    out = {}
    for s in snap.sessions:
        try:
            r = await link.request("read_log", {"session_id": s.session_id, "tail_bytes": 256 * 1024}, audit=False)
            out[s.session_id] = classify(r["data"], s.exit)
        except Exception:
            continue
    return out


async def run(ctx: CliContext, args: argparse.Namespace) -> int:
    single_host(ctx)
    async with connect_hosts(ctx) as links:
        link = links[0]
        snap = await link.refresh()
        classes = await classify_sessions(link, snap)
        views = derive_views(snap, classes, time.time(), interval=1e9)
    if ctx.json_output:
        print(json.dumps(redact_obj([v.model_dump(mode="json") for v in views]), indent=2))
        return 0
    if not views:
        print(f"{term(link.name)}: no sessions")
    for v in views:
        what = term(v.session_id or f"foreign pid {v.launcher_pid}")
        extra = f" {v.cause}: {v.line}" if v.state == "failed" and v.cause else ""
        print(f"{what:<36} {v.state.upper():<10} GPU {','.join(map(str, v.gpus)) or '-':<5} "
              f"port {v.port or '-':<6} {term(v.flags_summary + extra)}")
    return 0
