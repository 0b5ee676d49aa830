"""`mtpconsole orphans`: processes holding GPU memory or looking like server workers that belong to no
live server, with the evidence; ``--kill PID`` runs the confirmed kill of one of them."""

from __future__ import annotations

import argparse
import json

from console.commands._ops import emit_result, step_printer, term
from console.commands.context import CliContext, connect_hosts, single_host
from console.errors import UserError
from console.model import KillTarget
from console.ops.lifecycle import kill
from console.ops.orphans import Orphan, ended_ports, find_orphans
from console.redact import redact_obj
from console.remote.link import LinkDown, RequestError

PORTS_ASKED = 32
"""At most this many ended sessions' ports are checked for a listener that outlived them."""


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kill", type=int, default=None, metavar="PID",
                   help="kill this orphan (by pid and start time), confirmed: gone, GPU memory released, port closed")
    p.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL (default 10)")


async def hunt(link) -> list[Orphan]:
    """A fresh snapshot's orphans, with the ports of ended sessions that someone still holds."""
    snap = await link.refresh()
    owners: dict[int, int] = {}
    for port in ended_ports(snap)[:PORTS_ASKED]:
        try:
            r = await link.request("port_owner", {"port": port}, audit=False)
        except (RequestError, LinkDown):
            continue
        if r and r.get("pid"):
            owners[port] = int(r["pid"])
    return find_orphans(snap, port_owners=owners)


def print_orphans(host: str, orphans: list[Orphan]) -> None:
    if not orphans:
        print(f"{term(host)}: no orphans (every server process and GPU memory holder belongs to a live server)")
        return
    print(f"{term(host)}: {len(orphans)} suspected orphan(s)")
    for o in orphans:
        held = ", ".join(f"GPU {i} {m:,} MiB" for i, m in sorted(o.gpu_mem_mib.items())) or "no GPU memory"
        print(f"  pid {o.pid:<8} {held:<22} {term(o.title[:80])}")
        for e in o.evidence:
            print(f"      - {term(e)}")
    print("kill one with: mtpconsole orphans --host HOST --kill PID")


async def run(ctx: CliContext, args: argparse.Namespace) -> int:
    single_host(ctx)
    if args.kill is not None and ctx.read_only:
        raise UserError("read-only: kill is disabled")
    async with connect_hosts(ctx) as links:
        link = links[0]
        orphans = await hunt(link)
        if args.kill is None:
            if ctx.json_output:
                print(json.dumps(redact_obj({"host": link.name, "orphans": [o.model_dump(mode="json")
                                                                          for o in orphans]}), indent=2))
            else:
                print_orphans(link.name, orphans)
            return 0
        o = next((x for x in orphans if x.pid == args.kill), None)
        if o is None:
            raise UserError(f"pid {args.kill} is no orphan on {link.name} (run 'mtpconsole orphans --host "
                            f"{link.name}' to list them; kill a live server with 'mtpconsole kill')")
        if not o.start_ticks:
            raise UserError(f"pid {o.pid} is not visible in {link.name}'s /proc: it cannot be killed from here",
                            exit_code=1)
        if not ctx.json_output:
            print(f"killing orphan pid {o.pid} ({term(o.title[:60])}):")
        r = await kill(link, KillTarget(host=link.name, pid=o.pid, start_ticks=o.start_ticks, port=o.port),
                       step_printer(ctx.json_output), grace=args.grace)
    return emit_result(ctx.json_output, r)
