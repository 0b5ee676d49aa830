"""`mtpconsole status`: connect, take one snapshot per host, print it, exit."""

from __future__ import annotations

import argparse
import asyncio
import json

from console.commands.context import CliContext, connect_hosts
from console.model import HostSnapshot
from console.redact import redact_obj
from console.remote.link import HostLink, LinkDown, RequestError


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timeout", type=float, default=15.0, help="seconds to wait for each host (default 15)")


async def _one(link: HostLink, timeout: float) -> HostSnapshot:
    if link.chan is not None:
        try:
            return await link.refresh(timeout)
        except (LinkDown, RequestError, asyncio.TimeoutError) as e:
            link._set_state("unreachable", f"{link.name}: no snapshot: {str(e) or 'timed out'}")
    return link.snapshot()


def snapshot_json(snap: HostSnapshot) -> dict:
    return redact_obj(snap.model_dump(mode="json"))


async def run(ctx: CliContext, args: argparse.Namespace) -> int:
    async with connect_hosts(ctx, require=False) as links:
        snaps = await asyncio.gather(*(_one(lk, args.timeout) for lk in links))
    ok = all(s.connection.state == "connected" for s in snaps)
    if ctx.json_output:
        print(json.dumps({"hosts": [snapshot_json(s) for s in snaps]}, indent=2))
    else:
        for s in snaps:
            print(render_text(s))
    return 0 if ok else 1


def render_text(s: HostSnapshot) -> str:
    c = s.connection
    from console.commands._ops import term
    from console.redact import redact_argv

    lines = [f"{term(s.name)}: {c.state}" + (f" ({c.rtt_ms:.0f} ms)" if c.rtt_ms is not None else "")
             + (f" — {term(c.error)}" if c.error else "")]
    if c.state != "connected":
        return lines[0]
    if not s.gpus:
        lines.append(f"  GPUs: none ({term(s.gpu_error or s.gpu_source)})")
    for g in s.gpus:
        def f(v, unit, fmt="{:.0f}"):
            return "N/A" if v is None else fmt.format(v) + unit
        lines.append(f"  GPU {g.index} {term(g.name or '')}: {f(g.power_w, ' W')}/{f(g.power_limit_w, ' W')}  "
                     f"util {f(g.util_pct, '%')}  mem {f(g.mem_used_mib, '')}/{f(g.mem_total_mib, ' MiB')}  "
                     f"{f(g.temp_c, '°C')}  procs {', '.join(str(p.pid) for p in g.procs) or '-'}")
    for p in s.servers:
        lines.append(f"  pid {p.pid} [{p.role}] {term(' '.join(redact_argv(p.argv)))[:100]}")
    for ss in s.sessions:
        state = "ended" if ss.exit else ("alive" if ss.server_alive else "starting")
        lines.append(f"  session {term(ss.session_id)}: {state}")
    return "\n".join(lines)
