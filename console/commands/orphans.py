"""`mtpconsole orphans`: processes holding GPU memory or looking like server workers that belong to no
live server: proven orphans with their evidence, and foreign ones (not proven: another user's, started by a
live wrapper or router...) with why they are not killable here; ``--kill PID`` runs the confirmed kill of a
proven orphan, re-proven on a fresh snapshot first (a foreign pid is refused, rc 2)."""

from __future__ import annotations

import argparse
import json

from console.commands._ops import emit_result, step_printer, term
from console.commands.context import CliContext, connect_hosts, single_host
from console.core.orphans import Foreign, OrphanReport, ended_ports, hunt_snapshot
from console.core.redact import redact_obj
from console.errors import UnknownProcess, UserError
from console.link.errors import LinkDown, RequestError
from console.model import KillTarget
from console.ops.lifecycle import kill

PORTS_ASKED = 32
"""At most this many ended sessions' ports are checked for a listener that outlived them."""


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kill", type=int, default=None, metavar="PID",
                   help="kill this orphan (by pid and start time), confirmed: gone, GPU memory released, port closed")
    p.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL (default 10)")


async def hunt(link) -> OrphanReport:
    """A fresh snapshot's orphans and foreign suspects, with the ports of ended sessions someone still holds."""
    snap = await link.refresh()
    owners: dict[int, int] = {}
    for port in ended_ports(snap)[:PORTS_ASKED]:
        try:
            owner = await link.client.port_owner(port)
        except (RequestError, LinkDown):
            continue
        if owner is not None and owner.pid:
            owners[port] = owner.pid
    return hunt_snapshot(snap, port_owners=owners)


def _held(gpu_mem_mib: dict[int, int]) -> str:
    return ", ".join(f"GPU {i} {m:,} MiB" for i, m in sorted(gpu_mem_mib.items())) or "no GPU memory"


def print_report(rep: OrphanReport) -> None:
    host = term(rep.host)
    if not rep.orphans:
        print(f"{host}: no proven orphans")
    else:
        print(f"{host}: {len(rep.orphans)} orphan(s), each proven by the facts below")
        for o in rep.orphans:
            print(f"  pid {o.pid:<8} {_held(o.gpu_mem_mib):<22} {term(o.title[:80])}")
            for e in o.evidence:
                print(f"      - {term(e)}")
        print("kill one with: mtpconsole orphans --host HOST --kill PID")
    if rep.foreign:
        print(f"{host}: {len(rep.foreign)} foreign process(es) of no live session here, not proven orphans "
              "(never killed by --kill):")
        for f in rep.foreign:
            owner = f"{f.user or '?'}" + (f" (uid {f.uid})" if f.uid is not None else "")
            print(f"  pid {f.pid:<8} {_held(f.gpu_mem_mib):<22} {owner:<16} {term(f.title[:60])}")
            print(f"      - not killable here: {term(f.why)}")


def refusal(f: Foreign, host: str) -> UserError:
    return UserError(f"pid {f.pid} on {host} is not proven an orphan, so it is not killed: {f.why}"
                     " (kill a server you know with 'mtpconsole kill --pid PID', which names what it hits)",
                     kind="not_proven")


async def run(ctx: CliContext, args: argparse.Namespace) -> int:
    single_host(ctx)
    if args.kill is not None and ctx.read_only:
        raise UserError("read-only: kill is disabled", kind="read_only")
    async with connect_hosts(ctx) as links:
        link = links[0]
        rep = await hunt(link)
        if args.kill is None:
            if ctx.json_output:
                print(json.dumps(redact_obj(rep.model_dump(mode="json")), indent=2))
            else:
                print_report(rep)
            return 0
        f = next((x for x in rep.foreign if x.pid == args.kill), None)
        if f is not None:
            raise refusal(f, link.name)
        o = next((x for x in rep.orphans if x.pid == args.kill), None)
        if o is None:
            raise UnknownProcess(f"pid {args.kill} is no orphan on {link.name} (run 'mtpconsole orphans --host "
                            f"{link.name}' to list them; kill a live server with 'mtpconsole kill')")
        if not ctx.json_output:
            print(f"killing orphan pid {o.pid} ({term(o.title[:60])}):")
        r = await kill(link, KillTarget(host=link.name, pid=o.pid, start_ticks=o.start_ticks, port=o.port,
                                        as_orphan=True), step_printer(ctx.json_output), grace=args.grace)
    return emit_result(ctx.json_output, r)
